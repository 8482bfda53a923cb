//go:build linux && (amd64 || arm64)

package guard

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a one-shot helper (helperMain) instead
// of running tests: the exec audit's probes need a fresh process for calls
// that would replace the caller if they succeeded (execveat).
const helperEnv = "GUARD_TEST_HELPER"

// helperMain runs one helper action and prints its outcome.
//
//	exit0                  exit 0 (a program to execute)
//	execveat-memfd         memfd_create, fill it with this binary, execveat(fd, "", AT_EMPTY_PATH)
//	execveat-fd PATH       open PATH, execveat(fd, "", AT_EMPTY_PATH)
//	memfd-mode             memfd_create(name, 0): print the mode's execute bits and F_SEAL_EXEC
//	memfd-flags            memfd_create with invalid flags, MFD_EXEC, ...: the errno of each
func helperMain(kind string, args []string) int {
	execveat := func(fd int) {
		argv := []string{"helper"}
		env := []string{helperEnv + "=exit0"}
		fmt.Print(errnoOutcome(execveatEmpty(fd, argv, env)))
	}
	switch kind {
	case "exit0":
		return 0
	case "execveat-memfd":
		fd, err := unix.MemfdCreate("guard-helper", 0)
		if err != nil {
			fmt.Print("memfd_create: " + outcome(err))
			return 0
		}
		b, err := os.ReadFile("/proc/self/exe")
		if err != nil {
			fmt.Print(err)
			return 0
		}
		unix.Write(fd, b)
		execveat(fd)
	case "execveat-fd":
		fd, err := unix.Open(args[0], unix.O_RDONLY, 0)
		if err != nil {
			fmt.Print("open: " + outcome(err))
			return 0
		}
		execveat(fd)
	case "memfd-flags":
		try := func(flags uint32) string {
			fd, _, e := syscall.Syscall(unix.SYS_MEMFD_CREATE, uintptr(unsafe.Pointer(&[]byte("x\x00")[0])), uintptr(flags), 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return errnoOutcome(e)
		}
		fmt.Printf("all=%s exec=%s exec+seal=%s cloexec=%s", try(^uint32(0)), try(unix.MFD_EXEC), try(unix.MFD_EXEC|unix.MFD_NOEXEC_SEAL), try(unix.MFD_CLOEXEC))
	case "memfd-mode":
		fd, err := unix.MemfdCreate("guard-helper", 0)
		if err != nil {
			fmt.Print("memfd_create: " + outcome(err))
			return 0
		}
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		seals, _ := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		fmt.Printf("x=%o seal_exec=%v", st.Mode&0o111, seals&unix.F_SEAL_EXEC != 0)
	default:
		fmt.Print("unknown helper " + kind)
	}
	return 0
}

// execveatEmpty is execveat(fd, "", argv, env, AT_EMPTY_PATH), fexecve(3).
func execveatEmpty(fd int, argv, env []string) syscall.Errno {
	empty, _ := syscall.BytePtrFromString("")
	av, _ := syscall.SlicePtrFromStrings(argv)
	ev, _ := syscall.SlicePtrFromStrings(env)
	_, _, e := syscall.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&av[0])), uintptr(unsafe.Pointer(&ev[0])), unix.AT_EMPTY_PATH, 0)
	return e
}

// helper runs this binary as a helper and returns what it printed, or how
// it failed to start.
func helper(kind string, args ...string) string {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+kind)
	out, err := cmd.Output()
	if err != nil {
		return outcome(err) + " " + string(out)
	}
	if len(out) == 0 {
		return "exit 0"
	}
	return string(out)
}

// sendExecListener installs the notifier in this (child) process and
// sends the listener to the test process over fd 3 (a message without a
// descriptor when best effort left it out).
func sendExecListener(cfg Config, rep *childReport) error {
	ctl := 3
	defer unix.Close(ctl)
	l, degraded, err := InstallExecNotifier(cfg)
	if err != nil {
		unix.Sendmsg(ctl, []byte("none"), nil, nil, 0)
		return err
	}
	rep.NotifyDegraded = degraded
	if l == nil {
		return unix.Sendmsg(ctl, []byte("none"), nil, nil, 0)
	}
	defer l.Close()
	return unix.Sendmsg(ctl, []byte("listener"), unix.UnixRights(int(l.Fd())), nil, 0)
}

