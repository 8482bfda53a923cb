//go:build integration

package integration

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// The exec guard end to end: Landlock, seccomp and the exec
// audit under `nsgate run` and `nsgate guard`, as root and as an ordinary
// user. Denied execs must show as an ordinary error in the worker (the
// shell says "Permission denied" and goes on) and as an `exec` deny record
// in the audit log that names the path the worker asked for.

// execRecords returns the exec records of an audit log.
func execRecords(t *testing.T, log string) []record {
	t.Helper()
	var out []record
	for _, r := range readAudit(t, log) {
		if r.str("event") == "exec" {
			out = append(out, r)
		}
	}
	return out
}

// wantExec fails unless the log has an exec record with action whose path
// is path and whose reason contains reason.
func wantExec(t *testing.T, log, action, path, reason string) {
	t.Helper()
	recs := execRecords(t, log)
	for _, r := range recs {
		if r.str("action") == action && r.str("path") == path && strings.Contains(r.str("reason"), reason) {
			return
		}
	}
	t.Errorf("no exec %s of %q with reason containing %q; exec records: %v", action, path, reason, recs)
}

// shellDenied checks a worker shell's view of a refused exec: an ordinary
// "Permission denied" and the script went on.
func shellDenied(t *testing.T, r result) {
	t.Helper()
	if !strings.Contains(r.stderr, "Permission denied") {
		t.Errorf("the shell did not report Permission denied: %q", r.stderr)
	}
	if !strings.Contains(r.stdout, "went on") {
		t.Errorf("the shell did not go on after the refusal: stdout %q", r.stdout)
	}
}

func TestGuardShellCannotRunLs(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		log := filepath.Join(dir, "denied.jsonl")
		r := runNsgate(t, m, "run", "--audit", log, "--", "/bin/sh", "-c", "ls /; echo went on")
		shellDenied(t, r)
		if strings.Contains(r.stdout, "proc") {
			t.Errorf("ls ran: %q", r.stdout)
		}
		wantExec(t, log, "deny", "/usr/bin/ls", "not in the exec allowlist")
		sh, _ := filepath.EvalSymlinks("/bin/sh")
		wantExec(t, log, "allow", sh, "") // init's own exec of the worker

		log = filepath.Join(dir, "allowed.jsonl")
		r = runNsgate(t, m, "run", "--audit", log, "--exec-allow", "/usr/bin/ls", "--", "/bin/sh", "-c", "ls /")
		if r.code != 0 || !strings.Contains(r.stdout, "proc") {
			t.Errorf("with --exec-allow /usr/bin/ls: exit %d, stdout %q; want the listing of /", r.code, r.stdout)
		}
		wantExec(t, log, "allow", "/usr/bin/ls", "")
	})
}

