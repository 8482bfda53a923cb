package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/nsgate/nsgate/internal/diag/starttrace"
	"golang.org/x/sys/unix"
)

// Child is a running sandbox init. Its methods are not safe for concurrent
// use, except Signal, which may be called from any goroutine.
type Child struct {
	cmd *exec.Cmd
	ctl *os.File // parent's end of the control socketpair
	// TunFD is the worker's TUN descriptor, owned by the caller once Start
	// returns (close it after the gateway using it has stopped).
	TunFD int
	// ExecListener, set before Release, receives the exec notifier's
	// listener when the guard installs one (GuardResult.ExecListener). It
	// is called from Release before the worker starts, takes ownership of
	// the file and must start answering at once (e.g. guard.ServeExec):
	// init's exec of the worker already waits for an answer, and Release
	// waits for that exec. If it returns an error, or is nil when a
	// listener arrives, Release fails.
	ExecListener func(*os.File) error
}

// msgExecListener is init's message carrying the exec listener.
const msgExecListener = "exec-listener"

// initEnv is added to init's environment (the worker gets Spec.Env).
// Init is one goroutine of set-up, then a reaper: one processor is all it
// needs, and with GOMAXPROCS set its Go runtime starts with one instead
// of setting up one per CPU, which setProcs then had to take down again
// (a stop-the-world). In a burst of 100 sandboxes this saved about 5% of
// the CPU a start costs and 0.4 MiB of memory per sandbox (per-processor
// caches and stacks); docs/performance.md, "Density".
var initEnv = []string{"GOMAXPROCS=1"}

// Start launches init in new namespaces and returns once init has opened
// and configured the worker's TUN device and sent its descriptor. The
// worker does not run until Release is called. On error nothing is left
// running.
func Start(spec Spec, stdio Stdio) (*Child, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command to run")
	}
	if spec.Env == nil {
		// Init's own environment differs (initEnv), so the worker's is
		// spelled out.
		spec.Env = os.Environ()
	}
	spec.Build = buildStamp
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox spec: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socketpair: %w", err)
	}
	// The parent's end is non-blocking, so os.NewFile puts it in the
	// runtime's poller: nsgate waits for init's messages with a parked
	// goroutine, not a thread held in recvmsg (ctlRecv).
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("control socketpair: %w", err)
	}
	parentEnd := os.NewFile(uintptr(pair[0]), "nsgate-ctl")
	childEnd := os.NewFile(uintptr(pair[1]), "nsgate-ctl-child")
	defer childEnd.Close()

	prog, err := initProgram()
	if err != nil {
		parentEnd.Close()
		return nil, err
	}
	cmd := exec.Command(prog, InitArg)
	cmd.Args[0] = InitProgram
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	specFile, err := specMemfd(js)
	if err != nil {
		parentEnd.Close()
		return nil, err
	}
	defer specFile.Close()
	cmd.ExtraFiles = []*os.File{childEnd, specFile} // fds 3 and 4 in init
	traceFile, traceEnv := starttrace.TraceFile(5)
	if traceFile != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, traceFile) // fd 5
	}
	cmd.Env = slices.Concat(withoutEnv(os.Environ(), spec.InitEnvDrop), initEnv, traceEnv)
	cmd.SysProcAttr = sysProcAttr(spec.Root)
	err = cmd.Start()
	// Init holds its end now. Closed here, not when Start returns: while
	// nsgate held a copy, an init that died without a word (a crash, the
	// OOM killer, a wrong program installed as nsgate-init) left nsgate
	// waiting for its message forever instead of seeing end of file.
	childEnd.Close()
	if err != nil {
		parentEnd.Close()
		return nil, usernsError(err)
	}
	starttrace.Mark("init-forked")
	c := &Child{cmd: cmd, ctl: parentEnd, TunFD: -1}
	fd, err := c.recvTun()
	if err != nil {
		c.kill()
		return nil, err
	}
	c.TunFD = fd
	starttrace.Mark("tun-received")
	return c, nil
}

