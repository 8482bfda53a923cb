//go:build linux

package attack

import (
	"context"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execveatEmpty replaces the process with the program open at fd
// (execveat with AT_EMPTY_PATH). It returns only on failure.
func execveatEmpty(fd int, argv, env []string) error {
	empty, err := syscall.BytePtrFromString("")
	if err != nil {
		return err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	return errno
}

// nsIOUring tries to set up an io_uring (whose operations seccomp cannot
// see).
func nsIOUring(ctx context.Context, a *attacker) result {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return blockedf("io_uring_setup: %v", errno)
	}
	unix.Close(int(fd))
	return allowedf("io_uring_setup gave fd %d", fd)
}
