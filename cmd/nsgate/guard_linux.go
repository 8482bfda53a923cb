package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/session"
)

// superviseGuard starts the guard child, serves its exec notifier and
// returns COMMAND's exit status (125 when the child could not start it).
func superviseGuard(e env, s *session.Session, plan guard.Plan, cfg guard.Config) int {
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
	proc, err := os.StartProcess(self, []string{"nsgate-guard", guardExecArg}, &os.ProcAttr{
		Env:   append(os.Environ(), guardSpecEnv+"="+string(spec)),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, childEnd}, // control socket: fd 3
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	childEnd.Close()
	if err != nil {
		e.errorf("guard: start: %v", err)
		return exitFailure
	}
	s.StopOnAuditFailure(func() { proc.Signal(syscall.SIGKILL) })
	go func() {
		for s := range sigs {
			proc.Signal(s)
		}
	}()

	if err := receiveGuardChild(ctl, s.ExecAudit(plan), s.Log()); err != nil {
		e.errorf("guard: %v", err)
		proc.Kill()
		reapUntil(proc.Pid)
		return exitFailure
	}
	return reapUntil(proc.Pid)
}

// receiveGuardChild reads the guard child's report: its listener (served
// at once) and degraded layers, or why it failed.
func receiveGuardChild(ctl *os.File, serve func(*os.File) error, log *audit.Logger) error {
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
	if d := strings.TrimSpace(rest); d != "" {
		log.Log(audit.Policy{Action: "degraded", Error: "not in force: " + d})
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

// cmdGuardExec is the guard child (see cmdGuard): it restricts itself,
// sends "ok [DEGRADED]" with the exec listener over its control socket
// (fd 3) or "err:WHY", and executes the command in place.
func cmdGuardExec(e env, _ []string) int {
	const ctl = 3
	unix.CloseOnExec(ctl)
	fail := func(err error) int {
		unix.Sendmsg(ctl, []byte("err:"+err.Error()), nil, nil, 0)
		return exitFailure
	}
	var cfg guard.Config
	if err := json.Unmarshal([]byte(os.Getenv(guardSpecEnv)), &cfg); err != nil {
		return fail(fmt.Errorf("guard spec: %w", err))
	}
	os.Unsetenv(guardSpecEnv)
	plan, degraded, listener, err := restrictSelf(cfg)
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