// serveChild gives cmd a control socket as fd 3 and serves the listener
// the child sends on it with ServeExec, for the plan cfg resolves to.
// events stops the server once the child has exited and returns what it
// reported.
func serveChild(t *testing.T, cfg Config, cmd *exec.Cmd) (events func() ([]ExecEvent, error)) {
	t.Helper()
	plan, err := Resolve(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	child := os.NewFile(uintptr(pair[1]), "ctl-child")
	cmd.ExtraFiles = []*os.File{child}
	var mu sync.Mutex
	var evs []ExecEvent
	type served struct {
		srv *ExecServer
		err error
	}
	ch := make(chan served, 1)
	go func() {
		defer unix.Close(pair[0])
		buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(4))
		_, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, 0)
		if err != nil || oobn == 0 {
			ch <- served{err: err}
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			ch <- served{err: fmt.Errorf("control message: %v", err)}
			return
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			ch <- served{err: fmt.Errorf("rights: %v", err)}
			return
		}
		srv, err := plan.ServeExec(os.NewFile(uintptr(fds[0]), "listener"), func(ev ExecEvent) {
			mu.Lock()
			evs = append(evs, ev)
			mu.Unlock()
		})
		ch <- served{srv: srv, err: err}
	}()
	return func() ([]ExecEvent, error) {
		child.Close()
		s := <-ch
		if s.err != nil {
			return nil, s.err
		}
		if s.srv == nil {
			return nil, nil
		}
		select {
		case <-s.srv.Done():
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("the server did not see the child go")
		}
		err := s.srv.Close()
		mu.Lock()
		defer mu.Unlock()
		return evs, err
	}
}

func init() {
	for name, p := range map[string]func(Plan, string) string{
		"exec-proc-self-exe": func(p Plan, _ string) string {
			cmd := exec.Command("/proc/self/exe")
			cmd.Env = append(os.Environ(), helperEnv+"=exit0")
			return runCmd(cmd)
		},
		"exec-proc-self-fd": func(p Plan, _ string) string {
			f, err := os.Open(p.Path)
			if err != nil {
				return err.Error()
			}
			defer f.Close()
			cmd := exec.Command("/proc/self/fd/3")
			cmd.ExtraFiles = []*os.File{f}
			return runCmd(cmd)
		},
		"exec-dev-fd": func(p Plan, _ string) string {
			f, err := os.Open(p.Path)
			if err != nil {
				return err.Error()
			}
			defer f.Close()
			cmd := exec.Command("/dev/fd/3")
			cmd.ExtraFiles = []*os.File{f}
			return runCmd(cmd)
		},
		"execveat-memfd": func(Plan, string) string { return helper("execveat-memfd") },
		"execveat-fd":    func(p Plan, _ string) string { return helper("execveat-fd", p.Path) },
		"memfd-mode":     func(Plan, string) string { return helper("memfd-mode") },
		"memfd-flags":    func(Plan, string) string { return helper("memfd-flags") },
		"exec-missing":   func(Plan, string) string { return run("/nonexistent/program") },
		"exec-relative-ls": func(Plan, string) string {
			cmd := exec.Command("./ls", "/")
			cmd.Dir = "/bin"
			return runCmd(cmd)
		},
		"exec-dotdot": func(_ Plan, dir string) string {
			// Far more ".." than directories: the walk stops at the root,
			// as the kernel's does.
			cmd := exec.Command(strings.Repeat("../", 40) + "bin/ls")
			cmd.Dir = filepath.Join(dir, "outside")
			return runCmd(cmd)
		},
		"exec-symlink-loop": func(_ Plan, dir string) string {
			a, b := filepath.Join(dir, "loop-a"), filepath.Join(dir, "loop-b")
			os.Symlink(b, a)
			os.Symlink(a, b)
			return run(a)
		},
		"exec-script-bad-interp": func(_ Plan, dir string) string {
			s := filepath.Join(dir, "allowed", "script")
			if err := os.WriteFile(s, []byte("#!/bin/ls\n"), 0o755); err != nil {
				return err.Error()
			}
			return run(s)
		},
		"exec-script-ldso": func(p Plan, dir string) string {
			if len(p.Interpreters) == 0 {
				return "no interpreter"
			}
			s := filepath.Join(dir, "allowed", "ldso-script")
			if err := os.WriteFile(s, []byte("#!"+p.Interpreters[0]+" /bin/ls\n"), 0o755); err != nil {
				return err.Error()
			}
			return run(s)
		},
	} {
		probes[name] = p
	}
}

// findEvent returns the first event whose Path satisfies match.
func findEvent(evs []ExecEvent, match func(ExecEvent) bool) (ExecEvent, bool) {
	for _, e := range evs {
		if match(e) {
			return e, true
		}
	}
	return ExecEvent{}, false
}

