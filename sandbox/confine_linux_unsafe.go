//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// errCgo explains AllThreadsSyscall's ENOTSUP.
var errCgo = errors.New("needs a binary built with CGO_ENABLED=0 (capabilities are per thread, and only a cgo-free binary can change them on every thread)")

// allThreads runs a system call on every thread of the process.
func allThreads(what string, trap, a1, a2, a3 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	switch {
	case e == syscall.ENOTSUP:
		return fmt.Errorf("%s: %w", what, errCgo)
	case e != 0:
		return fmt.Errorf("%s: %w", what, e)
	}
	return nil
}

// dropOwnCapabilities leaves every thread with at most
// CAP_NET_BIND_SERVICE (kept, as slirp4netns keeps it, for host-side
// forwards below port 1024 when nsgate runs as real root), nothing
// inheritable or ambient, a bounding set of that one capability, and
// no_new_privs.
func dropOwnCapabilities() error {
	const keep = unix.CAP_NET_BIND_SERVICE
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	havePermitted := data[0].Permitted != 0 || data[1].Permitted != 0
	keepBit := data[0].Permitted & (1 << keep)

	if err := allThreads("clear ambient capabilities", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return err
	}
	if havePermitted {
		// Dropping from the bounding set needs CAP_SETPCAP; without any
		// permitted capability there is nothing to regain anyway
		// (no_new_privs below stops file capabilities).
		for c := 0; c <= unix.CAP_LAST_CAP; c++ {
			if c == keep {
				continue
			}
			err := allThreads("drop bounding capability", unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
			if err != nil && !errors.Is(err, unix.EINVAL) {
				return err
			}
		}
	}
	*data = [2]unix.CapUserData{{Effective: keepBit, Permitted: keepBit}}
	if err := allThreads("drop capabilities", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return err
	}
	return allThreads("set no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
}

// dropInitCapabilities leaves every thread of init, and the worker it will
// fork, with no capabilities and no_new_privs: permitted, effective and
// inheritable zeroed (which clears the ambient set too), and on the
// calling thread, the one that forks the worker (init runs locked to it),
// the ambient set cleared and the bounding set emptied, so that an exec
// as uid 0 cannot regain any. All threads, not only the one that forks
// the worker: the worker runs as init's uid and may open init's
// /proc/1/mem, so init must hold nothing the worker does not.
//
// The bounding set of init's other threads is left as it was: they never
// exec, and with no permitted capability and no_new_privs a thread can
// gain none from it (capset cannot raise an inheritable capability that
// is not permitted, and an exec under no_new_privs keeps at most what was
// permitted before). Emptying it there too took one all-threads system
// call per capability, each of which stops every thread and waits for
// each to run a signal handler: 41 of them were half of init's CPU, and
// far more of its wall time when many sandboxes start at once.
func dropInitCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := allThreads("drop capabilities", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return err
	}
	return allThreads("set no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
}

// installFilterAllThreads sets no_new_privs and installs prog with
// SECCOMP_FILTER_FLAG_TSYNC, which puts it (and no_new_privs) on every
// thread at once; this works in cgo binaries too.
func installFilterAllThreads(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// no_new_privs must be set on the thread that installs the filter.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(fprog)))
	if e != 0 {
		return fmt.Errorf("install filter: %w", e)
	}
	if r != 0 {
		return fmt.Errorf("install filter: thread %d cannot take it", r)
	}
	return nil
}
