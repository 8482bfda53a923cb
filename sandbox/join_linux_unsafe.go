//go:build linux

package sandbox

import (
	"errors"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// forkArgs is everything the raw-forked child of OpenTAP needs, prepared
// by the parent before the fork: after it the child may not allocate,
// grow its stack or call into the Go runtime, so it only reads these
// fields and makes raw system calls. The struct and everything it points
// to live on the heap (newForkArgs allocates them), so the addresses stay
// valid in the child's copy of memory.
type forkArgs struct {
	userfd, netfd int // namespaces to join (userfd -1: none)
	sockfd, errfd int // socket moved to fd 3; close-on-exec error pipe
	path          *byte
	argv, envv    []*byte
	capHdr        *unix.CapUserHeader
	capData       *[2]unix.CapUserData
	mask          uint64 // signal mask restored just before execve

	// Written by the child on failure, then sent on errfd.
	errStep, errNo uint32
}

func newForkArgs(userfd, netfd, sockfd, errfd int, path string, argv, envv []string) (*forkArgs, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	av, err := cStrings(argv)
	if err != nil {
		return nil, err
	}
	ev, err := cStrings(envv)
	if err != nil {
		return nil, err
	}
	return &forkArgs{
		userfd: userfd, netfd: netfd, sockfd: sockfd, errfd: errfd,
		path: p, argv: av, envv: ev,
		capHdr:  &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3},
		capData: new([2]unix.CapUserData),
	}, nil
}

// cStrings returns a NULL-terminated array of C strings.
func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, len(ss)+1)
	for i, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// start forks the child with every signal blocked on the forking thread
// (so that no Go signal handler can run in the child) and returns its
// PID. The child restores the mask just before execve.
func (a *forkArgs) start() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return 0, err
	}
	a.mask = uint64(old.Val[0])
	pid, errno := forkJoinChild(a)
	unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	runtime.KeepAlive(a)
	if errno != 0 {
		return 0, errno
	}
	if pid <= 0 {
		return 0, errors.New("clone returned no pid")
	}
	return pid, nil
}

// forkJoinChild forks. In the parent it returns the child's PID. The child
// never returns: it joins the user namespace (if any) and the network
// namespace, makes CAP_NET_ADMIN ambient (best effort: it matters only
// when the exec is not as uid 0 of that namespace), asks for SIGKILL if
// its parent dies, moves the socket to fd 3, restores the signal mask and
// executes a.path; on failure it writes the step and errno to a.errfd and
// exits 127.
//
// It must not split its stack or be instrumented: the child is a copy of
// one thread of a Go process, with no runtime behind it.
//
//go:nosplit
//go:norace
//go:nocheckptr
func forkJoinChild(a *forkArgs) (pid int, errno syscall.Errno) {
	r1, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if r1 != 0 {
		return int(r1), 0
	}

	// The child.
	var step uint32
	if a.userfd >= 0 {
		step = stepSetnsUser
		if _, _, e = syscall.RawSyscall(unix.SYS_SETNS, uintptr(a.userfd), uintptr(unix.CLONE_NEWUSER), 0); e != 0 {
			goto fail
		}
	}
	step = stepSetnsNet
	if _, _, e = syscall.RawSyscall(unix.SYS_SETNS, uintptr(a.netfd), uintptr(unix.CLONE_NEWNET), 0); e != 0 {
		goto fail
	}
	// CAP_NET_ADMIN into the inheritable set, then the ambient set.
	if _, _, e = syscall.RawSyscall(unix.SYS_CAPGET, uintptr(unsafe.Pointer(a.capHdr)), uintptr(unsafe.Pointer(a.capData)), 0); e == 0 {
		a.capData[0].Inheritable |= 1 << unix.CAP_NET_ADMIN
		if _, _, e = syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(a.capHdr)), uintptr(unsafe.Pointer(a.capData)), 0); e == 0 {
			syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, unix.CAP_NET_ADMIN, 0, 0, 0)
		}
	}
	syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	step = stepDup
	if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, uintptr(a.sockfd), 3, 0); e != 0 {
		goto fail
	}
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&a.mask)), 0, 8, 0, 0)
	step = stepExec
	_, _, e = syscall.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(a.path)),
		uintptr(unsafe.Pointer(&a.argv[0])),
		uintptr(unsafe.Pointer(&a.envv[0])))

fail:
	a.errStep = step
	a.errNo = uint32(e)
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(a.errfd), uintptr(unsafe.Pointer(&a.errStep)), 8)
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
	}
}
