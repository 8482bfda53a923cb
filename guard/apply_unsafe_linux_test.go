package guard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The behaviour tests apply the guard for real, which cannot be undone, so
// they run in a child: the test binary re-executed with childEnv set.
// TestMain sends such a process to childMain, which resolves and applies
// the guard as its spec says, tries the probes and prints a childReport as
// JSON. The parent compares the outcomes with what it expects, next to a
// baseline child that tries the same probes without the guard, so that
// every refusal is shown to come from the guard.
const (
	childEnv     = "GUARD_TEST_CHILD"
	childSpecEnv = "GUARD_TEST_SPEC"
)

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helperMain(h, os.Args[1:]))
	}
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

type childSpec struct {
	Cfg    Config
	Apply  bool
	Dir    string // scratch directory; Dir/allowed is an allowed directory
	Probes []string
	// NoTargets skips binding the datagram targets (for a child that
	// starts already guarded and could not create them).
	NoTargets bool
	// ExecAudit installs the exec notifier after Apply and sends the
	// listener to the test process (fd 3), which serves it, as nsgate's
	// parent does for the sandbox init. (The child cannot serve it itself:
	// Landlock gives each thread its own domain, and a thread may not
	// inspect /proc of a process in a sibling domain.)
	ExecAudit bool
}

type childReport struct {
	Plan         Plan
	ResolveErr   string
	ApplyErr     string
	MissingLayer string // the layers of the MissingLayerErrors, joined by ","
	Degraded     []string
	Status       map[string]string // from /proc/self/status after Apply
	Results      map[string]string // probe -> outcome
	// With ExecAudit: what InstallExecNotifier said, and (filled in by
	// runChild) what the test's server reported, in order.
	NotifyErr      string
	NotifyDegraded []string
	Events         []ExecEvent
}

func childMain() int {
	runtime.LockOSThread() // the guard's contract; never unlocked
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childSpecEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		return 3
	}
	rep := childReport{Results: make(map[string]string)}
	defer func() { json.NewEncoder(os.Stdout).Encode(rep) }()

	plan, err := Resolve(spec.Cfg)
	if err != nil {
		rep.ResolveErr = err.Error()
		return 0
	}
	rep.Plan = plan
	other := startOtherThread(plan, spec.Dir)
	if !spec.NoTargets {
		if err := bindDgramTargets(spec.Dir); err != nil {
			fmt.Fprintln(os.Stderr, "bind:", err)
			return 3
		}
	}
	if spec.Apply {
		rep.Degraded, err = plan.Apply(spec.Cfg)
		if err != nil {
			rep.ApplyErr = err.Error()
			rep.MissingLayer = strings.Join(missingLayers(err), ",")
			rep.Status = procStatus("NoNewPrivs", "Seccomp")
			return 0
		}
	}
	if spec.ExecAudit {
		if err := sendExecListener(spec.Cfg, &rep); err != nil {
			rep.NotifyErr = err.Error()
			return 0
		}
	}
	rep.Status = procStatus("NoNewPrivs", "Seccomp", "Seccomp_filters")
	for _, name := range spec.Probes {
		if n, ok := strings.CutPrefix(name, "thread:"); ok {
			rep.Results[name] = other(n)
			continue
		}
		p, ok := probes[name]
		if !ok {
			rep.Results[name] = "unknown probe"
			continue
		}
		rep.Results[name] = p(plan, spec.Dir)
	}
	return 0
}

// Datagram unix sockets bound before Apply, i.e. outside the guard's
// Landlock domain, like a host service's socket (/dev/log, journald).
// Their descriptors stay open until the child exits.
func dgramTargets(dir string) (abstract, path string) {
	return fmt.Sprintf("@nsgate-guard-test-%d", os.Getpid()), filepath.Join(dir, fmt.Sprintf("dgram-%d.sock", os.Getpid()))
}

func bindDgramTargets(dir string) error {
	abstract, path := dgramTargets(dir)
	for _, name := range []string{abstract, path} {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
			return err
		}
	}
	return nil
}

