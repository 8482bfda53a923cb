//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// buildQuotaHog builds integration/quotahog into dir.
func buildQuotaHog(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "quotahog")
	cmd := exec.Command("go", "build", "-o", bin, "./integration/quotahog")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build quotahog: %v\n%s", err, out)
	}
	os.Chmod(bin, 0o755)
	return bin
}

// nproc prints the RLIMIT_NPROC line of /proc/self/limits (dash has no
// ulimit -u).
const nproc = `while read -r l; do case "$l" in "Max processes"*) echo "$l";; esac; done < /proc/self/limits`

// nprocOf returns the soft and hard RLIMIT_NPROC in what nproc printed.
func nprocOf(out string) (soft, hard string) {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "Max" && f[1] == "processes" {
			return f[2], f[3]
		}
	}
	return "", ""
}

// TestWorkerQuotaBounded: what the kernel counts per user is counted for
// the worker's uid on the host too, the caller's own (rootless) or root's:
// inotify instances (128 by default, for every program of that uid) and
// processes (RLIMIT_NPROC). A worker that takes them all leaves the
// caller's editors, file managers and systemd without inotify, and the
// caller's shell unable to fork, while it runs. The worker gets half of
// each inotify quota, and at most --max-procs processes and threads.
func TestWorkerQuotaBounded(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		t.Fatal(err)
	}
	hostMax, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	forEachMode(t, func(t *testing.T, m mode) {
		hog := buildQuotaHog(t, workDir(t, m))
		r := runNsgate(t, m, "run", "--", hog)
		var got, errno int
		if _, err := fmt.Sscanf(r.stdout, "inotify %d %d", &got, &errno); err != nil || r.code != 0 {
			t.Fatalf("exit %d stdout %q: want the count of inotify instances", r.code, r.stdout)
		}
		if got == 0 || got > hostMax/2 {
			t.Errorf("the worker opened %d inotify instances of the %d its uid may hold on the host; want at most half", got, hostMax)
		}

		// A user namespace the worker makes (--allow-userns) has limits of
		// its own, but the kernel counts each instance at every level up to
		// the host: the nested namespace gets no more than the worker.
		r = runNsgate(t, m, "run", "--allow-userns", "--exec-allow", "/usr/bin/unshare", "--exec-allow", hog,
			"--", "/usr/bin/unshare", "--user", hog)
		got = 0
		if _, err := fmt.Sscanf(r.stdout, "inotify %d %d", &got, &errno); err != nil || r.code != 0 {
			t.Fatalf("exit %d stdout %q stderr %q: want the count of inotify instances in a nested user namespace", r.code, r.stdout, r.stderr)
		}
		if got == 0 || got > hostMax/2 {
			t.Errorf("a user namespace the worker made opened %d inotify instances of the %d its uid may hold on the host; want at most half", got, hostMax)
		}

		if m.name == "root" {
			return // RLIMIT_NPROC does not hold for uid 0 (see docs/threat-model.md)
		}
		r = runNsgate(t, m, "run", "--max-procs", "32", "--exec-allow", "/usr/bin/sleep", "--", "/bin/sh", "-c",
			nproc+`
i=0; while [ $i -lt 100 ]; do (sleep 3 &) 2>/dev/null || break; i=$((i+1)); done; echo "forked $i"`)
		if soft, hard := nprocOf(r.stdout); soft != "32" || hard != "32" {
			t.Errorf("stdout %q: want RLIMIT_NPROC 32, soft and hard", r.stdout)
		}
		var forked int
		for _, l := range strings.Split(r.stdout, "\n") {
			if n, ok := strings.CutPrefix(l, "forked "); ok {
				forked, _ = strconv.Atoi(n)
			}
		}
		if forked == 0 || forked >= 32 {
			t.Errorf("the worker started %d processes under --max-procs 32", forked)
		}
		r = runNsgate(t, m, "run", "--", "/bin/sh", "-c", nproc)
		if soft, hard := nprocOf(r.stdout); soft == "" || soft == "unlimited" || hard == "unlimited" {
			t.Errorf("stdout %q: want a bounded RLIMIT_NPROC by default", r.stdout)
		}
	})
}

