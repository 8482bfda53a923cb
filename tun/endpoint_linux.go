package tun

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Endpoint is nsgate's gVisor link endpoint on a TUN (or TAP) descriptor.
//
// One reader goroutine, started by Attach, reads a packet, hands it to the
// dispatcher and returns to the descriptor only when the stack is done with
// it. Nothing is queued in between: when the gateway cannot keep up, the
// packets wait in the kernel's queue for the device, and the kernel drops
// them there once that queue is full (its length is the device's
// txqueuelen). Memory therefore stays bounded whatever the worker sends.
//
// When the descriptor was opened with IFF_VNET_HDR (Open does that), the
// endpoint turns on the device's checksum and segmentation offloads: the
// worker's kernel then sends TCP in super-packets of up to 64 KiB with
// partial checksums, which the endpoint passes to gVisor whole (UDP
// super-packets are split into datagrams first), and gVisor's TCP hands
// the endpoint super-packets of its own, which the worker's kernel takes
// as they are. See docs/performance.md.
//
// Packets are read into pooled buffers: a 256-byte head for the headers
// and a 64 KiB body. A large packet keeps its buffers (no copy); a small
// body is copied into a buffer of its own size, so that the stack never
// holds 64 KiB for a 60-byte ACK.
//
// Outbound packets go through a bounded transmit queue to one writer
// goroutine, which writes each with writev(2): a write to a TUN runs the
// worker's receive path inside the system call, and the goroutine that
// produced the packet (often holding a TCP endpoint's lock) should not
// wait for that.
//
// The endpoint works on its own duplicate of the descriptor and sets
// O_NONBLOCK on the open file, which the caller's descriptor shares. The
// caller may close its descriptor once Wait has returned; the duplicate
// and the writer goroutine are released by Close, which the stack calls
// when it removes the NIC (an endpoint that never reaches a stack must be
// closed by whoever made it).
//
// All methods are safe for concurrent use. WritePackets may be called from
// any number of goroutines; it may wait for room in the transmit queue but
// never for the device (a packet the device cannot take right now is
// dropped, as a NIC would).
type Endpoint struct {
	// file is the duplicate descriptor; reads go through its RawConn, so
	// the reader waits in the runtime's poller rather than in a thread.
	file *os.File
	rc   syscall.RawConn
	// fd is file's descriptor number, used for writes under wmu.
	fd int

	l2     int  // link header length: 0 (TUN) or 14 (TAP)
	vnet   bool // every packet carries a virtio-net header
	gso    bool // the device sends and takes super-packets
	gsoMax uint32
	caps   stack.LinkEndpointCapabilities

	mtu atomic.Uint32

	// mu guards addr and the reader's lifecycle fields.
	mu        sync.Mutex
	addr      tcpip.LinkAddress
	running   bool          // a reader goroutine exists
	readerEnd chan struct{} // closed when that goroutine returns

	// disp is the attached dispatcher, nil when detached. The reader loads
	// it once per packet.
	disp atomic.Pointer[dispatcherRef]
	// stopping asks the reader to stop; set by Attach(nil) and Close.
	stopping atomic.Bool
	// readMu is held by the reader while it is inside a read from the
	// descriptor (never while delivering). Wait takes it to know that no
	// read is in progress.
	readMu sync.Mutex

	// txq is the transmit queue and its writer goroutine; nil when
	// writes are synchronous (endpointConfig.syncWrite).
	txq *txQueue
	// wmu guards closed against synchronous writers (the callers of
	// WritePackets when txq is nil): they hold it for reading while they
	// use fd; Close holds it for writing before closing file. The writer
	// goroutine needs no lock: Close waits for it to end first.
	wmu    sync.RWMutex
	closed bool

	// The reader's state, touched only by the reader goroutine.
	rd reader

	stats endpointCounters
}

// dispatcherRef boxes a dispatcher for atomic.Pointer.
type dispatcherRef struct{ d stack.NetworkDispatcher }

