//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// TestGuardRefusesBinfmtMisc: since Linux 6.7 binfmt_misc can be mounted
// in a user namespace, whose owner then registers interpreters (magic or
// extension, flags F, C, O, P) for the execs of its processes: an allowed
// program would run an interpreter the worker chose. With --allow-userns
// the worker can make such a namespace, but the guard refuses both ways
// to mount (mount, fsopen) inside it as anywhere. Outside nsgate the same
// probe mounts binfmt_misc, so the refusal is the guard's.
func TestGuardRefusesBinfmtMisc(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		direct := exec.Command(nsgateBin, "__guardprobe", "binfmt")
		if m.uid >= 0 {
			direct.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
		}
		b, err := direct.Output()
		if got := strings.TrimSpace(string(b)); err != nil || got != "mount=ok fsopen=ok" {
			t.Fatalf("without nsgate the probe printed %q (%v), want mount=ok fsopen=ok: the kernel must allow binfmt_misc in a user namespace for this test to mean anything", got, err)
		}
		r := runNsgate(t, m, "run", "--allow-userns", "--", nsgateBin, "__guardprobe", "binfmt")
		if got := strings.TrimSpace(r.stdout); got != "mount=EPERM fsopen=EPERM" {
			t.Errorf("under nsgate run --allow-userns the probe printed %q, want mount=EPERM fsopen=EPERM", got)
		}
	})
}

// TestGuardRefusesOPathExec: a program the worker wrote into its --rw
// directory, opened O_PATH and run with execveat(fd, "", AT_EMPTY_PATH):
// refused by the audit (a descriptor exec) and recorded.
func TestGuardRefusesOPathExec(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		rw, logs := workDir(t, m), workDir(t, m)
		log := filepath.Join(logs, "opath.jsonl")
		r := runNsgate(t, m, "run", "--audit", log, "--rw", rw, "--", nsgateBin, "__guardprobe", "opath", rw)
		if got := strings.TrimSpace(r.stdout); got != "EACCES" {
			t.Errorf("probe printed %q, want EACCES", got)
		}
		if strings.Contains(r.stdout, "RAN") {
			t.Errorf("the copy ran")
		}
		var found bool
		for _, rec := range execRecords(t, log) {
			if rec.str("action") == "deny" && strings.HasPrefix(rec.str("path"), "fd ") &&
				strings.Contains(rec.str("reason"), "exec of a file descriptor ("+filepath.Join(rw, "guardprobe-copy")+")") {
				found = true
			}
		}
		if !found {
			t.Errorf("no exec deny of the copy's descriptor: %v", execRecords(t, log))
		}
	})
}