// dgramProbe sends to a target from a socketpair, the only unix socket a
// worker without AllowUnix can make: an unconnected datagram socket
// accepts datagrams from any sender that names its address.
func dgramProbe(target string) string {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "socketpair: " + outcome(err)
	}
	defer closeAll(fds[:])
	return outcome(unix.Sendto(fds[0], []byte("x"), 0, &unix.SockaddrUnix{Name: target}))
}

// startOtherThread starts, before Apply, a goroutine locked to a thread of
// its own, and returns a function that runs a probe there. It shows that
// Apply restricts threads other than the caller's, including ones that
// existed before.
func startOtherThread(plan Plan, dir string) func(probe string) string {
	req, resp := make(chan string), make(chan string)
	mainTid := unix.Gettid()
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		tid := unix.Gettid()
		for name := range req {
			p, ok := probes[name]
			switch {
			case tid == mainTid:
				resp <- "same thread as main"
			case !ok:
				resp <- "unknown probe"
			default:
				resp <- p(plan, dir)
			}
		}
	}()
	return func(probe string) string {
		req <- probe
		return <-resp
	}
}

// missingLayers lists the layers of the MissingLayerErrors in err.
func missingLayers(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, missingLayers(e)...)
		}
		return out
	}
	var m *MissingLayerError
	if errors.As(err, &m) {
		return []string{m.Layer}
	}
	return nil
}

func procStatus(keys ...string) map[string]string {
	out := make(map[string]string)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		for _, want := range keys {
			if k == want {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// outcome names what happened: "ok", an errno name, "exit N" or
// "signal: NAME".
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return "signal: " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ws.ExitStatus())
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return unix.ErrnoName(en)
	}
	return err.Error()
}

func errnoOutcome(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	return unix.ErrnoName(e)
}

func run(path string, args ...string) string {
	return runCmd(exec.Command(path, args...))
}

func runCmd(cmd *exec.Cmd) string {
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Run(); err != nil {
		return outcome(err)
	}
	return "exit 0"
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

func socketProbe(domain, typ uint64) string {
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(domain), uintptr(typ), 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errnoOutcome(e)
}

func ioctlProbe(cmd uint64) string {
	f, err := os.Open("/dev/null")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	c := byte('x')
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(cmd), uintptr(unsafe.Pointer(&c)))
	return errnoOutcome(e)
}

// A pid above PID_MAX_LIMIT: without the guard, ptrace says ESRCH.
const noSuchPid = 1<<22 + 1000

const highWord = 1 << 32 // garbage the kernel ignores in an int argument

