//go:build linux

package probe

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execveat is execveat(2); it returns only on failure.
func execveat(dirfd int, path string, argv, env []string, flags int) error {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	av, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	ev, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	_, _, en := syscall.Syscall6(unix.SYS_EXECVEAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&av[0])), uintptr(unsafe.Pointer(&ev[0])), uintptr(flags), 0)
	return en
}