// TestGuardRefusesExecTricks: item by item, the ways around an exec
// allowlist, each refused with an ordinary error and audited.
func TestGuardRefusesExecTricks(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		sh, err := filepath.EvalSymlinks("/bin/sh")
		if err != nil {
			t.Fatal(err)
		}
		ls, err := filepath.EvalSymlinks("/usr/bin/ls")
		if err != nil {
			t.Fatal(err)
		}
		shm, err := os.MkdirTemp("/dev/shm", "nsgate-it-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(shm) })
		os.Chmod(shm, 0o755)
		copyTmp := copyExec(t, sh, filepath.Join(dir, "sh-copy"))
		copyShm := copyExec(t, sh, filepath.Join(shm, "sh-copy"))
		symlink := filepath.Join(dir, "ls-symlink")
		if err := os.Symlink(ls, symlink); err != nil {
			t.Fatal(err)
		}
		hardlink := filepath.Join(dir, "ls-hardlink")
		if err := os.Link(ls, hardlink); err != nil {
			// /tmp on another file system: link a copy instead (still
			// the same file under two names, outside the allowlist).
			if !errors.Is(err, syscall.EXDEV) {
				t.Fatal(err)
			}
			os.Link(copyExec(t, ls, filepath.Join(dir, "ls-copy")), hardlink)
		}
		ldso := elfInterpreter(t, sh)
		// valgrind's tools load the program they run themselves, with
		// no exec the guard would see (the attack review ran a copy of
		// a shell outside the allowlist that way under --exec-allow /usr).
		valgrind, err := exec.LookPath("valgrind")
		need(t, "valgrind (Debian package valgrind)", err)
		vgTool, _ := filepath.Glob("/usr/libexec/valgrind/none-*-linux")
		if len(vgTool) == 0 {
			vgTool, _ = filepath.Glob("/usr/lib/*/valgrind/none-*-linux")
		}
		if len(vgTool) == 0 {
			t.Fatal("valgrind's tool none-*-linux not found")
		}
		scripts := filepath.Join(dir, "scripts")
		if err := os.Mkdir(scripts, 0o755); err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(scripts, "list")
		if err := os.WriteFile(script, []byte("#!"+ls+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}

		for i, tc := range []struct {
			why, cmd, path, reason string
			extra                  []string
		}{
			{why: "a copy of an allowed binary in /tmp", cmd: copyTmp, path: copyTmp, reason: "not in the exec allowlist"},
			{why: "a copy of an allowed binary in /dev/shm", cmd: copyShm, path: copyShm, reason: "not in the exec allowlist"},
			{why: "a symbolic link to a denied binary", cmd: symlink, path: symlink, reason: ls + " is not in the exec allowlist"},
			{why: "a hard link to a denied binary", cmd: hardlink, path: hardlink, reason: "not in the exec allowlist"},
			{why: "the ELF interpreter invoked directly", cmd: ldso + " " + ls + " /", path: ldso, reason: "ELF interpreter"},
			{why: "a #! script whose interpreter is not allowed", cmd: script, path: script, reason: "#! interpreter " + ls,
				extra: []string{"--exec-allow", scripts}},
			{why: "valgrind's tool loading a program outside the allowlist", cmd: valgrind + " --tool=none -q " + copyTmp + " -c 'echo proc'",
				path: vgTool[0], reason: "loads other programs itself", extra: []string{"--exec-allow", "/usr"}},
		} {
			t.Run(tc.why, func(t *testing.T) {
				log := filepath.Join(dir, "trick-"+string(rune('a'+i))+".jsonl")
				// The planted files lie in the caller's /tmp and
				// /dev/shm, which the worker's view replaces with
				// private tmpfs mounts: show them to it read-only.
				args := append([]string{"run", "--audit", log, "--ro", dir, "--ro", shm}, tc.extra...)
				r := runNsgate(t, m, append(args, "--", "/bin/sh", "-c", tc.cmd+"; echo went on")...)
				shellDenied(t, r)
				if strings.Contains(r.stdout, "proc") {
					t.Errorf("the refused program ran: %q", r.stdout)
				}
				wantExec(t, log, "deny", tc.path, tc.reason)
			})
		}

		// Descriptor tricks, tried by the (static) nsgate binary itself:
		// Landlock alone would let both through (a memfd lies on an
		// internal mount; /proc/self/fd/N of nsgate is nsgate).
		for _, tc := range []struct{ why, kind, path, reason string }{
			{"memfd_create + execveat(fd, \"\", AT_EMPTY_PATH)", "memfd", "fd ", "memfd"},
			{"exec through /proc/self/fd/N", "procfd", "/proc/self/fd/", "/proc/self/fd"},
		} {
			t.Run(tc.why, func(t *testing.T) {
				log := filepath.Join(dir, "fd-"+tc.kind+".jsonl")
				r := runNsgate(t, m, "run", "--audit", log, "--", nsgateBin, "__guardprobe", tc.kind)
				if got := strings.TrimSpace(r.stdout); got != "EACCES" {
					t.Errorf("probe printed %q, want EACCES", got)
				}
				var found bool
				for _, rec := range execRecords(t, log) {
					if rec.str("action") == "deny" && strings.HasPrefix(rec.str("path"), tc.path) && strings.Contains(rec.str("reason"), tc.reason) {
						found = true
					}
				}
				if !found {
					t.Errorf("no exec deny of %s... with %q: %v", tc.path, tc.reason, execRecords(t, log))
				}
			})
		}
	})
}

func copyExec(t *testing.T, from, to string) string {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return to
}

func elfInterpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	t.Fatalf("%s is static: no ELF interpreter", path)
	return ""
}