var probes = map[string]func(p Plan, dir string) string{
	// Execution (Landlock).
	"exec-allowed": func(p Plan, _ string) string { return run(p.Path) },
	"exec-ls":      func(Plan, string) string { return run("/bin/ls", "/") },
	"exec-copy": func(p Plan, dir string) string {
		dst := filepath.Join(dir, "copy")
		if err := copyFile(p.Path, dst); err != nil {
			return "copy: " + outcome(err)
		}
		return run(dst)
	},
	"exec-symlink": func(p Plan, dir string) string {
		l := filepath.Join(dir, "link")
		if err := os.Symlink(p.Path, l); err != nil {
			return "symlink: " + outcome(err)
		}
		return run(l)
	},
	"exec-memfd": func(p Plan, _ string) string {
		fd, err := unix.MemfdCreate("nsgate-guard-test", 0)
		if err != nil {
			return "memfd_create: " + outcome(err)
		}
		defer unix.Close(fd)
		b, err := os.ReadFile(p.Path)
		if err != nil {
			return err.Error()
		}
		if _, err := unix.Write(fd, b); err != nil {
			return "write: " + outcome(err)
		}
		return run(fmt.Sprintf("/proc/self/fd/%d", fd))
	},
	"exec-interpreter-directly": func(p Plan, _ string) string {
		if len(p.Interpreters) == 0 {
			return "no interpreter"
		}
		return run(p.Interpreters[0], "/bin/ls", "/")
	},
	"exec-host-interpreter": func(Plan, string) string {
		ld, err := elfInterp("/bin/sh")
		if err != nil || ld == "" {
			return fmt.Sprintf("no interpreter for /bin/sh (%v)", err)
		}
		return run(ld, "/bin/ls", "/")
	},
	"rename-into-allowed": func(p Plan, dir string) string {
		src := filepath.Join(dir, "outside", "evil")
		if err := copyFile(p.Path, src); err != nil {
			return "copy: " + outcome(err)
		}
		return outcome(os.Rename(src, filepath.Join(dir, "allowed", "evil")))
	},
	"rename-between-others": func(p Plan, dir string) string {
		src := filepath.Join(dir, "outside", "plain")
		if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
			return "write: " + outcome(err)
		}
		return outcome(os.Rename(src, filepath.Join(dir, "moved")))
	},
	"write-into-allowed-then-exec": func(p Plan, dir string) string {
		dst := filepath.Join(dir, "allowed", "planted")
		if err := copyFile(p.Path, dst); err != nil {
			return "copy: " + outcome(err)
		}
		return run(dst)
	},
	"ia32": func(_ Plan, dir string) string { return run(filepath.Join(dir, "ia32")) },

	// System calls (seccomp).
	"ptrace-attach": func(Plan, string) string {
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, noSuchPid, 0, 0, 0, 0)
		return errnoOutcome(e)
	},
	"ptrace-traceme": func(Plan, string) string {
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0, 0, 0)
		return errnoOutcome(e)
	},
	"process_vm_readv": func(Plan, string) string {
		src, dst := []byte("12345678"), make([]byte, 8)
		_, err := unix.ProcessVMReadv(os.Getpid(),
			[]unix.Iovec{{Base: &dst[0], Len: 8}}, []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 8}}, 0)
		return outcome(err)
	},
	"unshare-user": func(Plan, string) string {
		// A multithreaded process gets EINVAL from the kernel: that
		// shows the call got past the filter.
		_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
		return errnoOutcome(e)
	},
	"unshare-user-hi": func(Plan, string) string {
		_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, highWord|unix.CLONE_NEWUSER, 0, 0)
		return errnoOutcome(e)
	},
	"clone-newuser": func(p Plan, _ string) string {
		cmd := exec.Command(p.Path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
		return runCmd(cmd)
	},
	"setns": func(Plan, string) string {
		f, err := os.Open("/proc/self/ns/uts")
		if err != nil {
			return err.Error()
		}
		defer f.Close()
		return outcome(unix.Setns(int(f.Fd()), unix.CLONE_NEWUTS))
	},
	"socket-inet":    func(Plan, string) string { return socketProbe(unix.AF_INET, unix.SOCK_DGRAM) },
	"socket-unix":    func(Plan, string) string { return socketProbe(unix.AF_UNIX, unix.SOCK_STREAM) },
	"socket-unix-hi": func(Plan, string) string { return socketProbe(highWord|unix.AF_UNIX, unix.SOCK_STREAM) },
	"socket-packet":  func(Plan, string) string { return socketProbe(unix.AF_PACKET, unix.SOCK_DGRAM) },
	"socket-vsock":   func(Plan, string) string { return socketProbe(unix.AF_VSOCK, unix.SOCK_STREAM) },
	"socket-alg":     func(Plan, string) string { return socketProbe(unix.AF_ALG, unix.SOCK_SEQPACKET) },
	"socketpair-unix": func(Plan, string) string {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		closeAll(fds[:])
		return outcome(err)
	},
	"dgram-abstract": func(_ Plan, dir string) string { a, _ := dgramTargets(dir); return dgramProbe(a) },
	"dgram-path":     func(_ Plan, dir string) string { _, p := dgramTargets(dir); return dgramProbe(p) },
	"io_uring_setup": func(Plan, string) string {
		_, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 0, 0, 0)
		return errnoOutcome(e)
	},
	"bpf": func(Plan, string) string {
		_, _, e := unix.RawSyscall(unix.SYS_BPF, 0xffff, 0, 0)
		return errnoOutcome(e)
	},
	"ioctl-tiocsti":    func(Plan, string) string { return ioctlProbe(unix.TIOCSTI) },
	"ioctl-tiocsti-hi": func(Plan, string) string { return ioctlProbe(highWord | unix.TIOCSTI) },
	"ioctl-tcgets":     func(Plan, string) string { return ioctlProbe(unix.TCGETS) },
	"clone3": func(Plan, string) string {
		_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
		return errnoOutcome(e)
	},
	"x32": func(Plan, string) string {
		if x32Bit == 0 {
			return "n/a"
		}
		_, _, e := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		return errnoOutcome(e)
	},
	// The test binary run again (it is in the allowlist): after execve
	// the new program must still be restricted, without calling Apply.
	"after-exec": func(p Plan, dir string) string {
		spec, _ := json.Marshal(childSpec{Cfg: Config{Command: []string{p.Path}}, Dir: dir, NoTargets: true,
			Probes: []string{"exec-ls", "exec-allowed", "socket-unix", "ptrace-attach", "clone3"}})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, childSpecEnv+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, childSpecEnv+"="+string(spec))
		out, err := cmd.Output()
		if err != nil {
			return "run: " + outcome(err)
		}
		var rep childReport
		if err := json.Unmarshal(out, &rep); err != nil {
			return "report: " + err.Error()
		}
		var parts []string
		for k, v := range rep.Results {
			parts = append(parts, k+"="+v)
		}
		parts = append(parts, "NoNewPrivs="+rep.Status["NoNewPrivs"], "Seccomp="+rep.Status["Seccomp"])
		sort.Strings(parts)
		return strings.Join(parts, " ")
	},
	// Every call of the deny list, with arguments that are invalid
	// (all ones: bad fds, bad pointers, unknown flags) so that nothing
	// happens even where the filter is absent. "EPERM" when each one got
	// EPERM, else the list of the others.
	"denied-all": func(Plan, string) string {
		var other []string
		for _, s := range deniedSyscalls {
			const bad = ^uintptr(0)
			_, _, e := unix.RawSyscall6(uintptr(s.nr), bad, bad, bad, bad, bad, bad)
			if e != unix.EPERM {
				other = append(other, s.name+"="+errnoOutcome(e))
			}
		}
		if len(other) == 0 {
			return "EPERM"
		}
		return strings.Join(other, ",")
	},
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd > 0 {
			unix.Close(fd)
		}
	}
}

