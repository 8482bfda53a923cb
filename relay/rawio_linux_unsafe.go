//go:build linux

package relay

import (
	"syscall"
	"unsafe"
)

// rawIOMax bounds a read or write of a host socket made without telling
// the scheduler (RawSyscall). A Syscall's entry wakes the runtime's sysmon
// thread whenever it slept because nsgate was idle, which on a quiet flow
// is after most requests: a futex wake and a thread woken on another CPU
// in front of the request (docs/performance.md, session 12). Small reads
// and writes of a non-blocking socket only copy; larger ones go through
// Syscall, so that the runtime may hand nsgate's processor to another
// thread while the kernel works.
const rawIOMax = 4096

// rawRead is read(2) on a non-blocking descriptor, as RawSyscall.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// rawSend is send(2) with MSG_NOSIGNAL on a non-blocking stream socket,
// as RawSyscall: a peer that closed gets EPIPE, never a signal.
func rawSend(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}