// TestGuardRefusesSyscalls: the seccomp layer answers with ordinary errors
// and nothing reaches the host side.
func TestGuardRefusesSyscalls(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		probe := func(t *testing.T, extra []string, args ...string) string {
			t.Helper()
			a := append([]string{"run"}, extra...)
			a = append(a, "--", nsgateBin, "__guardprobe")
			r := runNsgate(t, m, append(a, args...)...)
			return strings.TrimSpace(r.stdout)
		}
		for _, tc := range []struct{ why, kind, want string }{
			{"ptrace (ESRCH without the guard)", "ptrace", "EPERM"},
			{"user namespaces without --allow-userns", "userns", "unshare=EPERM clone=EPERM"},
			{"io_uring_setup (EFAULT without the guard)", "io_uring", "EPERM"},
			{"bpf", "bpf", "EPERM"},
			{"AF_PACKET", "packet", "EPERM"},
			{"ioctl TIOCSTI (ENOTTY on /dev/null without the guard)", "tiocsti", "EPERM"},
		} {
			t.Run(tc.why, func(t *testing.T) {
				if got := probe(t, nil, tc.kind); got != tc.want {
					t.Errorf("got %q, want %q", got, tc.want)
				}
			})
		}
		t.Run("user namespaces with --allow-userns", func(t *testing.T) {
			// unshare is refused by the kernel itself (EINVAL: the
			// caller is multithreaded), which shows it passed the filter.
			if got := probe(t, []string{"--allow-userns"}, "userns"); got != "unshare=EINVAL clone=ok" {
				t.Errorf("got %q, want unshare=EINVAL clone=ok", got)
			}
		})

		t.Run("unix sockets", func(t *testing.T) {
			sock := filepath.Join(dir, "host.sock")
			var hits atomic.Int64
			ln, err := internet.ListenUnixCounting(sock, &hits, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			// The socket lies in the caller's /tmp, which the worker's
			// view replaces: show the directory to it read-only.
			ro := []string{"--ro", dir}
			if got := probe(t, ro, "unix", sock); got != "EPERM" {
				t.Errorf("socket(AF_UNIX) without --allow-unix: %q, want EPERM", got)
			}
			if n := hits.Load(); n != 0 {
				t.Errorf("the host-side socket saw %d connections without --allow-unix", n)
			}
			// --allow-unix lets the worker make sockets, not reach the
			// host's: one bound on the host is hidden, even in a
			// directory shown with --ro...
			if got := probe(t, append(ro, "--allow-unix"), "unix", sock); got == "ok" {
				t.Errorf("connect with --allow-unix to a host socket: %q, want a refusal", got)
			}
			if n := hits.Load(); n != 0 {
				t.Errorf("the host-side socket saw %d connections with --allow-unix, want 0", n)
			}
			// ...unless the user names that very socket.
			if got := probe(t, []string{"--ro", sock, "--allow-unix"}, "unix", sock); got != "ok" {
				t.Errorf("connect with --allow-unix --ro SOCKET: %q, want ok", got)
			}
			deadline := time.Now().Add(2 * time.Second)
			for hits.Load() != 1 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := hits.Load(); n != 1 {
				t.Errorf("the host-side socket saw %d connections with --allow-unix, want 1", n)
			}
		})

		t.Run("an ia32 system call", func(t *testing.T) {
			prog := filepath.Join(dir, "ia32")
			if err := os.WriteFile(prog, ia32Program(), 0o755); err != nil {
				t.Fatal(err)
			}
			// Unguarded, the program exits 42 when the kernel runs i386
			// code at all. A kernel without IA32 emulation refuses the
			// program itself (ENOEXEC): the foreign ABI does not exist
			// there, so there is nothing for the filter to refuse (its
			// decision for a foreign arch is checked by the guard's BPF
			// unit tests). That is asserted, not skipped.
			err := exec.Command(prog).Run()
			var ee *exec.ExitError
			if errors.Is(err, syscall.ENOEXEC) {
				t.Logf("this kernel has no IA32 emulation: the i386 program is refused before it runs (%v)", err)
				if got := probe(t, []string{"--exec-allow", prog}, "ia32", prog); got == "ok" {
					t.Errorf("under the guard the i386 program reported %q, want a refusal", got)
				}
				return
			}
			if !errors.As(err, &ee) || ee.ExitCode() != 42 {
				need(t, "a kernel that runs i386 programs (CONFIG_IA32_EMULATION)", errors.New("the test program did not exit 42: "+errString(err)))
			}
			if got := probe(t, []string{"--exec-allow", prog}, "ia32", prog); got != "EPERM" {
				t.Errorf("got %q, want EPERM (the program saw -EPERM and ran ud2)", got)
			}
		})
	})
}

