package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/internal/diag/starttrace"
	"github.com/nsgate/nsgate/tun/tundev"
)

// InitMain is the body of the sandbox init (nsgate-init, or nsgate
// re-executed, with InitArg). It returns the process exit status: the worker's, or 125 when
// init fails (after telling the parent why).
func InitMain(apply ApplyGuard) int {
	// Capabilities, no_new_privs and the fork of the worker are per thread:
	// keep all of it on this one. The thread is never unlocked.
	runtime.LockOSThread()

	// Descriptor 3 is the control socket from the parent; when it is not
	// (init run by hand), there is nobody to report to.
	if t, err := unix.GetsockoptInt(3, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_SEQPACKET {
		fmt.Fprintf(os.Stderr, "%s: the sandbox's init is started by nsgate run, with its control socket at descriptor 3\n", InitProgram)
		return 2
	}
	unix.CloseOnExec(3)
	ctl := os.NewFile(3, "nsgate-ctl")
	fail := func(err error) int {
		ctl.Write([]byte("err:" + err.Error()))
		return 125
	}

	var spec Spec
	sf := os.NewFile(specFD, "nsgate-sandbox-spec")
	js, err := io.ReadAll(io.NewSectionReader(sf, 0, 1<<30))
	sf.Close()
	if err != nil {
		return fail(fmt.Errorf("sandbox spec: %w", err))
	}
	if err := json.Unmarshal(js, &spec); err != nil {
		return fail(fmt.Errorf("sandbox spec: %w", err))
	}
	if spec.Build != buildStamp {
		self, _ := os.Executable()
		return fail(fmt.Errorf("%s is from another build than nsgate (build %q, nsgate's %q): install nsgate and %s from one build (make build makes both)", self, buildStamp, spec.Build, InitProgram))
	}

	fd, err := tundev.Open(spec.Iface)
	if err != nil {
		return fail(err)
	}
	if err := tundev.Configure(spec.Iface); err != nil {
		return fail(err)
	}
	if err := unix.Sendmsg(int(ctl.Fd()), []byte("tun"), unix.UnixRights(fd), nil, 0); err != nil {
		return fail(fmt.Errorf("send tun descriptor: %w", err))
	}
	unix.Close(fd)
	starttrace.Mark("tun-sent")

	buf := make([]byte, 16)
	n, err := ctl.Read(buf)
	if err != nil || string(buf[:n]) != "go" {
		// The parent gave up; leave quietly.
		return 125
	}
	starttrace.Mark("go")

	// The worker's share of the caller's per-user quotas: the limits of
	// this user namespace, set while init still holds CAP_SYS_RESOURCE in
	// it and /proc/sys is writable (the view makes it read-only). Where
	// they cannot be set (a container's read-only /proc/sys) the run says
	// so as a degraded layer.
	quotaDegraded := setNamespaceSysctls(spec.Quota.Sysctl)
	if p := spec.Quota.Procs; p > 0 {
		rl := unix.Rlimit{Cur: p, Max: p}
		var cur unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NPROC, &cur) == nil && cur.Max < p {
			rl = unix.Rlimit{Cur: min(cur.Cur, cur.Max), Max: cur.Max}
		}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &rl); err != nil {
			return fail(fmt.Errorf("limit the worker's processes: %w", err))
		}
	}

	degraded, err := applyView(&spec.View)
	if err != nil {
		return fail(viewError(err))
	}
	degraded = append(degraded, quotaDegraded...)
	starttrace.Mark("view")
	if spec.Hostname != "" {
		unix.Sethostname([]byte(spec.Hostname))
	}
	if err := dropInitCapabilities(); err != nil {
		return fail(err)
	}
	starttrace.Mark("caps")
	argv := append([]string(nil), spec.Argv...)
	var path string
	if apply != nil {
		res, err := apply(spec.GuardSpec, argv)
		if err != nil {
			return fail(err)
		}
		path = res.Path
		degraded = append(degraded, res.Degraded...)
		if l := res.ExecListener; l != nil {
			// The parent must hold the listener before the worker's
			// exec, which waits for its answer.
			err := unix.Sendmsg(int(ctl.Fd()), []byte(msgExecListener), unix.UnixRights(int(l.Fd())), nil, 0)
			l.Close()
			if err != nil {
				return fail(fmt.Errorf("send exec listener: %w", err))
			}
		}
	} else {
		p, err := exec.LookPath(argv[0])
		if err != nil {
			return fail(fmt.Errorf("worker command: %w", err))
		}
		path = p
	}

	starttrace.Mark("guard")
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT)
	// The fault signals, sent with kill(2) (the worker may signal init),
	// would make the Go runtime crash init with a traceback of its stacks
	// on the shared standard error. Nobody has a reason to send them to
	// init: ignored. A fault of init's own still crashes it. SIGSTKFLT
	// the kernel never raises on x86 or ARM, but the runtime crashes on
	// it all the same; of the rest, each is forwarded above, dropped by
	// the kernel for a PID 1 without a handler, or caught and let be.
	signal.Ignore(unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGABRT, unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT)
	// The worker runs as init's uid in init's user namespace: it could
	// read and write init's memory (/proc/1/mem: the spec was there, and
	// init's code) and reach its descriptors. Not dumpable, only a holder
	// of CAP_SYS_PTRACE there may, and the worker holds none. Before the
	// worker exists: made after its exec, there was a window of up to
	// milliseconds in which a worker's first instructions opened
	// /proc/1/mem read-write, rewrote init's code and outlived nsgate
	// (lab attempt fs-race-init-mem). The exec audit still reads the
	// path the forked worker asks for (in init's memory until the exec):
	// nsgate created this user namespace, so it holds CAP_SYS_PTRACE in
	// it, and it reads with process_vm_readv, which does not need the
	// /proc/PID/mem file that now belongs to nobody nsgate can be.
	if err := NotDumpable(); err != nil {
		return fail(err)
	}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fail(fmt.Errorf("start worker %s: %w", argv[0], err))
	}
	starttrace.Mark("worker-forked")
	ctl.Write([]byte("started " + strings.Join(degraded, ",")))

	go func() {
		for s := range sigs {
			proc.Signal(s)
		}
	}()
	return reap(proc.Pid)
}

// reap waits for every child (init adopts the worker's orphans) until the
// worker itself exits, and returns its status. Returning ends the PID
// namespace, which kills anything the worker left behind.
func reap(worker int) int {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 125
		}
		if pid != worker {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// setNamespaceSysctls writes each limit to /proc/sys/NAME, which sets it
// for init's own user or IPC namespace; a NAME not in namespaceSysctls
// is never written. It returns "namespace-quota" when one could not be
// set. The IPC namespace's (kernel/...) only uid 0 of the namespace may
// set, whatever its capabilities: a rootless worker without --root keeps
// the kernel's defaults there (docs/threat-model.md).
func setNamespaceSysctls(limits map[string]int64) (degraded []string) {
	for name, n := range limits {
		if !slices.Contains(namespaceSysctls, name) || n <= 0 {
			continue
		}
		if strings.HasPrefix(name, "kernel/") && os.Geteuid() != 0 {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+name, []byte(strconv.FormatInt(n, 10)), 0); err != nil {
			return []string{"namespace-quota"}
		}
	}
	return nil
}
