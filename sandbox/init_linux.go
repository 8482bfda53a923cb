package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/tun"
)

// InitMain is the body of the sandbox init (nsgate re-executed with
// InitArg). It returns the process exit status: the worker's, or 125 when
// init fails (after telling the parent why).
func InitMain(apply ApplyGuard) int {
	// Capabilities, no_new_privs and the fork of the worker are per thread:
	// keep all of it on this one. The thread is never unlocked.
	runtime.LockOSThread()

	unix.CloseOnExec(3)
	ctl := os.NewFile(3, "nsgate-ctl")
	fail := func(err error) int {
		ctl.Write([]byte("err:" + err.Error()))
		return 125
	}
	var spec Spec
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &spec); err != nil {
		return fail(fmt.Errorf("sandbox spec: %w", err))
	}
	os.Unsetenv(configEnv)

	fd, err := tun.Open(spec.Iface)
	if err != nil {
		return fail(err)
	}
	if err := tun.Configure(spec.Iface); err != nil {
		return fail(err)
	}
	if err := unix.Sendmsg(int(ctl.Fd()), []byte("tun"), unix.UnixRights(fd), nil, 0); err != nil {
		return fail(fmt.Errorf("send tun descriptor: %w", err))
	}
	unix.Close(fd)

	buf := make([]byte, 16)
	n, err := ctl.Read(buf)
	if err != nil || string(buf[:n]) != "go" {
		// The parent gave up; leave quietly.
		return 125
	}

	degraded, err := setupMounts(&spec)
	if err != nil {
		return fail(err)
	}
	if spec.Hostname != "" {
		unix.Sethostname([]byte(spec.Hostname))
	}
	if err := dropCapabilities(); err != nil {
		return fail(err)
	}
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

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT)
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

// setupMounts makes the worker's mount namespace private, gives it a /proc
// for its own PID namespace, binds the gateway's resolv.conf, and makes the
// writable scratch directories noexec. It returns the parts that could not
// be done but are not required.
func setupMounts(spec *Spec) (degraded []string, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		degraded = append(degraded, "proc")
	}
	if spec.ResolvConf != "" {
		if err := unix.Mount(spec.ResolvConf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("bind resolv.conf: %w", err)
		}
	}
	for _, dir := range spec.NoExecDirs {
		if err := remountNoExec(dir); err != nil {
			degraded = append(degraded, "noexec:"+dir)
		}
	}
	return degraded, nil
}

// remountNoExec bind-mounts dir onto itself and remounts it noexec,
// nosuid and nodev, keeping the flags the kernel locks in a user namespace.
func remountNoExec(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range [][2]uintptr{
		{unix.ST_RDONLY, unix.MS_RDONLY},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	return unix.Mount("", dir, "", flags, "")
}

// dropCapabilities leaves the calling thread, and the worker it will fork,
// with no capabilities: ambient and inheritable cleared, the bounding set
// emptied (so an exec as uid 0 cannot regain any), permitted and effective
// zeroed, and no_new_privs set.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}
