package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// `nsgate guard` is the exec and syscall guard alone, for a container whose
// network nsgate already provides. The exec audit needs a process outside
// the guard to answer the notifier (Landlock gives each thread of a
// restricted Go process a domain of its own, and a thread may not read
// /proc of a process in a sibling domain), so it is two processes: a small
// supervisor (Supervise) and the guard child (ChildMain), which restricts
// itself and executes the command in place.

// ChildArg is the hidden first argument that makes nsgate the guard child;
// cmd/nsgate dispatches it to ChildMain. guardChildSpecEnv carries the child's
// Config as JSON.
const (
	ChildArg          = "__guard-exec"
	guardChildSpecEnv = "NSGATE_GUARD_SPEC"
)

// exitFailure is the status of a supervisor or child that failed itself.
const exitFailure = 125

// SuperviseOptions are what Supervise runs and the hooks it calls.
type SuperviseOptions struct {
	// Config is the guard's configuration; Config.Command is run.
	Config Config
	// Serve serves the child's exec notifier listener (it takes
	// ownership); nil is an error if the child installs one.
	Serve func(*os.File) error
	// Degraded, when set, is told the layers the child could not apply.
	Degraded func(layers string)
	// OnStart, when set, is given a func that ends the child (e.g. to
	// stop it when the audit log fails).
	OnStart func(kill func())
	// Stderr receives nsgate's own error lines.
	Stderr io.Writer
}

// stderrEnv prints nsgate's error lines.
type stderrEnv struct{ w io.Writer }

func (e stderrEnv) errorf(format string, args ...any) {
	fmt.Fprintf(e.w, "nsgate: "+format+"\n", args...)
}

// Supervise runs o.Config.Command as `nsgate guard` does: it re-executes
// nsgate (os.Executable) as the guard child (ChildArg), which restricts
// itself and passes back the exec notifier's listener, served at once by
// o.Serve; it forwards signals, reaps orphans (when nsgate is PID 1 or a
// subreaper) and returns the command's exit status as a shell would (125
// when the child could not start it).
func Supervise(o SuperviseOptions) int {
	cfg, e := o.Config, stderrEnv{o.Stderr}
	spec, err := json.Marshal(cfg)
	if err != nil {
		e.errorf("guard: %v", err)
		return exitFailure
	}
	self, err := os.Executable()
	if err != nil {
		e.errorf("guard: find own executable: %v", err)
		return exitFailure
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		e.errorf("guard: control socketpair: %v", err)
		return exitFailure
	}
	ctl := os.NewFile(uintptr(pair[0]), "nsgate-guard-ctl")
	defer ctl.Close()
	childEnd := os.NewFile(uintptr(pair[1]), "nsgate-guard-ctl-child")

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT)
	defer signal.Stop(sigs)
	// Like run, only the standard streams reach the command: nsgate marks
	// every other inherited descriptor close-on-exec at start.
	proc, err := os.StartProcess(self, []string{"nsgate-guard", ChildArg}, &os.ProcAttr{
		Env:   append(os.Environ(), guardChildSpecEnv+"="+string(spec)),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, childEnd}, // control socket: fd 3
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	childEnd.Close()
	if err != nil {
		e.errorf("guard: start: %v", err)
		return exitFailure
	}
	if o.OnStart != nil {
		o.OnStart(func() { proc.Signal(syscall.SIGKILL) })
	}
	go func() {
		for s := range sigs {
			proc.Signal(s)
		}
	}()

	if err := receiveChild(ctl, o.Serve, o.Degraded); err != nil {
		e.errorf("guard: %v", err)
		proc.Kill()
		reapUntil(proc.Pid)
		return exitFailure
	}
	return reapUntil(proc.Pid)
}

// receiveChild reads the guard child's report: its listener (served at
// once) and degraded layers, or why it failed.
func receiveChild(ctl *os.File, serve func(*os.File) error, degraded func(string)) error {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(ctl.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return errors.New("the guard child exited before restricting itself")
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	msg := string(buf[:n])
	if rest, ok := strings.CutPrefix(msg, "err:"); ok {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return errors.New(rest)
	}
	rest, ok := strings.CutPrefix(msg, "ok")
	if !ok || len(fds) > 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("guard child: unexpected message %q", msg)
	}
	if d := strings.TrimSpace(rest); d != "" && degraded != nil {
		degraded(d)
	}
	if len(fds) == 1 && serve == nil {
		unix.Close(fds[0])
		return errors.New("the guard child installed an exec notifier but nothing serves it")
	}
	if len(fds) == 1 {
		return serve(os.NewFile(uintptr(fds[0]), "nsgate-exec-listener"))
	}
	return nil
}

// reapUntil waits for children (orphans are adopted when nsgate is PID 1
// or a subreaper) until pid exits, and returns its status as a shell
// would: the exit code, or 128+N when killed by signal N.
func reapUntil(pid int) int {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return exitFailure
		}
		if got != pid {
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

// ChildMain is the guard child (nsgate run with ChildArg, see Supervise):
// it restricts itself, sends "ok [DEGRADED]" with the exec listener over
// its control socket (fd 3) or "err:WHY", and executes the command in
// place. It returns only on failure.
func ChildMain(stderr io.Writer) int {
	e := stderrEnv{stderr}
	const ctl = 3
	unix.CloseOnExec(ctl)
	fail := func(err error) int {
		unix.Sendmsg(ctl, []byte("err:"+err.Error()), nil, nil, 0)
		return exitFailure
	}
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(guardChildSpecEnv)), &cfg); err != nil {
		return fail(fmt.Errorf("guard spec: %w", err))
	}
	os.Unsetenv(guardChildSpecEnv)
	plan, degraded, listener, err := RestrictSelf(cfg)
	if err != nil {
		return fail(err)
	}
	msg := []byte("ok " + strings.Join(degraded, ","))
	var rights []byte
	if listener != nil {
		rights = unix.UnixRights(int(listener.Fd()))
	}
	err = unix.Sendmsg(ctl, msg, rights, nil, 0)
	if listener != nil {
		listener.Close()
	}
	if err != nil {
		return fail(fmt.Errorf("send exec listener: %w", err))
	}
	err = unix.Exec(plan.Path, cfg.Command, os.Environ())
	e.errorf("guard: exec %s: %v", plan.Path, err)
	return exitFailure
}