// initProgram returns the program init is started from: nsgate-init from
// the same build when it is installed beside nsgate (or in
// ../libexec/nsgate), else nsgate itself. The small program is the
// cheaper: it links none of the gateway (gVisor, the policy, the audit,
// the lab), so its own start costs 7 to 11 ms of CPU against nsgate's 16
// to 18, and a sandbox 0.3 MiB less memory (docs/performance.md, "Init as
// a program of its own"). The two differ in nothing else: both run
// InitMain with the same guard.
func initProgram() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	if buildStamp == "" {
		return self, nil
	}
	for _, p := range initCandidates(self) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			// Installed, but perhaps not for this caller (root's, mode
			// 0700; a noexec mount): the exec's EACCES would otherwise
			// read as the kernel refusing the user namespace.
			if err := unix.Access(p, unix.X_OK); err != nil {
				return "", fmt.Errorf("the sandbox's init %s: %w (install it executable by whoever runs nsgate, mode 0755 like nsgate)", p, err)
			}
			return p, nil
		}
	}
	return self, nil
}

// specMemfd returns a sealed memory file holding the JSON spec, for init
// to read at fd 4. Not an environment variable: the worker could read
// that in /proc/1/environ for as long as init runs (the paths of nsgate's
// files, the hide list), where the descriptor is read and closed before
// the worker exists.
func specMemfd(js []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("nsgate-sandbox-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("sandbox spec: %w", err)
	}
	f := os.NewFile(uintptr(fd), "nsgate-sandbox-spec")
	if _, err := f.Write(js); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox spec: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox spec: %w", err)
	}
	return f, nil
}

// sysProcAttr builds the clone flags and id maps for init. Rootless, the
// caller's uid and gid are mapped to themselves and init keeps the
// capabilities it needs over its namespaces as ambient capabilities (an
// exec as a non-zero uid would otherwise drop them); with root, they are
// mapped to 0 and init has all capabilities inside.
func sysProcAttr(root bool) *syscall.SysProcAttr {
	uid, gid := os.Getuid(), os.Getgid()
	inUID, inGID := uid, gid
	if root {
		inUID, inGID = 0, 0
	}
	a := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: inUID, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: inGID, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		// If nsgate dies, init dies, and with it the whole PID namespace.
		Pdeathsig: syscall.SIGKILL,
	}
	if !root && inUID != 0 {
		// CAP_SYS_RESOURCE: the per-user limits of the namespace
		// (Quota.UserNS). Init drops every capability before the worker.
		a.AmbientCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_SYS_RESOURCE}
	}
	return a
}

// usernsError turns a failed clone into a line that says how to fix it.
func usernsError(err error) error {
	if e := NamespaceError("cannot create user namespace", err); e != nil {
		return e
	}
	return fmt.Errorf("start sandbox: %w", err)
}

// NamespaceError explains a clone of new namespaces that the kernel
// refused: what failed, err, and how to fix it. It returns nil when err is
// not one of the refusals it knows (EPERM, EACCES, ENOSPC, EINVAL).
func NamespaceError(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM) && underSeccompFilter():
		return fmt.Errorf("%s: %w (a seccomp filter refuses namespaces to this process, as a container's default profile does: run the container with --security-opt seccomp=unconfined, see docs/docker.md; or unprivileged user namespaces are disabled: set kernel.unprivileged_userns_clone=1)", what, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%s: %w (unprivileged user namespaces are disabled: run as root, or set kernel.unprivileged_userns_clone=1, or allow them in AppArmor with kernel.apparmor_restrict_unprivileged_userns=0)", what, err)
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%s: %w (raise user.max_user_namespaces and user.max_net_namespaces)", what, err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%s: %w (the kernel lacks user, network, PID or mount namespaces)", what, err)
	}
	return nil
}

// underSeccompFilter reports whether a seccomp filter is in force on this
// process (a container engine's profile: nsgate applies its own only to
// the worker and its helpers, after the namespaces exist). A variable, so
// tests can set it.
var underSeccompFilter = func() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			return strings.TrimSpace(v) == "2"
		}
	}
	return false
}

// recvTun waits for init's first message: the TUN descriptor, or an error
// text when init failed.
func (c *Child) recvTun() (int, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, err := c.recv(buf, oob)
	if err != nil {
		return -1, fmt.Errorf("sandbox control: %w", err)
	}
	msg := string(buf[:n])
	if n == 0 {
		return -1, errors.New("sandbox init exited before configuring the network")
	}
	if strings.HasPrefix(msg, "err:") {
		return -1, errors.New(strings.TrimPrefix(msg, "err:"))
	}
	if msg != "tun" || oobn == 0 {
		return -1, fmt.Errorf("sandbox control: unexpected message %q", msg)
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cmsgs) != 1 {
		return -1, fmt.Errorf("sandbox control: bad control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&cmsgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("sandbox control: bad descriptor message: %v", err)
	}
	unix.CloseOnExec(fds[0])
	return fds[0], nil
}

// recv reads one message of init's from the control socket, and the
// descriptors passed with it (close-on-exec), waiting in the runtime's
// poller: a thread blocked in recvmsg would keep the system monitor
// polling, and in a burst of starts on a busy machine its processor is
// handed to others and must be taken back (docs/performance.md,
// "Density").
func (c *Child) recv(buf, oob []byte) (n, oobn int, err error) {
	rc, err := c.ctl.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	rerr := rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return !errors.Is(err, unix.EAGAIN)
	})
	if err == nil {
		err = rerr
	}
	return n, oobn, err
}

