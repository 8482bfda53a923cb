//go:build linux

package tun

import (
	"unsafe"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// maxWriteIovs bounds the pieces of one written packet (the virtio-net
// header included); a packet in more pieces is flattened first.
const maxWriteIovs = 16

// setIovecs points the reader's iovecs at its header, head and body.
func (r *reader) setIovecs() {
	r.niov = 0
	if r.e.vnet {
		r.iov[0].Base = &r.hdr[0]
		r.iov[0].SetLen(vnetHdrLen)
		r.niov = 1
	}
	for _, v := range [2]*buffer.View{r.head, r.body} {
		b := v.AsSlice()
		r.iov[r.niov].Base = &b[0]
		r.iov[r.niov].SetLen(len(b))
		r.niov++
	}
}

// readv is one readv(2) into iov. The descriptor is non-blocking and the
// call only copies what is queued, so it is made without telling the
// scheduler (RawSyscall): a Syscall's entry wakes the runtime's sysmon
// thread whenever it slept because nsgate was idle, which is after most
// requests of a quiet flow (a futex wake and a thread on the other CPU,
// per request: docs/performance.md, session 12).
func readv(fd uintptr, iov []unix.Iovec) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	return int(n), errno
}

// rawWriteMax bounds a write made without telling the scheduler: a
// writev(2) to the TUN runs the worker's receive path, which for a small
// packet takes microseconds; a large one goes through Syscall, so that
// the runtime may hand nsgate's processor to another thread while the
// kernel copies.
const rawWriteMax = 4096

// writev is one writev(2) of iov (size bytes), retried on EINTR.
func writev(fd int, iov []unix.Iovec, size int) unix.Errno {
	call := unix.Syscall
	if size <= rawWriteMax {
		call = unix.RawSyscall
	}
	for {
		_, _, errno := call(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		if errno != unix.EINTR {
			return errno
		}
	}
}

// writePacket writes one packet (the caller holds e.wmu for reading). It
// returns the bytes written, whether it went as a super-packet, and the
// error number.
func (e *Endpoint) writePacket(pkt *stack.PacketBuffer) (int, bool, unix.Errno) {
	var iov [maxWriteIovs]unix.Iovec
	var hb [vnetHdrLen]byte
	k := 0
	super := false
	if e.vnet {
		var h vnetHdr
		super = e.vnetHeaderFor(pkt, &h)
		h.encode(hb[:])
		iov[0].Base = &hb[0]
		iov[0].SetLen(vnetHdrLen)
		k = 1
	}
	views, off := pkt.AsViewList()
	size := 0
	for v := views.Front(); v != nil; v = v.Next() {
		b := v.AsSlice()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		b = b[off:]
		off = 0
		if k == len(iov) {
			return e.writeFlat(pkt, iov[:1], super)
		}
		iov[k].Base = &b[0]
		iov[k].SetLen(len(b))
		k++
		size += len(b)
	}
	return size, super, writev(e.fd, iov[:k], size)
}

// writeFlat writes a packet in too many pieces for one writev by copying
// it into one buffer first. hdr is the virtio-net header's iovec, if any.
func (e *Endpoint) writeFlat(pkt *stack.PacketBuffer, hdr []unix.Iovec, super bool) (int, bool, unix.Errno) {
	v := pkt.ToView()
	defer v.Release()
	b := v.AsSlice()
	var iov [2]unix.Iovec
	k := 0
	if e.vnet {
		iov[0] = hdr[0]
		k = 1
	}
	iov[k].Base = &b[0]
	iov[k].SetLen(len(b))
	k++
	return len(b), super, writev(e.fd, iov[:k], len(b))
}
