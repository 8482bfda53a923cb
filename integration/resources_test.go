//go:build integration

package integration

import (
	"strconv"
	"strings"
	"testing"
)

// TestScratchSpaceBounded: the worker's private directories (/tmp,
// /var/tmp, /dev/shm, $HOME) share one tmpfs of a bounded size and inode
// count. Each was a tmpfs of the kernel's default size, half of RAM, so
// four of them let a worker pin twice the machine's memory in files that
// count against no process: the OOM killer cannot free them by killing
// the worker, and picks someone else.
func TestScratchSpaceBounded(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		// The default: bounded, well below what the kernel's default gives.
		r := runNsgate(t, m, "run", "--exec-allow", "/usr/bin/stat", "--", "/bin/sh", "-c",
			`for d in /tmp /var/tmp /dev/shm "$HOME"; do stat -f -c 'size %b %S %c' "$d"; done`)
		if r.code != 0 {
			t.Fatalf("exit %d; stderr %q", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 4 {
			t.Fatalf("stdout %q: want a size for each of the 4 private directories", r.stdout)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 4 {
				t.Fatalf("line %q", l)
			}
			blocks, _ := strconv.ParseInt(f[1], 10, 64)
			bsize, _ := strconv.ParseInt(f[2], 10, 64)
			inodes, _ := strconv.ParseInt(f[3], 10, 64)
			if size := blocks * bsize; size <= 0 || size > 2<<30 {
				t.Errorf("a private directory holds %d bytes, want at most the default 2 GiB", size)
			}
			if inodes <= 0 || inodes > (2<<30)/4096 {
				t.Errorf("a private directory holds %d inodes, want at most one per 4 KiB of the default size", inodes)
			}
		}

		// --scratch-size: one budget for all of them. 6 MiB fit in /tmp; 6
		// more do not fit in $HOME while they are there, and do in
		// /dev/shm once they are gone.
		r = runNsgate(t, m, "run", "--scratch-size", "8M", "--exec-allow", "/usr/bin/head", "--exec-allow", "/usr/bin/rm", "--", "/bin/sh", "-c",
			`head -c 6M /dev/zero > /tmp/a && echo tmp-ok
head -c 6M /dev/zero > "$HOME/b" 2>/dev/null && echo home-ok || echo home-full
rm -f /tmp/a "$HOME/b"
head -c 6M /dev/zero > /dev/shm/c && echo shm-ok
rm -f /dev/shm/c
i=0; while [ $i -lt 4000 ]; do printf "" 2>/dev/null > /var/tmp/f$i || break; i=$((i+1)); done; echo "files $i"`)
		if r.code != 0 {
			t.Fatalf("exit %d; stderr %q", r.code, r.stderr)
		}
		for _, want := range []string{"tmp-ok", "home-full", "shm-ok"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout %q lacks %q", r.stdout, want)
			}
		}
		if strings.Contains(r.stdout, "home-ok") {
			t.Errorf("12 MiB fit in the private directories of an 8 MiB --scratch-size")
		}
		var files int
		for _, l := range strings.Split(r.stdout, "\n") {
			if n, ok := strings.CutPrefix(l, "files "); ok {
				files, _ = strconv.Atoi(n)
			}
		}
		if files == 0 || files >= 4000 {
			t.Errorf("the worker made %d empty files in an 8 MiB --scratch-size; want fewer than 2,048 (one inode per 4 KiB)", files)
		}
	})
}
