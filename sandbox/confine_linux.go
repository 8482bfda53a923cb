package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// rootCandidates are the existing directories a tmpfs may be mounted over
// to become the new root; the mount is private to our namespace.
var rootCandidates = []string{"/tmp", "/mnt", "/var/tmp", "/run", "/dev"}

// Confine applies c to the calling process, in this order: root, then
// capabilities, then seccomp. On error the process may be partly
// confined and should exit.
func Confine(c Confinement) error {
	if err := NotDumpable(); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if c.Root {
		if err := pivotToTmpfs(c.Files); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	if c.DropCaps {
		if err := dropOwnCapabilities(); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	if c.Seccomp {
		prog, err := GatewayFilter()
		if err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
		if err := installFilterAllThreads(prog); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	return nil
}

// NotDumpable makes the calling process not dumpable, so that only a
// holder of CAP_SYS_PTRACE in the user namespace nsgate was started in may
// read or write its memory, list or reopen its descriptors (/proc/PID/fd)
// or read its environment. A network helper shares its uid, and often its
// user namespace, with the container it serves; once --enable-sandbox has
// dropped its capabilities it holds none the container lacks, and the
// kernel's ptrace check would then let a container that sees its PID
// (--pid=host) take the gateway over and rewrite its audit log.
// Dumpability is per process and comes back at an exec: each nsgate
// process that serves a container sets it for itself.
func NotDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the process not dumpable: %w", err)
	}
	return nil
}

// pivotToTmpfs makes a tmpfs holding files the root of our mount
// namespace.
func pivotToTmpfs(files map[string][]byte) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w (needs CAP_SYS_ADMIN over a mount namespace of our own)", err)
	}
	dir := ""
	for _, d := range rootCandidates {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dir = d
			break
		}
	}
	if dir == "" {
		return errors.New("no directory to mount the sandbox root on")
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=0755,size=1m,nr_inodes=256"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, filepath.Clean("/"+n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("sandbox root: %w", err)
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			return fmt.Errorf("sandbox root: %w", err)
		}
	}
	// pivot_root(".", ".") stacks the old root under the new one at "/";
	// detaching it leaves only the tmpfs. chdir and pivot_root act on the
	// fs_struct that all of the process's threads share.
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir %s: %w", dir, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("make the sandbox root read-only: %w", err)
	}
	return nil
}

// SharesMountNSWithParent reports whether this process is in the same
// mount namespace as its parent process (true also when that cannot be
// told). A helper that Podman starts with --enable-sandbox gets a mount
// namespace of its own (Podman adds CLONE_NEWNS); one started from a
// shell does not, and must call RunInOwnMountNS before Confine with Root.
func SharesMountNSWithParent() bool {
	var a, b unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &a); err != nil {
		return true
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()), &b); err != nil {
		return true
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// RunInOwnMountNS re-executes this program with the same arguments and
// standard streams, plus the descriptors fds at the same numbers and the
// environment variable marker=1, in a new mount namespace (the caller
// needs CAP_SYS_ADMIN in its user namespace). It forwards SIGINT,
// SIGTERM, SIGHUP and SIGQUIT, waits, and returns the child's exit status
// (128+N if it died of signal N). The child is killed if this process
// dies. The caller closes its own copies of fds after the child started
// (RunInOwnMountNS does that, so that pipe ends the child holds are not
// kept open twice). parent, when set, is applied to this process once the
// child runs (its Root is ignored): the process the caller holds, which
// only waits and forwards signals, is confined too.
func RunInOwnMountNS(fds []int, marker string, parent *Confinement) (int, error) {
	if err := NotDumpable(); err != nil {
		return 1, err
	}
	var extra []*os.File
	for _, fd := range fds {
		if fd < 3 {
			continue
		}
		for len(extra) < fd-2 {
			extra = append(extra, nil)
		}
		extra[fd-3] = os.NewFile(uintptr(fd), fmt.Sprintf("fd%d", fd))
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = os.Args
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = extra
	cmd.Env = append(os.Environ(), marker+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}

	// Pdeathsig follows the thread that forked: keep it.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	defer signal.Stop(sigs)
	err := cmd.Start()
	for _, f := range extra {
		if f != nil {
			f.Close()
		}
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return 1, fmt.Errorf("create a mount namespace: %w (--enable-sandbox needs CAP_SYS_ADMIN: run nsgate inside a user namespace, as Podman does, or without --enable-sandbox)", err)
		}
		return 1, fmt.Errorf("create a mount namespace: %w", err)
	}
	if err := confineParent(parent); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return 1, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s)
		case err := <-done:
			if err == nil {
				return 0, nil
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), nil
				}
				return ee.ExitCode(), nil
			}
			return 1, err
		}
	}
}