// EndpointStats are an Endpoint's counters.
type EndpointStats struct {
	// RxPackets and RxBytes count packets read from the device (a UDP
	// super-packet counts once; bytes exclude the virtio-net header); RxSplit counts the datagrams USO
	// super-packets were split into and RxSuper the TCP super-packets
	// passed up whole.
	RxPackets, RxBytes, RxSplit, RxSuper uint64
	// RxDropped counts packets read and dropped: malformed virtio headers
	// or super-packets, frames too short for their link header, frames
	// for another MAC address, and packets that arrived while no
	// dispatcher was attached. (A TUN packet that is neither IPv4 nor
	// IPv6 goes up with protocol 0, for the stack's filter to count.)
	RxDropped uint64
	// RxErrors counts failed reads that did not stop the reader (e.g. a
	// packet larger than the read buffer).
	RxErrors uint64
	// TxPackets and TxBytes count packets written; TxSuper the
	// super-packets among them. TxDropped counts packets the device did
	// not take (full, or the endpoint closed); TxErrors other failures.
	TxPackets, TxBytes, TxSuper, TxDropped, TxErrors uint64
}

type endpointCounters struct {
	rxPackets, rxBytes, rxSplit, rxSuper, rxDropped, rxErrors atomic.Uint64
	txPackets, txBytes, txSuper, txDropped, txErrors          atomic.Uint64
}

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
)

// endpointConfig is what newEndpoint builds an Endpoint from: the
// caller's EndpointOptions and what NewEndpoint found out about the device.
type endpointConfig struct {
	mtu      uint32
	ethernet bool
	mac      tcpip.LinkAddress
	// vnet says every packet on fd carries a virtio-net header; offload
	// says the device was told (TUNSETOFFLOAD) to send super-packets and
	// may be given them.
	vnet, offload bool
	// syncWrite makes WritePackets write in the caller's goroutine
	// instead of queueing for the writer goroutine.
	syncWrite bool
}

// gsoMaxSize is the largest super-packet the endpoint hands to the device:
// an IPv4 packet's total length must fit in 16 bits.
const gsoMaxSize = 65535

// Packets are read into a head chunk of headSize bytes followed by a body
// chunk of bodySize bytes: together they hold the largest frame a TUN or
// TAP device of MTU ≤ 65521 produces, TCP super-packets included (the
// kernel keeps those under 64 KiB).
const (
	headSize = 256
	bodySize = buffer.MaxChunkSize
)

// copyBelow is the body size under which a packet's body is copied out of
// the read buffer into a chunk of its own size rather than keeping it.
const copyBelow = bodySize / 2

// newEndpoint wraps fd (not taken over: it is duplicated).
func newEndpoint(fd int, o endpointConfig) (*Endpoint, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tun endpoint: dup: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("tun endpoint: set non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(dup), "tun")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tun endpoint: %w", err)
	}
	e := &Endpoint{
		file: f,
		rc:   rc,
		fd:   dup,
		vnet: o.vnet,
		gso:  o.vnet && o.offload,
		caps: stack.CapabilityRXChecksumOffload,
		addr: o.mac,
	}
	if o.ethernet {
		e.l2 = header.EthernetMinimumSize
		e.caps |= stack.CapabilityResolutionRequired
	}
	if e.gso {
		e.gsoMax = gsoMaxSize
	}
	e.mtu.Store(o.mtu)
	e.rd.init(e)
	if !o.syncWrite {
		e.txq = newTxQueue(e)
	}
	return e, nil
}

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() EndpointStats {
	c := &e.stats
	return EndpointStats{
		RxPackets: c.rxPackets.Load(), RxBytes: c.rxBytes.Load(),
		RxSplit: c.rxSplit.Load(), RxSuper: c.rxSuper.Load(),
		RxDropped: c.rxDropped.Load(), RxErrors: c.rxErrors.Load(),
		TxPackets: c.txPackets.Load(), TxBytes: c.txBytes.Load(),
		TxSuper: c.txSuper.Load(), TxDropped: c.txDropped.Load(), TxErrors: c.txErrors.Load(),
	}
}

// Dropped counts the packets the endpoint dropped in both directions
// (RxDropped + TxDropped).
func (e *Endpoint) Dropped() uint64 { return e.stats.rxDropped.Load() + e.stats.txDropped.Load() }