// Release tells init to start the worker. It returns init's report: the
// layers it could not apply (degraded), or an error if init failed to start
// the worker (init then exits 125).
func (c *Child) Release() (degraded []string, err error) {
	if _, err := c.ctl.Write([]byte("go")); err != nil {
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
			// Init is gone (killed from the host, the OOM killer) since
			// it sent the TUN: the same failure as its silence below.
			return nil, errors.New("sandbox init exited before starting the worker")
		}
		return nil, fmt.Errorf("sandbox control: %w", err)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, err := c.recv(buf, oob)
		if err != nil || n == 0 {
			return nil, errors.New("sandbox init exited before starting the worker")
		}
		msg := string(buf[:n])
		fds := rightsOf(oob[:oobn])
		if msg != msgExecListener {
			closeAll(fds)
		}
		switch {
		case msg == msgExecListener:
			if err := c.takeExecListener(fds); err != nil {
				return nil, err
			}
		case strings.HasPrefix(msg, "err:"):
			return nil, errors.New(strings.TrimPrefix(msg, "err:"))
		case strings.HasPrefix(msg, "started"):
			rest := strings.TrimSpace(strings.TrimPrefix(msg, "started"))
			if rest != "" {
				degraded = strings.Split(rest, ",")
			}
			return degraded, nil
		default:
			return nil, fmt.Errorf("sandbox control: unexpected message %q", msg)
		}
	}
}

// takeExecListener hands the listener init sent to c.ExecListener.
func (c *Child) takeExecListener(fds []int) error {
	if len(fds) != 1 {
		closeAll(fds)
		return errors.New("sandbox control: exec listener message without exactly one descriptor")
	}
	f := os.NewFile(uintptr(fds[0]), "nsgate-exec-listener")
	if c.ExecListener == nil {
		f.Close()
		return errors.New("sandbox init installed an exec notifier but nothing serves it")
	}
	if err := c.ExecListener(f); err != nil {
		return fmt.Errorf("exec audit: %w", err)
	}
	return nil
}

// rightsOf returns the descriptors passed in a control message buffer.
func rightsOf(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Pid is init's process id in nsgate's PID namespace.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Signal forwards sig to init, which passes it on to the worker.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Wait waits for init to exit and returns the worker's exit status as init
// reported it: the worker's code, 128+N when the worker died of signal N,
// and 125 when init itself failed.
func (c *Child) Wait() int {
	c.awaitExit()
	err := c.cmd.Wait()
	c.ctl.Close()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 125
}

// awaitExit returns once init has exited (or at once when that cannot be
// watched), waiting in the runtime's poller on a pidfd rather than in a
// thread blocked in waitid for the sandbox's whole life; cmd.Wait then
// reaps init without blocking.
func (c *Child) awaitExit() {
	pfd, err := unix.PidfdOpen(c.cmd.Process.Pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return // cmd.Wait blocks instead
	}
	f := os.NewFile(uintptr(pfd), "nsgate-init-pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		// A pidfd is readable once its process has exited; WNOWAIT
		// leaves init to be reaped by cmd.Wait.
		var si unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || si.Signo != 0
	})
}

func (c *Child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
	c.ctl.Close()
}

// Kill stops init (and with it every process in the worker's PID
// namespace) and reaps it.
func (c *Child) Kill() { c.kill() }

// ownNprocHalf is half of nsgate's own soft RLIMIT_NPROC (0: unlimited).
func ownNprocHalf() uint64 {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &rl) != nil || rl.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return max(rl.Cur/2, 1)
}

// withoutEnv returns env without the variables named in drop.
func withoutEnv(env, drop []string) []string {
	if len(drop) == 0 {
		return env
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(drop, k) {
			out = append(out, kv)
		}
	}
	return out
}
