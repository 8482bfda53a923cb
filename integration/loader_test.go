//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuardRefusesLoadersByWhatTheyAre: a dynamic loader run directly
// loads any readable program itself (an mmap, no execve), so the exec
// audit refuses running one. It used to know loaders by their name
// (ld-*.so*) after resolving links, and missed two that an allowed
// directory may hold:
//   - musl's loader, /lib/ld-musl-ARCH.so.1, a link to musl's libc.so:
//     under --exec-allow /usr/lib it ran /usr/bin/ischroot, which the
//     allowlist refuses when run directly;
//   - a renamed copy of glibc's ld.so in an --exec-allow directory.
//
// Each must be refused, audited, and the program it names must not run.
func TestGuardRefusesLoadersByWhatTheyAre(t *testing.T) {
	musl, _ := filepath.Glob("/lib/ld-musl-*.so.1")
	if len(musl) == 0 {
		need(t, "musl's dynamic loader /lib/ld-musl-*.so.1 (Debian package musl)", errNotFound("ld-musl"))
	}
	const prog = "/usr/bin/ischroot" // debianutils, Essential
	forEachMode(t, func(t *testing.T, m mode) {
		dir, logs := workDir(t, m), workDir(t, m)
		ldso := elfInterpreter(t, "/bin/sh")
		loaders := filepath.Join(dir, "loaders")
		mkdirMode(t, m, loaders)
		renamed := copyExec(t, ldso, filepath.Join(loaders, "run-elf"))

		for i, tc := range []struct {
			why, loader string
			extra       []string
		}{
			{"musl's loader, a link to its libc.so, in an allowed /usr/lib", musl[0], []string{"--exec-allow", "/usr/lib"}},
			{"a renamed copy of glibc's ld.so in an allowed directory", renamed, []string{"--ro", dir, "--exec-allow", loaders}},
		} {
			t.Run(tc.why, func(t *testing.T) {
				log := filepath.Join(logs, "loader-"+string(rune('a'+i))+".jsonl")
				args := append([]string{"run", "--audit", log}, tc.extra...)
				r := runNsgate(t, m, append(args, "--", "/bin/sh", "-c", tc.loader+" "+prog+" --version; echo went on")...)
				shellDenied(t, r)
				if strings.Contains(r.stdout, "ischroot") {
					t.Errorf("the loader ran %s, which the allowlist refuses: %q", prog, r.stdout)
				}
				wantExec(t, log, "deny", tc.loader, "ELF interpreter")
			})
		}
	})
}

type errNotFound string

func (e errNotFound) Error() string { return string(e) + " not found" }

// mkdirMode makes dir (mode 0755), owned by the mode's user.
func mkdirMode(t *testing.T, m mode, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	if m.uid >= 0 {
		if err := os.Chown(dir, m.uid, m.gid); err != nil {
			t.Fatal(err)
		}
	}
}
