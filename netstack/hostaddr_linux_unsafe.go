//go:build linux

package netstack

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvNoWait is recv(2) with MSG_DONTWAIT, as RawSyscall (it never blocks).
func recvNoWait(fd int, buf []byte) unix.Errno {
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0)
	return errno
}
