//go:build linux

package guard

import (
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompErrnoAvailable asks the kernel whether filters may return
// SECCOMP_RET_ERRNO (which also tells that filter mode exists and that the
// seccomp call is not itself blocked).
func seccompErrnoAvailable() error {
	action := uint32(seccompRetErrno)
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if e != 0 {
		return e
	}
	return nil
}

// installFilter loads prog on every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC). The calling thread must have no_new_privs
// set; TSYNC copies it to the other threads.
func installFilter(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %w", e)
	}
	if r != 0 {
		// With TSYNC a positive result is a thread that could not be
		// synchronised (it has a filter we do not descend from).
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): thread %d could not be synchronised", r)
	}
	return nil
}
