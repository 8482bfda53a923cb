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
// kept open twice).
func RunInOwnMountNS(fds []int, marker string) (int, error) {
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
