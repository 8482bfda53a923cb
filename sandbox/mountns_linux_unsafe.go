//go:build linux

package sandbox

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reexecArgs is what the raw-forked child of RunInOwnMountNSOf needs,
// prepared before the fork (see forkArgs for the rules the child lives by).
type reexecArgs struct {
	userfd, errfd int
	keep          [8]int32 // descriptors that must survive execve
	nkeep         int
	path          *byte
	argv, envv    []*byte
	mask          uint64

	errStep, errNo uint32
}

// Steps of the re-exec child, reported on the error pipe.
const (
	stepReexecUserns = 1 + iota
	stepReexecMountns
	stepReexecKeep
	stepReexecExec
)

// start forks the child with every signal blocked and returns its PID.
func (a *reexecArgs) start() (int, error) {
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
	pid, errno := forkReexecChild(a)
	unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	runtime.KeepAlive(a)
	if errno != 0 {
		return 0, errno
	}
	return pid, nil
}

// forkReexecChild forks. The child joins the user namespace a.userfd
// (which gives it every capability there), unshares a new mount namespace
// (owned by that user namespace), clears close-on-exec on the descriptors
// to keep, asks for SIGTERM when its parent dies, restores the signal mask
// and executes a.path; on failure it writes the step and errno to a.errfd
// and exits 127.
//
//go:nosplit
//go:norace
//go:nocheckptr
func forkReexecChild(a *reexecArgs) (pid int, errno syscall.Errno) {
	r1, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if r1 != 0 {
		return int(r1), 0
	}

	// The child.
	step := uint32(stepReexecUserns)
	if _, _, e = syscall.RawSyscall(unix.SYS_SETNS, uintptr(a.userfd), uintptr(unix.CLONE_NEWUSER), 0); e != 0 {
		goto fail
	}
	step = stepReexecMountns
	if _, _, e = syscall.RawSyscall(unix.SYS_UNSHARE, uintptr(unix.CLONE_NEWNS), 0, 0); e != 0 {
		goto fail
	}
	step = stepReexecKeep
	for i := 0; i < a.nkeep; i++ {
		if _, _, e = syscall.RawSyscall(unix.SYS_FCNTL, uintptr(a.keep[i]), unix.F_SETFD, 0); e != 0 {
			goto fail
		}
	}
	// SIGTERM, not SIGKILL, when the held parent dies (RootlessKit
	// kills it with SIGKILL): the working copy then ends as on any stop,
	// with its audit log's exit record and head.
	syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&a.mask)), 0, 8, 0, 0)
	step = stepReexecExec
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
