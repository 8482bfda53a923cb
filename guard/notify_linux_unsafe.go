//go:build linux

package guard

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp user-notification ABI (include/uapi/linux/seccomp.h). The
// ioctl numbers encode these sizes, so the layouts are fixed.

// notifData is struct seccomp_data.
type notifData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

// notif is struct seccomp_notif (80 bytes).
type notif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  notifData
}

// notifResp is struct seccomp_notif_resp (24 bytes).
type notifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// notifAddfd is struct seccomp_notif_addfd (24 bytes).
type notifAddfd struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

// notifSizes is struct seccomp_notif_sizes.
type notifSizes struct {
	Notif, Resp, Data uint16
}

// notifyAvailable asks the kernel whether filters may return
// SECCOMP_RET_USER_NOTIF and whether its notification structures have the
// sizes this file was written for.
func notifyAvailable() error {
	action := uint32(seccompRetUserNotif)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
		return fmt.Errorf("SECCOMP_RET_USER_NOTIF: %w", e)
	}
	var s notifSizes
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&s))); e != 0 {
		return fmt.Errorf("SECCOMP_GET_NOTIF_SIZES: %w", e)
	}
	if int(s.Notif) != int(unsafe.Sizeof(notif{})) || int(s.Resp) != int(unsafe.Sizeof(notifResp{})) ||
		int(s.Data) != int(unsafe.Sizeof(notifData{})) {
		return fmt.Errorf("unexpected notification sizes %+v", s)
	}
	return nil
}

// installNotifier loads prog on every thread of the process and returns
// the new listener descriptor (close-on-exec). TSYNC_ESRCH lets TSYNC be
// combined with NEW_LISTENER (Linux 5.7): a thread that cannot be
// synchronised makes the call fail with ESRCH instead of naming it.
func installNotifier(prog []bpf.Instruction) (int, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return -1, fmt.Errorf("assemble: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return -1, fmt.Errorf("seccomp(SET_MODE_FILTER, NEW_LISTENER|TSYNC|TSYNC_ESRCH): %w", e)
	}
	return int(fd), nil
}

// notifRecv waits for the next notification. The kernel requires the
// buffer to be zeroed.
func notifRecv(listener int, n *notif) error {
	for {
		*n = notif{}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(n)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// notifSend answers a notification. It fails with ENOENT when the
// notification is gone (the task was killed or the call interrupted).
func notifSend(listener int, r *notifResp) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(r)))
	if e != 0 {
		return e
	}
	return nil
}

// notifIDValid reports whether the notification id is still pending, that
// is whether the task that made it is still waiting in that system call
// (so its pid has not been reused).
func notifIDValid(listener int, id uint64) bool {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

// errAddfdUnsupported means the kernel cannot install a descriptor and
// answer in one step (SECCOMP_ADDFD_FLAG_SEND, Linux 5.14).
var errAddfdUnsupported = errors.New("SECCOMP_ADDFD_FLAG_SEND unsupported")

// notifAddfdSend installs a copy of our descriptor src in the notifying
// task and answers the notification with its number, atomically: the
// system call returns the new descriptor. cloexec sets O_CLOEXEC on it.
func notifAddfdSend(listener int, id uint64, src int, cloexec bool) (int, error) {
	a := notifAddfd{ID: id, Flags: unix.SECCOMP_ADDFD_FLAG_SEND, Srcfd: uint32(src)}
	if cloexec {
		a.NewfdFlags = unix.O_CLOEXEC
	}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_ADDFD, uintptr(unsafe.Pointer(&a)))
	switch {
	case e == unix.EINVAL || e == unix.ENOTTY:
		return -1, errAddfdUnsupported
	case e != 0:
		return -1, e
	}
	return int(r), nil
}