func requireExecAudit(t *testing.T) {
	t.Helper()
	s := requireFullSupport(t)
	requireOrSkip(t, s.ExecAudit, "no seccomp user notification: %s", s.ExecAuditWhy)
}

var execAuditProbes = []string{
	"exec-allowed", "exec-symlink", "exec-ls", "exec-copy", "exec-interpreter-directly",
	"exec-memfd", "exec-proc-self-exe", "exec-proc-self-fd", "exec-dev-fd", "execveat-memfd",
	"execveat-fd", "memfd-mode", "memfd-flags", "exec-missing", "exec-relative-ls", "exec-script-bad-interp",
	"exec-script-ldso", "exec-dotdot", "exec-symlink-loop", "socket-unix", "after-exec",
}

func TestExecAudit(t *testing.T) {
	requireExecAudit(t)
	dir := scratch(t)
	cfg := baseConfig(dir)
	rep := runChild(t, childSpec{Cfg: cfg, Apply: true, ExecAudit: true, Dir: dir, Probes: execAuditProbes})
	if rep.ApplyErr != "" || rep.NotifyErr != "" || len(rep.NotifyDegraded) != 0 {
		t.Fatalf("Apply: %q, notifier: %q, degraded %v", rep.ApplyErr, rep.NotifyErr, rep.NotifyDegraded)
	}
	if rep.Status["Seccomp_filters"] != "2" {
		t.Errorf("Seccomp_filters = %q, want 2 (the deny filter and the notifier)", rep.Status["Seccomp_filters"])
	}
	check(t, rep, []expectation{
		{"exec-allowed", "exit 0", "the command runs: the audit lets it through"},
		{"exec-symlink", "exit 0", "a symlink to an allowed program is judged by its target"},
		{"exec-ls", "EACCES", "outside the allowlist"},
		{"exec-copy", "EACCES", "a copy is another file"},
		{"exec-interpreter-directly", "EACCES", "the audit closes the ld.so gap Landlock leaves open"},
		{"exec-memfd", "EACCES", "/proc/self/fd/N of a memfd: the audit closes the memfd gap"},
		{"exec-proc-self-exe", "exit 0", "/proc/self/exe is the caller's own (allowed) program"},
		{"exec-proc-self-fd", "EACCES", "exec through /proc/self/fd, even of an allowed program"},
		{"exec-dev-fd", "EACCES", "/dev/fd is a symlink into /proc/self/fd"},
		{"execveat-memfd", "EACCES", "execveat(AT_EMPTY_PATH) of a memfd"},
		{"execveat-fd", "EACCES", "execveat(AT_EMPTY_PATH) of any descriptor: only paths may be executed"},
		{"memfd-mode", "x=0 seal_exec=true", "memfd_create is performed with MFD_NOEXEC_SEAL: no memfd can be executed"},
		{"memfd-flags", "all=EINVAL exec=EACCES exec+seal=EINVAL cloexec=ok",
			"invalid flags keep the kernel's EINVAL (Chromium checks), MFD_EXEC is refused as under vm.memfd_noexec=2"},
		{"exec-missing", "ENOENT", "a missing file keeps its errno (a shell's PATH search goes on)"},
		{"exec-relative-ls", "EACCES", "a relative path is resolved from the caller's working directory"},
		{"exec-script-bad-interp", "EACCES", "a #! script whose interpreter is not allowed"},
		{"exec-script-ldso", "EACCES", "a #! line naming ld.so is a direct invocation too"},
		{"exec-dotdot", "EACCES", "\"..\" above the root stays at the root: /bin/ls"},
		{"exec-symlink-loop", "ELOOP", "a symlink loop keeps the kernel's errno"},
		{"socket-unix", "EPERM", "the deny filter is still there"},
	})
	if got := rep.Results["after-exec"]; !strings.Contains(got, "exec-ls=EACCES") || !strings.Contains(got, "exec-allowed=exit 0") {
		t.Errorf("after-exec: %q; a program started by execve must still be audited and restricted", got)
	}

	interp := ""
	if len(rep.Plan.Interpreters) > 0 {
		interp = rep.Plan.Interpreters[0]
	}
	for _, w := range []struct {
		why    string
		match  func(ExecEvent) bool
		allow  bool
		reason string
	}{
		{"the allowed command", func(e ExecEvent) bool { return e.Resolved == rep.Plan.Path && e.Allow }, true, ""},
		{"ls", func(e ExecEvent) bool { return e.Path == "/bin/ls" }, false, "not in the exec allowlist"},
		{"relative ls", func(e ExecEvent) bool { return e.Path == "./ls" }, false, "not in the exec allowlist"},
		{"../ls", func(e ExecEvent) bool { return strings.HasSuffix(e.Path, "../bin/ls") }, false, "/usr/bin/ls is not in the exec allowlist"},
		{"ld.so", func(e ExecEvent) bool { return interp != "" && e.Path == interp }, false, "ELF interpreter"},
		{"memfd by path", func(e ExecEvent) bool { return strings.HasPrefix(e.Path, "/proc/self/fd/") }, false, "/proc/self/fd"},
		{"/dev/fd", func(e ExecEvent) bool { return e.Path == "/dev/fd/3" }, false, "/proc/self/fd"},
		{"memfd by descriptor", func(e ExecEvent) bool {
			return e.Syscall == "execveat" && strings.Contains(e.Reason, "memfd")
		}, false, "exec of a memfd"},
		{"descriptor", func(e ExecEvent) bool {
			return e.Syscall == "execveat" && e.Resolved == rep.Plan.Path
		}, false, "file descriptor"},
		{"missing", func(e ExecEvent) bool { return e.Path == "/nonexistent/program" }, false, "no such file"},
		{"script", func(e ExecEvent) bool { return strings.HasSuffix(e.Path, "/allowed/script") }, false, "#! interpreter /bin/ls"},
	} {
		e, ok := findEvent(rep.Events, w.match)
		if !ok {
			t.Errorf("%s: no exec event", w.why)
			continue
		}
		if e.Allow != w.allow || !strings.Contains(e.Reason, w.reason) {
			t.Errorf("%s: event %+v; want allow=%v and a reason with %q", w.why, e, w.allow, w.reason)
		}
	}
	for _, e := range rep.Events {
		if !e.Allow && e.Errno == 0 {
			t.Errorf("refused without an errno: %+v", e)
		}
		t.Logf("event %+v", e)
	}
}