// TestPcapOnFullDiskSaysSo: a pcap that cannot be written (its disk full:
// the worker can fill the disk through a --rw path) is reported, in the
// exit record's pcap_dropped and on stderr. It was buffered, 1 MiB at a
// time, and the last flush's error was dropped after the exit record had
// said pcap_dropped 0: the pcap came out empty, and nothing said so.
func TestPcapOnFullDiskSaysSo(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		full := mkdirFor(t, m, dir, "full")
		if err := unix.Mount("tmpfs", full, "tmpfs", 0, "size=64k,mode=0777"); err != nil {
			t.Fatalf("mount a small tmpfs for the pcap: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(full, unix.MNT_DETACH) })
		// Fill it: the pcap file can be made, not written.
		f, err := os.Create(filepath.Join(full, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := f.Write(make([]byte, 4096)); err != nil {
				break
			}
		}
		f.Close()
		log := filepath.Join(dir, "audit.jsonl")
		pcap := filepath.Join(full, "cap.pcap")
		r := runNsgate(t, m, "run", "--audit", log, "--pcap", pcap, "--exec-allow", "/usr/bin/getent", "--", "/bin/sh", "-c",
			`for n in a b c d; do getent hosts $n.test; done; exit 0`)
		if r.code != 0 {
			t.Fatalf("exit %d", r.code)
		}
		var dropped uint64
		for _, rec := range readAudit(t, log) {
			if rec.str("event") == "exit" {
				c, _ := rec["counters"].(map[string]any)
				f, _ := c["pcap_dropped"].(float64)
				dropped = uint64(f)
			}
		}
		st, _ := os.Stat(pcap)
		if st == nil || st.Size() != 0 {
			t.Fatalf("the pcap on a full disk holds %v: the test shows nothing", st)
		}
		if dropped == 0 {
			t.Errorf("the pcap is empty and the exit record says pcap_dropped 0")
		}
		if !strings.Contains(r.stderr, "pcap") {
			t.Errorf("stderr %q: want a line saying the pcap is incomplete", r.stderr)
		}
	})
}

// TestSysVShmBounded: SysV shared memory is memory no process is charged
// for once detached, like a private tmpfs; the worker's IPC namespace had
// the kernel's default limits (no limit), so a worker could pin any amount.
// It now gets --scratch-size of it, where the kernel lets init set that:
// only uid 0 of the namespace may, so a rootless run needs --root (without
// it the limit stays the kernel's; docs/threat-model.md).
func TestSysVShmBounded(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		hog := buildQuotaHog(t, workDir(t, m))
		args := []string{"run", "--scratch-size", "8M", "--", hog, "shm", "64"}
		if m.name == "user" {
			args = append([]string{"run", "--root"}, args[1:]...)
		}
		r := runNsgate(t, m, args...)
		var n, errno int
		if _, err := fmt.Sscanf(r.stdout, "shm %d %d", &n, &errno); err != nil || r.code != 0 {
			t.Fatalf("exit %d stdout %q: want the count of segments", r.code, r.stdout)
		}
		if n == 0 || n > 8 || errno == 0 {
			t.Errorf("the worker made %d segments of 1 MiB (errno %d) under --scratch-size 8M; want at most 8, then a refusal", n, errno)
		}
	})
}

// TestWorkerPtysBounded: every devpts instance but the host's shares
// kernel.pty.max less pty.reserve (3,072 ptys by default): a worker that
// held them all left other sandboxes and containers without a pty while it
// ran. Its devpts instance allows 256.
func TestWorkerPtysBounded(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		hog := buildQuotaHog(t, workDir(t, m))
		r := runNsgate(t, m, "run", "--", hog, "pty", "300")
		var n, errno int
		if _, err := fmt.Sscanf(r.stdout, "pty %d %d", &n, &errno); err != nil || r.code != 0 {
			t.Fatalf("exit %d stdout %q: want the count of ptys", r.code, r.stdout)
		}
		if n == 0 || n > 256 {
			t.Errorf("the worker opened %d ptys; want at most 256", n)
		}
	})
}