// requireOrSkip skips when ok is false, or fails under NSGATE_REQUIRE_ALL=1.
func requireOrSkip(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("NSGATE_REQUIRE_ALL") == "1" {
		t.Fatalf("NSGATE_REQUIRE_ALL=1 but: "+format, args...)
	}
	t.Skipf(format, args...)
}

func requireFullSupport(t *testing.T) Support {
	t.Helper()
	s := Probe()
	requireOrSkip(t, s.LandlockABI > 0, "no Landlock: %s", s.LandlockWhy)
	requireOrSkip(t, s.Seccomp, "no seccomp filter: %s", s.SeccompWhy)
	return s
}

// scratch builds the child's directory: allowed/ (an ExecAllow directory),
// outside/, and the ia32 probe program.
func scratch(t *testing.T) string {
	dir := canon(t, t.TempDir())
	for _, d := range []string{"allowed", "outside"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "ia32"), ia32Probe(), 0o755)
	return dir
}

func baseConfig(dir string) Config {
	return Config{
		Command: []string{"true"},
		PathEnv: "/usr/bin:/bin",
		// The test binary is allowed so that "after-exec" can run it.
		ExecAllow: []string{filepath.Join(dir, "allowed"), filepath.Join(dir, "ia32"), os.Args[0]},
	}
}

// unsafeWithoutGuard are probes that must not run without the guard:
// PTRACE_TRACEME would make the test process the child's tracer.
var unsafeWithoutGuard = map[string]bool{"ptrace-traceme": true}