func errString(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// ia32Program returns a static i386 executable that makes one ia32 system
// call (getpid through int 0x80): exit(42) if it worked, ud2 (SIGILL) if it
// got -EPERM, with no further system call in that case.
func ia32Program() []byte {
	const ehsize, phsize, base = 52, 32, 0x08048000
	code := []byte{
		0xb8, 20, 0, 0, 0, // mov eax, 20 (getpid)
		0xcd, 0x80, // int 0x80
		0x83, 0xf8, 0xff, // cmp eax, -1 (-EPERM)
		0x74, 0x0c, // je ud2
		0xbb, 42, 0, 0, 0, // mov ebx, 42
		0xb8, 1, 0, 0, 0, // mov eax, 1 (exit)
		0xcd, 0x80, // int 0x80
		0x0f, 0x0b, // ud2
	}
	size := uint32(ehsize + phsize + len(code))
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	binary.Write(&b, le, []uint16{2, 3})                                    // ET_EXEC, EM_386
	binary.Write(&b, le, []uint32{1, base + ehsize + phsize, ehsize, 0, 0}) // version, entry, phoff, shoff, flags
	binary.Write(&b, le, []uint16{ehsize, phsize, 1, 0, 0, 0})
	binary.Write(&b, le, []uint32{1, 0, base, base, size, size, 5, 0x1000}) // PT_LOAD, R+X
	b.Write(code)
	return b.Bytes()
}

// TestGuardNoExecScratch: the writable scratch directories are mounted
// noexec in the worker's mount namespace (a second layer under Landlock),
// rootless as well as root, and nothing is reported degraded. The worker
// reads its own mount table with shell builtins only.
func TestGuardNoExecScratch(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dirs := []string{"/tmp", "/var/tmp", "/dev/shm"}
		r := runNsgate(t, m, "run", "--", "/bin/sh", "-c",
			`while read -r id parent dev root mp opts rest; do echo "$mp $opts"; done < /proc/self/mountinfo`)
		last := map[string]string{} // mount point -> options of the top mount
		for _, l := range strings.Split(r.stdout, "\n") {
			if mp, opts, ok := strings.Cut(l, " "); ok {
				last[mp] = opts
			}
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); err != nil {
				continue
			}
			if !strings.Contains(","+last[d]+",", ",noexec,") {
				t.Errorf("%s in the worker has options %q, want noexec", d, last[d])
			}
		}
		if strings.Contains(r.stderr, "noexec:") {
			t.Errorf("a scratch directory was reported degraded: %q", r.stderr)
		}
	})
}

// TestGuardFailsClosed: without Landlock, run refuses to start and says
// which layer is missing; with --exec-guard=best-effort it starts, records
// the missing layer, and the exec audit still refuses what lies outside
// the allowlist.
func TestGuardFailsClosed(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		run := func(args ...string) result {
			// The hidden flag makes nsgate treat Landlock as missing.
			args = append([]string{args[0], "--unsafe-break", "landlock"}, args[1:]...)
			cmd := nsgateCmd(m, args...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			r := result{stdout: out.String(), stderr: errb.String()}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				r.code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			t.Logf("nsgate %v -> %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
			return r
		}
		r := run("run", "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, "landlock unavailable") || !strings.Contains(r.stderr, "--exec-guard=best-effort") {
			t.Errorf("strict without Landlock: exit %d, stderr %q; want 125 naming landlock and the way out", r.code, r.stderr)
		}
		if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("want one line on stderr, got %q", r.stderr)
		}
		r = run("guard", "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, "landlock unavailable") {
			t.Errorf("guard, strict without Landlock: exit %d, stderr %q", r.code, r.stderr)
		}

		log := filepath.Join(dir, "best-effort.jsonl")
		r = run("run", "--exec-guard=best-effort", "--audit", log, "--", "/bin/sh", "-c", "ls /; echo went on")
		if r.code != 0 {
			t.Fatalf("best effort: exit %d", r.code)
		}
		recs := readAudit(t, log)
		deg, _ := recs[0]["degraded"].([]any)
		if recs[0].str("event") != "start" || len(deg) != 1 || deg[0] != "landlock" {
			t.Errorf("start record %v; want degraded [landlock]", recs[0])
		}
		shellDenied(t, r)
		wantExec(t, log, "deny", "/usr/bin/ls", "not in the exec allowlist")
	})
}

// TestGuardCommand: `nsgate guard` (no namespaces) applies the same guard
// and audits every exec attempt.
func TestGuardCommand(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		log := filepath.Join(dir, "guard.jsonl")
		r := runNsgate(t, m, "guard", "--audit", log, "--", "/bin/sh", "-c", "ls /; echo went on; exit 3")
		if r.code != 3 {
			t.Errorf("exit %d, want the command's 3", r.code)
		}
		shellDenied(t, r)
		wantExec(t, log, "deny", "/usr/bin/ls", "not in the exec allowlist")
		ldso := elfInterpreter(t, "/bin/sh")
		r = runNsgate(t, m, "guard", "--audit", log, "--", "/bin/sh", "-c", ldso+" /usr/bin/ls /; echo went on")
		shellDenied(t, r)
		wantExec(t, log, "deny", ldso, "ELF interpreter")
		if v := runNsgate(t, m, "audit", "verify", log); v.code != 0 {
			t.Errorf("audit verify of the appended log: exit %d %s", v.code, v.stderr)
		}
		r = runNsgate(t, m, "guard", "--", nsgateBin, "__guardprobe", "ptrace")
		if got := strings.TrimSpace(r.stdout); got != "EPERM" {
			t.Errorf("ptrace under nsgate guard: %q, want EPERM", got)
		}
	})
}
