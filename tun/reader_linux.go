package tun

import (
	"github.com/nsgate/nsgate/internal/diag/hoptrace"

	"sync/atomic"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// reader is the state of an Endpoint's reader goroutine. Only that
// goroutine uses it (setAddr aside), so it needs no lock; one reader runs
// at a time (Attach waits for the previous one).
type reader struct {
	e *Endpoint
	// hdr receives the virtio-net header; the frame goes to head (its
	// first headSize bytes) and body (the rest); iov points at all three
	// (hdr only with virtio-net headers). The split keeps a packet's
	// headers in a small chunk of their own: gVisor copies a chunk it
	// must modify while another reference to it exists (IPv6 does that
	// for every packet), which costs 256 bytes here instead of 64 KiB.
	hdr  [vnetHdrLen]byte
	head *buffer.View
	body *buffer.View
	iov  [3]unix.Iovec
	niov int
	// scratch holds a UDP super-packet while it is split (made on first
	// use).
	scratch []byte
	// The result of the last read.
	n     int
	errno unix.Errno
	// readFn is r.read as a func value, made once so that reads do not
	// allocate a closure.
	readFn func(fd uintptr) bool
	// addr is the TAP's own MAC address, for the destination filter
	// (frames to another unicast address are dropped; empty: no filter).
	addr atomic.Pointer[tcpip.LinkAddress]
}

func (r *reader) init(e *Endpoint) {
	r.e = e
	r.readFn = r.read
	r.setAddr(e.addr)
	r.head = buffer.NewViewSize(headSize)
	r.body = buffer.NewViewSize(bodySize)
	r.setIovecs()
}

func (r *reader) setAddr(a tcpip.LinkAddress) { r.addr.Store(&a) }

// read does one read from the device (called by the RawConn; false means
// wait until the device is readable).
func (r *reader) read(fd uintptr) bool {
	for {
		n, errno := readv(fd, r.iov[:r.niov])
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.n, r.errno = n, errno
		if errno == 0 {
			hoptrace.Mark(hoptrace.TunRead)
		}
		return true
	}
}

// handle processes the packet the last read left in r.buf: checks its
// headers, splits a UDP super-packet, and delivers the result inline.
func (r *reader) handle() {
	e := r.e
	n := r.n
	e.stats.rxPackets.Add(1)
	var h vnetHdr
	if e.vnet {
		if n < vnetHdrLen {
			e.stats.rxDropped.Add(1)
			return
		}
		h.decode(r.hdr[:])
		n -= vnetHdrLen
	}
	e.stats.rxBytes.Add(uint64(n))
	ref := e.disp.Load()
	if ref == nil || n <= e.l2 {
		e.stats.rxDropped.Add(1)
		return
	}
	// The frame's first bytes (all of it, if short) are in head.
	first := r.head.AsSlice()[:min(n, headSize)]
	var proto tcpip.NetworkProtocolNumber
	if e.l2 > 0 {
		eth := header.Ethernet(first)
		dst := eth.DestinationAddress()
		if own := *r.addr.Load(); own != "" && dst != own && dst[0]&1 == 0 {
			e.stats.rxDropped.Add(1)
			return
		}
		proto = eth.Type()
	} else {
		// A TUN carries no protocol field (IFF_NO_PI): the IP version
		// says. Anything else goes up with protocol 0 for the stack (and
		// nsgate's filter) to count as malformed.
		switch first[0] >> 4 {
		case header.IPv4Version:
			proto = header.IPv4ProtocolNumber
		case header.IPv6Version:
			proto = header.IPv6ProtocolNumber
		}
	}
	if e.vnet && h.gsoType != vnetGSONone {
		split, err := checkGSO(&h, e.l2, n)
		if err != nil {
			e.stats.rxDropped.Add(1)
			return
		}
		if split {
			r.deliverSplit(ref.d, proto, r.frame(n), int(h.gsoSize))
			return
		}
		e.stats.rxSuper.Add(1)
	}
	r.deliver(ref.d, proto, r.take(n))
}

// take returns a Buffer holding the n-byte frame just read. The head
// chunk is handed over and replaced; the body part is handed over as well
// when it is large (no copy), and copied into a chunk of its own size
// otherwise, so that a small packet never pins 64 KiB.
func (r *reader) take(n int) buffer.Buffer {
	h := r.head
	h.CapLength(min(n, headSize))
	buf := buffer.MakeWithView(h)
	r.head = buffer.NewViewSize(headSize)
	if rest := n - headSize; rest > 0 {
		if rest < copyBelow {
			buf.Append(buffer.NewViewWithData(r.body.AsSlice()[:rest]))
		} else {
			b := r.body
			b.CapLength(rest)
			buf.Append(b)
			r.body = buffer.NewViewSize(bodySize)
		}
	}
	r.setIovecs()
	return buf
}

// frame returns the n-byte frame just read as one slice, copying it when
// it spans head and body (only for splitting UDP super-packets, which
// copies every datagram anyway).
func (r *reader) frame(n int) []byte {
	if n <= headSize {
		return r.head.AsSlice()[:n]
	}
	if r.scratch == nil {
		r.scratch = make([]byte, headSize+bodySize)
	}
	b := r.scratch[:n]
	copy(b, r.head.AsSlice())
	copy(b[headSize:], r.body.AsSlice()[:n-headSize])
	return b
}

// deliver hands one frame (owned by the call) to the dispatcher.
func (r *reader) deliver(d stack.NetworkDispatcher, proto tcpip.NetworkProtocolNumber, payload buffer.Buffer) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
	if r.e.l2 > 0 {
		pkt.LinkHeader().Consume(r.e.l2)
	}
	pkt.NetworkProtocolNumber = proto
	d.DeliverNetworkPacket(proto, pkt)
	pkt.DecRef()
}

// deliverSplit splits a UDP super-packet into its datagrams and delivers
// each. A packet that does not split cleanly is dropped whole.
func (r *reader) deliverSplit(d stack.NetworkDispatcher, proto tcpip.NetworkProtocolNumber, frame []byte, gsoSize int) {
	e := r.e
	ip := frame[e.l2:]
	plan, err := planUDPSplit(ip, gsoSize)
	if err != nil {
		e.stats.rxDropped.Add(1)
		return
	}
	for i := 0; i < plan.n; i++ {
		v := buffer.NewViewSize(e.l2 + plan.size(i))
		b := v.AsSlice()
		copy(b, frame[:e.l2])
		plan.segment(b[e.l2:], ip, i)
		e.stats.rxSplit.Add(1)
		r.deliver(d, proto, buffer.MakeWithView(v))
	}
}