func allProbes(guarded bool) []string {
	var names []string
	for n := range probes {
		if guarded || !unsafeWithoutGuard[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

func runChild(t *testing.T, spec childSpec, env ...string) childReport {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(cmd.Env, os.Environ()...)
	cmd.Env = append(cmd.Env, childEnv+"=1", childSpecEnv+"="+string(js))
	if os.Getenv("GORACE") == "" {
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0") // no 1 s pause per child
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var events func() ([]ExecEvent, error)
	if spec.ExecAudit {
		events = serveChild(t, spec.Cfg, cmd)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep childReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("child report %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	if events != nil {
		evs, err := events()
		if err != nil {
			t.Fatalf("exec audit server: %v", err)
		}
		rep.Events = evs
	}
	if rep.ResolveErr != "" {
		t.Fatalf("child Resolve: %s", rep.ResolveErr)
	}
	return rep
}

type expectation struct {
	probe, want, why string
}

func check(t *testing.T, rep childReport, exp []expectation) {
	t.Helper()
	for _, e := range exp {
		if got := rep.Results[e.probe]; got != e.want {
			t.Errorf("%s: got %q, want %q (%s)", e.probe, got, e.want, e.why)
		}
	}
}

// ia32Available reports whether the kernel runs i386 programs at all
// (CONFIG_IA32_EMULATION, not disabled at boot).
func ia32Available(baseline childReport) bool { return baseline.Results["ia32"] == "exit 42" }

func TestGuardBaseline(t *testing.T) {
	dir := scratch(t)
	rep := runChild(t, childSpec{Cfg: baseConfig(dir), Dir: dir, Probes: allProbes(false)})
	t.Logf("without the guard: %v", rep.Results)
	// What the kernel does without the guard: each of these differs from
	// the guarded outcome, which proves the guard made the difference.
	check(t, rep, []expectation{
		{"exec-ls", "exit 0", "any binary runs"},
		{"exec-copy", "exit 0", "a copied binary runs"},
		{"rename-into-allowed", "ok", "no Landlock, no refer check"},
		{"ptrace-attach", "ESRCH", "the pid does not exist"},
		{"process_vm_readv", "ok", "reading one's own memory works"},
		{"unshare-user-hi", "EINVAL", "unknown high flag bits"},
		{"socket-unix", "ok", "AF_UNIX exists"},
		{"socket-unix-hi", "ok", "the kernel ignores the high word of the domain"},
		{"ioctl-tiocsti", "ENOTTY", "/dev/null is not a terminal"},
		{"ioctl-tiocsti-hi", "ENOTTY", "the kernel ignores the high word of the cmd"},
		{"clone3", "EINVAL", "a NULL clone_args of size 0"},
		{"dgram-abstract", "ok", "a socketpair socket can send to any unconnected datagram socket"},
		{"dgram-path", "ok", "a socketpair socket can send to any unconnected datagram socket"},
	})
	if got := rep.Results["x32"]; runtime.GOARCH == "amd64" && got == "EPERM" {
		t.Errorf("x32: EPERM without the guard; the guarded test would prove nothing")
	}
	if rep.Status["NoNewPrivs"] != "0" || rep.Status["Seccomp"] != "0" {
		t.Errorf("the baseline child is already restricted: %v", rep.Status)
	}
}

func TestGuardStrict(t *testing.T) {
	sup := requireFullSupport(t)
	dir := scratch(t)
	cfg := baseConfig(dir)
	rep := runChild(t, childSpec{Cfg: cfg, Apply: true, Dir: dir,
		Probes: append(allProbes(true), "thread:socket-unix", "thread:exec-ls", "thread:exec-allowed")})
	if rep.ApplyErr != "" || len(rep.Degraded) != 0 {
		t.Fatalf("Apply: %s, degraded %v", rep.ApplyErr, rep.Degraded)
	}
	if rep.Status["NoNewPrivs"] != "1" || rep.Status["Seccomp"] != "2" {
		t.Errorf("status after Apply: %v, want NoNewPrivs 1 and Seccomp 2", rep.Status)
	}
	check(t, rep, []expectation{
		{"exec-allowed", "exit 0", "the command itself runs (with its ELF interpreter)"},
		{"exec-symlink", "exit 0", "Landlock judges the file, not the name"},
		{"exec-ls", "EACCES", "not in the allowlist"},
		{"exec-copy", "EACCES", "a copy is another file, outside the allowlist"},
		{"rename-into-allowed", "EXDEV", "REFER: a file may not gain execute by moving into an allowed directory"},
		{"rename-between-others", "ok", "REFER is granted on /: ordinary renames keep working"},
		{"write-into-allowed-then-exec", "exit 0", "documented: allowed directories must not be writable by the worker"},
		{"ptrace-attach", "EPERM", "ptrace is denied"},
		{"ptrace-traceme", "EPERM", "ptrace is denied"},
		{"process_vm_readv", "EPERM", "cross-process memory access is denied"},
		{"unshare-user", "EPERM", "no new namespaces"},
		{"unshare-user-hi", "EPERM", "the filter looks at the low word only, like the kernel"},
		{"clone-newuser", "EPERM", "no new namespaces through clone either"},
		{"setns", "EPERM", "setns is always denied"},
		{"socket-inet", "ok", "IP sockets go to the TUN"},
		{"socket-unix", "EPERM", "AF_UNIX needs AllowUnix"},
		{"socket-unix-hi", "EPERM", "the high word does not disguise AF_UNIX"},
		{"socketpair-unix", "ok", "socketpair is always allowed"},
		{"socket-packet", "EPERM", "AF_PACKET is denied"},
		{"socket-vsock", "EPERM", "AF_VSOCK is denied"},
		{"socket-alg", "EPERM", "AF_ALG is denied"},
		{"dgram-abstract", "EPERM", "Landlock scope: no sending to an abstract socket from outside the domain"},
		{"io_uring_setup", "EPERM", "io_uring is denied"},
		{"bpf", "EPERM", "bpf is denied"},
		{"ioctl-tiocsti", "EPERM", "TIOCSTI is denied"},
		{"ioctl-tiocsti-hi", "EPERM", "the high word does not disguise TIOCSTI"},
		{"ioctl-tcgets", "ENOTTY", "other ioctls reach the kernel"},
		{"clone3", "ENOSYS", "clone3 looks absent so libc uses clone"},
		{"denied-all", "EPERM", "every call of the deny list"},
		{"thread:socket-unix", "EPERM", "seccomp covers a thread that existed before Apply (TSYNC)"},
		{"thread:exec-ls", "EACCES", "Landlock covers a thread that existed before Apply"},
		{"thread:exec-allowed", "exit 0", "and still lets it run the command"},
		{"after-exec", "NoNewPrivs=1 Seccomp=2 clone3=ENOSYS exec-allowed=exit 0 exec-ls=EACCES ptrace-attach=EPERM socket-unix=EPERM",
			"a program started by execve inherits both layers"},
	})
	if runtime.GOARCH == "amd64" {
		check(t, rep, []expectation{{"x32", "EPERM", "the x32 ABI is denied"}})
		base := runChild(t, childSpec{Cfg: cfg, Dir: dir, Probes: []string{"ia32"}})
		if ia32Available(base) {
			check(t, rep, []expectation{{"ia32", "signal: illegal instruction", "the i386 program saw -EPERM from int 0x80 (it runs ud2)"}})
		} else {
			t.Logf("ia32 check not made: this kernel does not run i386 programs (%s)", base.Results["ia32"])
		}
	}
	// Known gaps (package doc): Landlock must allow the ELF interpreter,
	// and it lets files of internal mounts (memfd) be executed. They are
	// reported, not asserted; closing them is the exec audit's job.
	for _, g := range []string{"exec-interpreter-directly", "exec-memfd"} {
		t.Logf("known gap %s: %s", g, rep.Results[g])
	}
	if sup.LandlockABI >= 9 {
		check(t, rep, []expectation{{"dgram-path", "EACCES", "Landlock RESOLVE_UNIX (ABI 9)"}})
	} else {
		t.Logf("known gap before Landlock ABI 9 (this kernel: %d): sending to a pathname datagram socket from a socketpair: %s", sup.LandlockABI, rep.Results["dgram-path"])
	}
}

func TestGuardStaticCommand(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the hand-made static program is x86-64 code")
	}
	requireFullSupport(t)
	dir := scratch(t)
	static := writeFile(t, filepath.Join(dir, "static"), elf64(""), 0o755)
	rep := runChild(t, childSpec{Cfg: Config{Command: []string{static}}, Apply: true, Dir: dir,
		Probes: []string{"exec-allowed", "exec-host-interpreter", "exec-ls"}})
	if rep.ApplyErr != "" {
		t.Fatal(rep.ApplyErr)
	}
	if len(rep.Plan.Interpreters) != 0 {
		t.Errorf("Interpreters = %q for a static command", rep.Plan.Interpreters)
	}
	check(t, rep, []expectation{
		{"exec-allowed", "exit 0", "the static command runs"},
		{"exec-host-interpreter", "EACCES", "a static command does not bring ld.so: the interpreter gap is closed"},
		{"exec-ls", "EACCES", "not in the allowlist"},
	})
}

func TestGuardAllowUserns(t *testing.T) {
	requireFullSupport(t)
	dir := scratch(t)
	cfg := baseConfig(dir)
	names := []string{"unshare-user", "clone-newuser", "setns", "socket-unix", "exec-ls", "clone3"}
	base := runChild(t, childSpec{Cfg: cfg, Dir: dir, Probes: []string{"clone-newuser"}})
	cfg.AllowUserns = true
	rep := runChild(t, childSpec{Cfg: cfg, Apply: true, Dir: dir, Probes: names})
	if rep.ApplyErr != "" {
		t.Fatal(rep.ApplyErr)
	}
	check(t, rep, []expectation{
		{"unshare-user", "EINVAL", "past the filter: the kernel refuses a multithreaded caller"},
		{"setns", "EPERM", "setns is denied even with AllowUserns"},
		{"socket-unix", "EPERM", "AllowUserns does not allow AF_UNIX"},
		{"exec-ls", "EACCES", "Landlock is unchanged"},
		{"clone3", "ENOSYS", "clone3 stays hidden"},
	})
	if base.Results["clone-newuser"] == "exit 0" {
		check(t, rep, []expectation{{"clone-newuser", "exit 0", "a child in a new user namespace runs"}})
	} else {
		t.Logf("clone-newuser not compared: user namespaces unavailable here even without the guard (%s)", base.Results["clone-newuser"])
	}
}

func TestGuardAllowUnix(t *testing.T) {
	requireFullSupport(t)
	dir := scratch(t)
	cfg := baseConfig(dir)
	cfg.AllowUnix = true
	rep := runChild(t, childSpec{Cfg: cfg, Apply: true, Dir: dir,
		Probes: []string{"socket-unix", "socket-unix-hi", "socketpair-unix", "socket-packet", "socket-vsock", "unshare-user", "dgram-abstract", "dgram-path"}})
	if rep.ApplyErr != "" {
		t.Fatal(rep.ApplyErr)
	}
	check(t, rep, []expectation{
		{"socket-unix", "ok", "AllowUnix"},
		{"socket-unix-hi", "ok", "AllowUnix"},
		{"socketpair-unix", "ok", "always"},
		{"socket-packet", "EPERM", "AllowUnix allows only AF_UNIX"},
		{"socket-vsock", "EPERM", "AllowUnix allows only AF_UNIX"},
		{"unshare-user", "EPERM", "AllowUnix does not allow namespaces"},
		{"dgram-abstract", "EPERM", "the abstract-socket scope holds with AllowUnix: a socket made outside the worker is out of reach"},
		{"dgram-path", "ok", "AllowUnix lifts RESOLVE_UNIX"},
	})
}

func TestGuardMissingLayer(t *testing.T) {
	requireFullSupport(t)
	dir := scratch(t)
	names := []string{"exec-ls", "exec-allowed", "socket-unix"}
	tests := []struct {
		why          string
		absent       []string
		bestEffort   bool
		wantMissing  string
		wantDegraded string
		want         []expectation
		wantSeccomp  string
	}{
		{
			why: "no Landlock, strict: refuse, naming the layer and the fix", absent: []string{LayerLandlock},
			wantMissing: LayerLandlock,
		},
		{
			why: "no seccomp, strict: refuse, naming the layer and the fix", absent: []string{LayerSeccomp},
			wantMissing: LayerSeccomp,
		},
		{
			why: "neither, strict: one error naming both", absent: []string{LayerSeccomp, LayerLandlock},
			wantMissing: LayerLandlock + "," + LayerSeccomp,
		},
		{
			why: "no Landlock, best effort: seccomp still applies", absent: []string{LayerLandlock}, bestEffort: true,
			wantDegraded: LayerLandlock + ": " + WhyAbsent,
			want:         []expectation{{"exec-ls", "exit 0", "no Landlock"}, {"socket-unix", "EPERM", "seccomp is on"}},
			wantSeccomp:  "2",
		},
		{
			why: "no seccomp, best effort: Landlock still applies", absent: []string{LayerSeccomp}, bestEffort: true,
			wantDegraded: LayerSeccomp + ": " + WhyAbsent,
			want:         []expectation{{"exec-ls", "EACCES", "Landlock is on"}, {"exec-allowed", "exit 0", "Landlock is on"}, {"socket-unix", "ok", "no seccomp"}},
			wantSeccomp:  "0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			cfg := baseConfig(dir)
			cfg.BestEffort = tc.bestEffort
			cfg.Absent = tc.absent
			rep := runChild(t, childSpec{Cfg: cfg, Apply: true, Dir: dir, Probes: names})
			if tc.wantMissing != "" {
				if rep.MissingLayer != tc.wantMissing {
					t.Fatalf("missing layer %q (error %q), want %q", rep.MissingLayer, rep.ApplyErr, tc.wantMissing)
				}
				for _, w := range append(strings.Split(tc.wantMissing, ","), "unavailable", "--exec-guard=best-effort") {
					if !strings.Contains(rep.ApplyErr, w) {
						t.Errorf("error %q does not mention %q", rep.ApplyErr, w)
					}
				}
				if rep.Status["NoNewPrivs"] != "0" || rep.Status["Seccomp"] != "0" {
					t.Errorf("a refused Apply changed the process: %v", rep.Status)
				}
				if len(rep.Results) != 0 {
					t.Errorf("probes ran after a failed Apply")
				}
				return
			}
			if rep.ApplyErr != "" {
				t.Fatal(rep.ApplyErr)
			}
			if len(rep.Degraded) != 1 || rep.Degraded[0] != tc.wantDegraded {
				t.Errorf("degraded %q, want [%q]", rep.Degraded, tc.wantDegraded)
			}
			if rep.Status["NoNewPrivs"] != "1" || rep.Status["Seccomp"] != tc.wantSeccomp {
				t.Errorf("status %v, want NoNewPrivs 1, Seccomp %s", rep.Status, tc.wantSeccomp)
			}
			check(t, rep, tc.want)
		})
	}
}

func TestPlanWritable(t *testing.T) {
	dir := scratch(t)
	p, err := Resolve(baseConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	w := p.Writable()
	for _, want := range []string{filepath.Join(dir, "allowed"), filepath.Join(dir, "ia32")} {
		if !slices.Contains(w, want) {
			t.Errorf("Writable() = %q, missing %s (made by the test, so writable)", w, want)
		}
	}
}

func TestApplyEmptyPlan(t *testing.T) {
	// Returns before touching the process, so it can run in-process.
	if _, err := (Plan{}).Apply(Config{}); err == nil {
		t.Fatal("Apply of an empty plan succeeded")
	}
}

func TestProbe(t *testing.T) {
	t.Run("the kernel", func(t *testing.T) {
		s := requireFullSupport(t)
		t.Logf("Landlock ABI %d, seccomp %v", s.LandlockABI, s.Seccomp)
		if s.LandlockWhy != "" || s.SeccompWhy != "" {
			t.Errorf("reasons set for available layers: %+v", s)
		}
	})
	t.Run("Absent takes layers away", func(t *testing.T) {
		requireFullSupport(t)
		s := Config{Absent: []string{LayerLandlock}}.support()
		if s.LandlockABI != 0 || s.LandlockWhy != WhyAbsent || !s.Seccomp || !s.ExecAudit {
			t.Errorf("support() = %+v, want only Landlock missing", s)
		}
		s = Config{Absent: []string{LayerSeccomp}}.support()
		if s.Seccomp || s.SeccompWhy != WhyAbsent || s.ExecAudit || !strings.Contains(s.ExecAuditWhy, "needs seccomp") || s.LandlockABI == 0 {
			t.Errorf("support() = %+v, want seccomp and the exec audit (which needs it) missing", s)
		}
		s = Config{Absent: []string{LayerExecAudit}}.support()
		if s.ExecAudit || s.ExecAuditWhy != WhyAbsent || !s.Seccomp {
			t.Errorf("support() = %+v, want only the exec audit missing", s)
		}
	})
	t.Run("unknown names take nothing away", func(t *testing.T) {
		requireFullSupport(t)
		if s := (Config{Absent: []string{"everything"}}).support(); s != Probe() {
			t.Errorf("support() = %+v, want Probe()'s %+v", s, Probe())
		}
	})
}