// Offloads reports whether the device sends and takes super-packets.
func (e *Endpoint) Offloads() bool { return e.gso }

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. It changes what the stack is told,
// not the device's MTU (which the worker's side configures).
func (e *Endpoint) SetMTU(mtu uint32) { e.mtu.Store(mtu) }

// MaxHeaderLength implements stack.LinkEndpoint.
func (e *Endpoint) MaxHeaderLength() uint16 { return uint16(e.l2) }

// LinkAddress implements stack.LinkEndpoint.
func (e *Endpoint) LinkAddress() tcpip.LinkAddress {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

// SetLinkAddress implements stack.LinkEndpoint.
func (e *Endpoint) SetLinkAddress(addr tcpip.LinkAddress) {
	e.mu.Lock()
	e.addr = addr
	e.mu.Unlock()
	e.rd.setAddr(addr)
}

// Capabilities implements stack.LinkEndpoint: the worker's kernel produced
// every packet, so its checksums need no second check (and with offloads
// on, TCP and UDP checksums arrive only partly filled in).
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities { return e.caps }

// GSOMaxSize implements stack.GSOEndpoint.
func (e *Endpoint) GSOMaxSize() uint32 { return e.gsoMax }

// SupportedGSO implements stack.GSOEndpoint: with offloads on, the
// device (the worker's kernel) takes TCP super-packets.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if e.gso {
		return stack.HostGSOSupported
	}
	return stack.GSONotSupported
}

// ARPHardwareType implements stack.LinkEndpoint.
func (e *Endpoint) ARPHardwareType() header.ARPHardwareType {
	if e.l2 > 0 {
		return header.ARPHardwareEther
	}
	return header.ARPHardwareNone
}