// TestExecAuditWithoutLandlock: an attempt outside the allowlist is refused
// by the exec audit even where Landlock is unavailable.
func TestExecAuditWithoutLandlock(t *testing.T) {
	requireExecAudit(t)
	dir := scratch(t)
	cfg := baseConfig(dir)
	cfg.BestEffort = true
	cfg.Absent = []string{LayerLandlock}
	rep := runChild(t, childSpec{Cfg: cfg, Apply: true, ExecAudit: true, Dir: dir,
		Probes: []string{"exec-allowed", "exec-ls", "exec-copy", "exec-symlink"}})
	if rep.ApplyErr != "" || rep.NotifyErr != "" {
		t.Fatalf("Apply: %q, notifier: %q", rep.ApplyErr, rep.NotifyErr)
	}
	if len(rep.Degraded) != 1 || !strings.HasPrefix(rep.Degraded[0], LayerLandlock) {
		t.Errorf("degraded %v, want landlock only", rep.Degraded)
	}
	check(t, rep, []expectation{
		{"exec-allowed", "exit 0", "allowed"},
		{"exec-ls", "EACCES", "refused by the audit alone"},
		{"exec-copy", "EACCES", "refused by the audit alone"},
		{"exec-symlink", "exit 0", "judged by its target"},
	})
}

func TestExecAuditMissing(t *testing.T) {
	requireExecAudit(t)
	dir := scratch(t)
	for _, tc := range []struct {
		why        string
		bestEffort bool
	}{
		{"strict: refuse, naming the layer", false},
		{"best effort: degraded, no listener", true},
	} {
		t.Run(tc.why, func(t *testing.T) {
			cfg := baseConfig(dir)
			cfg.BestEffort = tc.bestEffort
			cfg.Absent = []string{LayerExecAudit}
			rep := runChild(t, childSpec{Cfg: cfg, Apply: true, ExecAudit: true, Dir: dir, Probes: []string{"exec-ls"}})
			if tc.bestEffort {
				if rep.NotifyErr != "" || !slices.Contains(rep.NotifyDegraded, LayerExecAudit+": "+WhyAbsent) {
					t.Errorf("notifier error %q, degraded %v", rep.NotifyErr, rep.NotifyDegraded)
				}
				check(t, rep, []expectation{{"exec-ls", "EACCES", "Landlock still refuses"}})
				return
			}
			for _, w := range []string{LayerExecAudit, "unavailable", "--exec-guard=best-effort"} {
				if !strings.Contains(rep.NotifyErr, w) {
					t.Errorf("error %q does not mention %q", rep.NotifyErr, w)
				}
			}
		})
	}
}