// RunInOwnMountNSOf is RunInOwnMountNS for a caller that lacks
// CAP_SYS_ADMIN (an unprivileged user outside any user namespace, as
// RootlessKit runs slirp4netns): the copy first joins the target's user
// namespace (as slirp4netns joins its target's before it sandboxes
// itself), where it has every capability, and its mount namespace is
// owned by that user namespace. The target's user namespace is userns, or
// the owner of the network namespace at netns; the caller must own it (be
// the user who created it). When there is none, or it is our own, this is
// RunInOwnMountNS.
func RunInOwnMountNSOf(fds []int, marker, userns, netns string, parent *Confinement) (int, error) {
	if err := NotDumpable(); err != nil {
		return 1, err
	}
	ufd := -1
	if userns != "" || netns != "" {
		netfd := -1
		if userns == "" {
			fd, err := openNS(netns, unix.CLONE_NEWNET)
			if err != nil {
				return 1, err
			}
			defer unix.Close(fd)
			netfd = fd
		}
		fd, err := userNSToJoin(userns, netfd)
		if err != nil {
			return 1, err
		}
		ufd = fd
	}
	if ufd < 0 {
		return RunInOwnMountNS(fds, marker, parent)
	}
	defer unix.Close(ufd)
	if userns == "" {
		userns = "the owner of " + netns
	}
	a := &reexecArgs{userfd: ufd}
	for _, fd := range fds {
		if fd < 3 {
			continue
		}
		if a.nkeep == len(a.keep) {
			return 1, errors.New("too many descriptors to pass on")
		}
		a.keep[a.nkeep] = int32(fd)
		a.nkeep++
	}
	var p [2]int
	err := unix.Pipe2(p[:], unix.O_CLOEXEC)
	if err != nil {
		return 1, err
	}
	errR, errW := p[0], p[1]
	defer unix.Close(errR)
	a.errfd = errW
	if a.path, err = unix.BytePtrFromString("/proc/self/exe"); err != nil {
		return 1, err
	}
	if a.argv, err = cStrings(os.Args); err != nil {
		return 1, err
	}
	if a.envv, err = cStrings(append(os.Environ(), marker+"=1")); err != nil {
		return 1, err
	}
	// Pdeathsig follows the thread that forked: keep it.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	defer signal.Stop(sigs)
	pid, err := a.start()
	unix.Close(errW)
	if err != nil {
		return 1, fmt.Errorf("create a mount namespace: fork: %w", err)
	}
	if step, errno, failed := readForkError(errR); failed {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		switch step {
		case stepReexecUserns:
			return 1, fmt.Errorf("join user namespace %s: %w (--enable-sandbox without CAP_SYS_ADMIN joins the target's user namespace: nsgate must run as the user who created it)", userns, errno)
		case stepReexecMountns:
			return 1, fmt.Errorf("create a mount namespace in user namespace %s: %w", userns, errno)
		case stepReexecExec:
			return 1, fmt.Errorf("re-execute nsgate (/proc/self/exe): %w", errno)
		}
		return 1, fmt.Errorf("create a mount namespace: child failed at step %d: %w", step, errno)
	}
	for _, fd := range fds {
		if fd > 2 {
			unix.Close(fd)
		}
	}
	if err := confineParent(parent); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		return 1, err
	}
	done := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		done <- ws
	}()
	for {
		select {
		case s := <-sigs:
			unix.Kill(pid, s.(syscall.Signal))
		case ws := <-done:
			if ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return ws.ExitStatus(), nil
		}
	}
}

// confineParent applies c, less its root, to the process that waits for
// the confined copy.
func confineParent(c *Confinement) error {
	if c == nil {
		return nil
	}
	p := *c
	p.Root, p.Files = false, nil
	if err := Confine(p); err != nil {
		return fmt.Errorf("confine the waiting process: %w", err)
	}
	return nil
}