// AddHeader implements stack.LinkEndpoint: an Ethernet header on a TAP.
func (e *Endpoint) AddHeader(pkt *stack.PacketBuffer) {
	if e.l2 == 0 {
		return
	}
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	src := pkt.EgressRoute.LocalLinkAddress
	if src == "" {
		src = e.LinkAddress()
	}
	eth.Encode(&header.EthernetFields{
		SrcAddr: src,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

// ParseHeader implements stack.LinkEndpoint.
func (e *Endpoint) ParseHeader(pkt *stack.PacketBuffer) bool {
	if e.l2 == 0 {
		return true
	}
	b, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	if !ok {
		return false
	}
	pkt.NetworkProtocolNumber = header.Ethernet(b).Type()
	return true
}

// Attach implements stack.LinkEndpoint. A non-nil dispatcher starts the
// reader (once); nil detaches: the reader stops reading and drops what it
// may still be holding. Attach(nil) does not wait; Wait does.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.disp.Store(nil)
		e.stop()
		return
	}
	e.disp.Store(&dispatcherRef{d: d})
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.running && e.stopping.Load() {
		// Re-attached while a detached reader is still finishing: let
		// it go before a new one reads.
		end := e.readerEnd
		e.mu.Unlock()
		<-end
		e.mu.Lock()
	}
	if e.running {
		return
	}
	e.stopping.Store(false)
	e.file.SetReadDeadline(time.Time{})
	e.running = true
	end := make(chan struct{})
	e.readerEnd = end
	go func() {
		defer close(end)
		e.readLoop()
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()
}

// IsAttached implements stack.LinkEndpoint.
func (e *Endpoint) IsAttached() bool { return e.disp.Load() != nil }

// stop asks the reader to stop and wakes it if it waits for a packet.
func (e *Endpoint) stop() {
	e.stopping.Store(true)
	// A deadline in the past wakes a reader parked in the poller and makes
	// every later read fail at once, without closing the descriptor
	// (writes go on until Close).
	e.file.SetReadDeadline(time.Unix(1, 0))
}

// Wait implements stack.LinkEndpoint. Once the endpoint is detached
// (Attach(nil)) or closed, Wait returns when the reader has finished its
// last read from the descriptor, so the caller may close its descriptor.
// The reader may at that moment still be handing its last packet to the
// stack: Wait does not wait for that, because the stack calls Wait with
// its own lock held and a delivery can need that lock. Without a detach,
// Wait returns at once.
func (e *Endpoint) Wait() {
	if !e.stopping.Load() {
		return
	}
	e.readMu.Lock()
	//lint:ignore SA2001 the lock is the barrier: no read is in progress
	e.readMu.Unlock()
}

// Done returns a channel closed when the reader goroutine has returned
// (nil if it was never started). For tests and shutdown diagnostics.
func (e *Endpoint) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.readerEnd
}

// Close implements stack.LinkEndpoint: it detaches, stops the writer
// (dropping what is still queued), waits for writers to leave the
// descriptor and closes the endpoint's duplicate of it. Packets written
// afterwards are dropped. Close is idempotent.
func (e *Endpoint) Close() {
	e.disp.Store(nil)
	e.stop()
	if e.txq != nil {
		e.txq.close()
	}
	e.wmu.Lock()
	if e.closed {
		e.wmu.Unlock()
		return
	}
	e.closed = true
	e.wmu.Unlock()
	// Waits for a read in progress to return, then closes.
	e.file.Close()
}

// SetOnCloseAction implements stack.LinkEndpoint; there is nothing to
// destroy (the worker's namespace owns the device).
func (e *Endpoint) SetOnCloseAction(func()) {}

// readLoop is the reader goroutine.
func (e *Endpoint) readLoop() {
	for {
		e.readMu.Lock()
		if e.stopping.Load() {
			e.readMu.Unlock()
			return
		}
		err := e.rc.Read(e.rd.readFn)
		e.readMu.Unlock()
		if err != nil {
			// Deadline (stop) or closed file.
			return
		}
		if e.rd.errno != 0 {
			if fatalReadErr(e.rd.errno) {
				return
			}
			e.stats.rxErrors.Add(1)
			continue
		}
		e.rd.handle()
	}
}

// fatalReadErr reports whether a read error means the device is gone.
func fatalReadErr(errno unix.Errno) bool {
	switch errno {
	case unix.EBADF, unix.EBADFD, unix.EIO, unix.ENXIO, unix.ENODEV:
		return true
	}
	return false
}

// WritePackets implements stack.LinkEndpoint. Packets go to the transmit
// queue (waiting for room when it is full), whose writer goroutine writes
// each with one writev (a virtio-net header first when the device wants
// one); a packet the device has no room for is counted and dropped, as a
// NIC would drop it, and still reported written. With the queue off
// (synchronous writes) it stops at the first error other than a full
// device.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if e.txq != nil {
		if !e.txq.enqueue(pkts.AsSlice()) {
			return 0, &tcpip.ErrClosedForSend{}
		}
		return pkts.Len(), nil
	}
	e.wmu.RLock()
	defer e.wmu.RUnlock()
	if e.closed {
		e.stats.txDropped.Add(uint64(pkts.Len()))
		return 0, &tcpip.ErrClosedForSend{}
	}
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if errno := e.writeCounted(pkt); errno != 0 {
			return n, tcpip.TranslateErrno(errno)
		}
		n++
	}
	return n, nil
}

// vnetHeaderFor builds the virtio-net header for an outbound packet from
// its GSO options. It reports whether the packet is a super-packet.
func (e *Endpoint) vnetHeaderFor(pkt *stack.PacketBuffer, h *vnetHdr) bool {
	*h = vnetHdr{}
	g := &pkt.GSOOptions
	if !e.gso || g.Type == stack.GSONone {
		return false
	}
	h.hdrLen = uint16(pkt.HeaderSize())
	if g.NeedsCsum {
		h.flags = vnetFlagNeedsCsum
		h.csumStart = uint16(e.l2) + g.L3HdrLen
		h.csumOffset = g.CsumOffset
	}
	if g.MSS == 0 || pkt.Data().Size() <= int(g.MSS) {
		return false
	}
	switch g.Type {
	case stack.GSOTCPv4:
		h.gsoType = vnetGSOTCPv4
	case stack.GSOTCPv6:
		h.gsoType = vnetGSOTCPv6
	default:
		return false
	}
	h.gsoSize = g.MSS
	return true
}
