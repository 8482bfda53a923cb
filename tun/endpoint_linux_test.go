package tun

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/tun/tundev"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// These tests drive the endpoint through a datagram socketpair: each
// datagram is one packet, as on a TUN device, and no privileges are
// needed. The real device (offloads, super-packets) is exercised by
// tundev_linux_test.go.

// socketpair returns our end (for the endpoint) and the peer's end.
func socketpair(t testing.TB) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// got is one delivered packet.
type got struct {
	proto tcpip.NetworkProtocolNumber
	data  []byte
}

// sink is a NetworkDispatcher that records what it gets. hold, when set,
// makes each delivery wait on it; delay slows each delivery.
type sink struct {
	ch    chan got
	hold  chan struct{}
	delay time.Duration
	n     atomic.Int64
	in    atomic.Int32 // deliveries in progress
}

func newSink(n int) *sink { return &sink{ch: make(chan got, n)} }

func (s *sink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	s.in.Add(1)
	defer s.in.Add(-1)
	s.n.Add(1)
	if s.hold != nil {
		<-s.hold
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.ch == nil {
		return
	}
	b := pkt.Data().AsRange().ToSlice()
	select {
	case s.ch <- got{proto, b}:
	default:
	}
}

func (s *sink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

func (s *sink) next(t *testing.T) got {
	t.Helper()
	select {
	case g := <-s.ch:
		return g
	case <-time.After(5 * time.Second):
		t.Fatal("no packet delivered")
		return got{}
	}
}

// ipv4Packet returns an IPv4/UDP packet of total size n (n ≥ 28).
func ipv4Packet(n int, seed byte) []byte {
	b := make([]byte, n)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(n),
		TTL:         64,
		Protocol:    uint8(header.UDPProtocolNumber),
		SrcAddr:     tcpip.AddrFrom4([4]byte{10, 0, 2, 100}),
		DstAddr:     tcpip.AddrFrom4([4]byte{203, 0, 113, 10}),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	header.UDP(b[20:]).Encode(&header.UDPFields{SrcPort: 1000, DstPort: 2000, Length: uint16(n - 20)})
	for i := 28; i < n; i++ {
		b[i] = seed + byte(i)
	}
	return b
}

func ipv6Packet(n int) []byte {
	b := make([]byte, n)
	header.IPv6(b).Encode(&header.IPv6Fields{
		PayloadLength:     uint16(n - header.IPv6MinimumSize),
		TransportProtocol: header.UDPProtocolNumber,
		HopLimit:          64,
		SrcAddr:           tcpip.AddrFrom16([16]byte{0xfd, 15: 0x64}),
		DstAddr:           tcpip.AddrFrom16([16]byte{0xfd, 15: 2}),
	})
	for i := header.IPv6MinimumSize; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}

func mustEndpoint(t testing.TB, fd int, o endpointConfig) *Endpoint {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = tundev.DefaultMTU
	}
	e, err := newEndpoint(fd, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func TestEndpointInbound(t *testing.T) {
	ours, peer := socketpair(t)
	e := mustEndpoint(t, ours, endpointConfig{})
	s := newSink(16)
	e.Attach(s)
	for _, tc := range []struct {
		name  string
		pkt   []byte
		proto tcpip.NetworkProtocolNumber
		why   string
	}{
		{"v4-small", ipv4Packet(40, 1), header.IPv4ProtocolNumber, "a packet that fits the head chunk"},
		{"v4-head-edge", ipv4Packet(headSize, 2), header.IPv4ProtocolNumber, "exactly the head chunk"},
		{"v4-head+1", ipv4Packet(headSize+1, 3), header.IPv4ProtocolNumber, "one byte in the body: copied"},
		{"v4-1500", ipv4Packet(1500, 4), header.IPv4ProtocolNumber, "a common MTU-sized packet"},
		{"v4-below-copy", ipv4Packet(headSize+copyBelow-1, 5), header.IPv4ProtocolNumber, "largest body that is copied"},
		{"v4-keep-body", ipv4Packet(headSize+copyBelow, 6), header.IPv4ProtocolNumber, "smallest body that is kept"},
		{"v4-max", ipv4Packet(65535, 7), header.IPv4ProtocolNumber, "the largest IPv4 packet"},
		{"v6", ipv6Packet(9000), header.IPv6ProtocolNumber, "IPv6 by its version nibble"},
		{"junk", []byte{0x00, 1, 2, 3}, 0, "not IP: goes up with protocol 0 for the filter to count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := unix.Write(peer, tc.pkt); err != nil {
				t.Fatal(err)
			}
			g := s.next(t)
			if g.proto != tc.proto || !bytes.Equal(g.data, tc.pkt) {
				t.Fatalf("delivered proto %d, %d bytes (equal %v); want proto %d, %d bytes (%s)",
					g.proto, len(g.data), bytes.Equal(g.data, tc.pkt), tc.proto, len(tc.pkt), tc.why)
			}
		})
	}
	if st := e.Stats(); st.RxPackets != 9 || st.RxDropped != 0 {
		t.Errorf("stats %+v: want 9 packets, none dropped", st)
	}
}

func TestEndpointOutbound(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) { testOutbound(t, sync) })
	}
}

func testOutbound(t *testing.T, sync bool) {
	ours, peer := socketpair(t)
	e := mustEndpoint(t, ours, endpointConfig{syncWrite: sync})
	e.Attach(newSink(1))
	for _, n := range []int{28, 1500, 65535} {
		want := ipv4Packet(n, byte(n))
		// Split the packet over several views, as gVisor builds them
		// (headers in front of the payload).
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
			ReserveHeaderBytes: 28,
			Payload:            buffer.MakeWithData(want[28:]),
		})
		copy(pkt.TransportHeader().Push(8), want[20:28])
		copy(pkt.NetworkHeader().Push(20), want[:20])
		var l stack.PacketBufferList
		l.PushBack(pkt)
		if k, err := e.WritePackets(l); k != 1 || err != nil {
			t.Fatalf("WritePackets = %d, %v", k, err)
		}
		pkt.DecRef()
		buf := make([]byte, 70000)
		r, err := unix.Read(peer, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:r], want) {
			t.Fatalf("peer read %d bytes, want the %d written", r, n)
		}
	}
	if st := waitTx(t, e, 3); st.TxPackets != 3 {
		t.Errorf("TxPackets = %d, want 3", st.TxPackets)
	}
}

func TestEndpointEthernet(t *testing.T) {
	ours, peer := socketpair(t)
	own := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02")
	e := mustEndpoint(t, ours, endpointConfig{ethernet: true, mac: own})
	if e.Capabilities()&stack.CapabilityResolutionRequired == 0 || e.MaxHeaderLength() != 14 {
		t.Fatalf("a TAP endpoint must ask for link resolution and a 14-byte header")
	}
	s := newSink(8)
	e.Attach(s)
	frame := func(dst tcpip.LinkAddress, typ tcpip.NetworkProtocolNumber, payload []byte) []byte {
		b := make([]byte, 14+len(payload))
		header.Ethernet(b).Encode(&header.EthernetFields{SrcAddr: "\x02\x00\x00\x00\x00\x64", DstAddr: dst, Type: typ})
		copy(b[14:], payload)
		return b
	}
	ip := ipv4Packet(100, 9)
	for _, tc := range []struct {
		name    string
		dst     tcpip.LinkAddress
		deliver bool
		why     string
	}{
		{"own", own, true, "frames for our MAC go up"},
		{"broadcast", header.EthernetBroadcastAddress, true, "broadcast (ARP requests) goes up"},
		{"multicast", "\x33\x33\x00\x00\x00\x01", true, "multicast (IPv6 ND) goes up"},
		{"other", "\x02\x00\x00\x00\x00\x99", false, "another host's unicast is dropped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.Stats().RxDropped
			unix.Write(peer, frame(tc.dst, header.IPv4ProtocolNumber, ip))
			if !tc.deliver {
				time.Sleep(50 * time.Millisecond)
				if e.Stats().RxDropped != before+1 {
					t.Fatalf("frame not dropped (%s)", tc.why)
				}
				return
			}
			g := s.next(t)
			if g.proto != header.IPv4ProtocolNumber || !bytes.Equal(g.data, ip) {
				t.Fatalf("got proto %d, %d bytes; want the IPv4 packet without its Ethernet header (%s)", g.proto, len(g.data), tc.why)
			}
		})
	}
}

// TestEndpointVnet drives the virtio-net header path over the socketpair
// (the header travels in-band, as it does on an IFF_VNET_HDR device).
func TestEndpointVnet(t *testing.T) {
	ours, peer := socketpair(t)
	e := mustEndpoint(t, ours, endpointConfig{vnet: true, offload: true})
	if e.SupportedGSO() != stack.HostGSOSupported || e.GSOMaxSize() != gsoMaxSize {
		t.Fatalf("offloads on: want host GSO up to %d", gsoMaxSize)
	}
	s := newSink(16)
	e.Attach(s)
	send := func(h vnetHdr, pkt []byte) {
		var hb [vnetHdrLen]byte
		h.encode(hb[:])
		if _, err := unix.Write(peer, append(hb[:], pkt...)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("plain", func(t *testing.T) {
		p := ipv4Packet(1000, 1)
		send(vnetHdr{}, p)
		if g := s.next(t); !bytes.Equal(g.data, p) {
			t.Fatal("a packet with an empty header must arrive unchanged")
		}
	})
	t.Run("tcp-super", func(t *testing.T) {
		p := ipv4Packet(60000, 2)
		p[9] = uint8(header.TCPProtocolNumber)
		send(vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOTCPv4, gsoSize: 1448, csumStart: 20, csumOffset: 16}, p)
		if g := s.next(t); !bytes.Equal(g.data, p) {
			t.Fatal("a TCP super-packet must go up whole")
		}
		if e.Stats().RxSuper != 1 {
			t.Fatal("RxSuper not counted")
		}
	})
	t.Run("udp-super", func(t *testing.T) {
		p := udpSuper(false, 3000)
		send(vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOUDPL4, gsoSize: 1200, csumStart: 20, csumOffset: 6}, p)
		var total int
		for i := 0; i < 3; i++ {
			g := s.next(t)
			total += len(checkDatagram(t, g.data, false))
		}
		if total != 3000 || e.Stats().RxSplit != 3 {
			t.Fatalf("split into %d payload bytes, %d datagrams; want 3000 in 3", total, e.Stats().RxSplit)
		}
	})
	t.Run("bad-gso", func(t *testing.T) {
		before := e.Stats().RxDropped
		send(vnetHdr{gsoType: vnetGSOUDP, gsoSize: 100}, ipv4Packet(500, 3))
		send(vnetHdr{}, ipv4Packet(60, 4)) // a marker after it
		g := s.next(t)
		if len(g.data) != 60 || e.Stats().RxDropped != before+1 {
			t.Fatal("a UFO packet must be dropped, and the next one delivered")
		}
	})
	t.Run("short", func(t *testing.T) {
		before := e.Stats().RxDropped
		unix.Write(peer, []byte{1, 2, 3})
		send(vnetHdr{}, ipv4Packet(61, 4))
		g := s.next(t)
		if len(g.data) != 61 || e.Stats().RxDropped != before+1 {
			t.Fatal("a read shorter than the virtio-net header must be dropped")
		}
	})

	t.Run("write", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			gso  stack.GSO
			size int
			want vnetHdr
			why  string
		}{
			{"none", stack.GSO{}, 500, vnetHdr{}, "no GSO options: an all-zero header"},
			{"csum-only", stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, CsumOffset: 16, MSS: 1448, L3HdrLen: 20}, 1000,
				vnetHdr{flags: vnetFlagNeedsCsum, hdrLen: 40, csumStart: 20, csumOffset: 16},
				"no bigger than the MSS: checksum offload only"},
			{"tso4", stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, CsumOffset: 16, MSS: 1448, L3HdrLen: 20}, 30000,
				vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: 40, gsoSize: 1448, csumStart: 20, csumOffset: 16},
				"a TCPv4 super-packet for the kernel to take as is"},
			{"tso6", stack.GSO{Type: stack.GSOTCPv6, NeedsCsum: true, CsumOffset: 16, MSS: 1428, L3HdrLen: 40}, 30000,
				vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOTCPv6, hdrLen: 40, gsoSize: 1428, csumStart: 40, csumOffset: 16},
				"a TCPv6 super-packet"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				payload := make([]byte, tc.size)
				pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 40, Payload: buffer.MakeWithData(payload)})
				pkt.TransportHeader().Push(20)
				pkt.NetworkHeader().Push(20)
				pkt.GSOOptions = tc.gso
				var l stack.PacketBufferList
				l.PushBack(pkt)
				if _, err := e.WritePackets(l); err != nil {
					t.Fatal(err)
				}
				pkt.DecRef()
				buf := make([]byte, 70000)
				n, err := unix.Read(peer, buf)
				if err != nil {
					t.Fatal(err)
				}
				var h vnetHdr
				h.decode(buf)
				if h != tc.want || n != vnetHdrLen+40+tc.size {
					t.Fatalf("header %+v (%d bytes); want %+v (%d bytes) (%s)", h, n, tc.want, vnetHdrLen+40+tc.size, tc.why)
				}
			})
		}
	})
}

func TestEndpointCloseWhileReading(t *testing.T) {
	ours, _ := socketpair(t)
	e, err := newEndpoint(ours, endpointConfig{mtu: 1500})
	if err != nil {
		t.Fatal(err)
	}
	e.Attach(newSink(1))
	time.Sleep(20 * time.Millisecond) // the reader is parked in the poller
	done := e.Done()
	start := time.Now()
	e.Close()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("reader still running 2s after Close")
	}
	e.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	// Writes after Close are refused, not sent to a closed descriptor.
	var l stack.PacketBufferList
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ipv4Packet(40, 0))})
	l.PushBack(pkt)
	if _, err := e.WritePackets(l); err == nil {
		t.Error("WritePackets after Close succeeded")
	}
	pkt.DecRef()
	e.Close() // idempotent
}

// TestEndpointDetachDoesNotWaitForDelivery: the stack calls Attach(nil)
// and Wait with its own lock held, and a delivery may need that lock; so
// Wait must return while a delivery is still in progress, and the reader
// must not read again.
func TestEndpointDetachDoesNotWaitForDelivery(t *testing.T) {
	ours, peer := socketpair(t)
	e := mustEndpoint(t, ours, endpointConfig{})
	s := newSink(4)
	s.hold = make(chan struct{})
	e.Attach(s)
	unix.Write(peer, ipv4Packet(40, 1))
	for s.in.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	e.Attach(nil)
	waited := make(chan struct{})
	go func() { e.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(2 * time.Second):
		t.Fatal("Wait blocked on a delivery in progress")
	}
	if e.IsAttached() {
		t.Error("still attached after Attach(nil)")
	}
	unix.Write(peer, ipv4Packet(41, 2))
	close(s.hold)
	select {
	case <-e.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("reader did not stop after its delivery")
	}
	if n := s.n.Load(); n != 1 {
		t.Fatalf("%d deliveries; the detached reader must not read again", n)
	}

	// Attaching again starts a new reader, which picks up the packet
	// that waited in the socket.
	s2 := newSink(4)
	e.Attach(s2)
	if g := s2.next(t); len(g.data) != 41 {
		t.Fatalf("re-attached reader got %d bytes, want the 41-byte packet", len(g.data))
	}
}

// waitTx waits until n packets have been written or dropped.
func waitTx(t *testing.T, e *Endpoint, n uint64) EndpointStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Stats()
		if st.TxPackets+st.TxDropped+st.TxErrors >= n || time.Now().After(deadline) {
			return st
		}
		time.Sleep(time.Millisecond)
	}
}

func TestEndpointWriteDropsWhenFull(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) { testWriteDrops(t, sync) })
	}
}

func testWriteDrops(t *testing.T, sync bool) {
	ours, _ := socketpair(t) // the peer never reads
	unix.SetsockoptInt(ours, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	e := mustEndpoint(t, ours, endpointConfig{syncWrite: sync})
	e.Attach(newSink(1))
	for i := 0; i < 200; i++ {
		var l stack.PacketBufferList
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ipv4Packet(1400, 0))})
		l.PushBack(pkt)
		n, err := e.WritePackets(l)
		pkt.DecRef()
		if n != 1 || err != nil {
			t.Fatalf("write %d: %d, %v; a full device must drop, not fail or block", i, n, err)
		}
	}
	st := waitTx(t, e, 200)
	if st.TxDropped == 0 {
		t.Fatalf("stats %+v: want drops once the peer's queue is full", st)
	}
}

// TestTxQueueBackpressure: a producer that finds the transmit queue full
// (by packets or by bytes) waits until the writer takes the queue, and
// nothing is dropped; Close releases a waiting producer.
func TestTxQueueBackpressure(t *testing.T) {
	e := &Endpoint{}
	q := &txQueue{e: e, wake: make(chan struct{}, 1), done: make(chan struct{})} // no writer yet
	q.room.L = &q.mu
	mk := func(n, size int) []*stack.PacketBuffer {
		ps := make([]*stack.PacketBuffer, n)
		for i := range ps {
			ps[i] = stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, size))})
		}
		return ps
	}
	for _, tc := range []struct {
		name   string
		pkts   []*stack.PacketBuffer
		queued int
		why    string
	}{
		{"count", mk(txQueueLen+100, 100), txQueueLen, "the packet bound"},
		{"bytes", mk(100, 65000), txQueueBytes / 65000, "the byte bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret := make(chan bool, 1)
			go func() { ret <- q.enqueue(tc.pkts) }()
			deadline := time.Now().Add(5 * time.Second)
			for {
				q.mu.Lock()
				n := len(q.q)
				q.mu.Unlock()
				if n == tc.queued || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			select {
			case <-ret:
				t.Fatalf("enqueue returned with a full queue; want it to wait (%s)", tc.why)
			case <-time.After(50 * time.Millisecond):
			}
			q.mu.Lock()
			if len(q.q) != tc.queued {
				t.Fatalf("queued %d, want %d before waiting (%s)", len(q.q), tc.queued, tc.why)
			}
			// Play the writer: take the queue, make room.
			for _, p := range q.q {
				p.DecRef()
			}
			q.q, q.bytes = nil, 0
			q.room.Broadcast()
			q.mu.Unlock()
			if ok := <-ret; !ok {
				t.Fatal("enqueue reported a closed queue")
			}
			q.mu.Lock()
			for _, p := range q.q {
				p.DecRef()
			}
			q.q, q.bytes = nil, 0
			q.mu.Unlock()
			if d := e.stats.txDropped.Load(); d != 0 {
				t.Fatalf("%d packets dropped; the queue must wait, not drop", d)
			}
			for _, p := range tc.pkts {
				p.DecRef()
			}
		})
	}

	t.Run("close", func(t *testing.T) {
		pkts := mk(txQueueLen+1, 10)
		ret := make(chan bool, 1)
		go func() { ret <- q.enqueue(pkts) }()
		for {
			q.mu.Lock()
			n := len(q.q)
			q.mu.Unlock()
			if n == txQueueLen {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(q.done) // no writer goroutine to wait for
		q.mu.Lock()
		q.closed = true
		q.room.Broadcast()
		q.mu.Unlock()
		select {
		case ok := <-ret:
			if ok {
				t.Fatal("enqueue into a closed queue reported success")
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a waiting producer was not released by close")
		}
		if d := e.stats.txDropped.Load(); d != 1 {
			t.Fatalf("dropped %d, want the 1 packet that found the queue closed", d)
		}
		for _, p := range q.q {
			p.DecRef()
		}
		for _, p := range pkts {
			p.DecRef()
		}
	})
}

// TestEndpointBoundedUnderFlood: when deliveries are slower than the
// sender, packets must wait (and be dropped) outside the process, and the
// endpoint's memory must not grow with what was sent.
func TestEndpointBoundedUnderFlood(t *testing.T) {
	ours, peer := socketpair(t)
	unix.SetsockoptInt(ours, unix.SOL_SOCKET, unix.SO_RCVBUF, 256<<10)
	e := mustEndpoint(t, ours, endpointConfig{})
	s := &sink{delay: 200 * time.Microsecond}
	e.Attach(s)

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	unix.SetNonblock(peer, true)
	pkt := ipv4Packet(1400, 0)
	var sent, refused int
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if _, err := unix.Write(peer, pkt); err != nil {
			refused++
			runtime.Gosched()
			continue
		}
		sent++
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	delivered := s.n.Load()
	t.Logf("sent %d, refused by the full queue %d, delivered %d; heap in use %d -> %d KiB",
		sent, refused, delivered, before.HeapInuse>>10, after.HeapInuse>>10)
	if refused == 0 {
		t.Errorf("the sender never saw a full queue: the endpoint is buffering")
	}
	if delivered > int64(sent) {
		t.Errorf("delivered %d > sent %d", delivered, sent)
	}
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 8<<20 {
		t.Errorf("heap grew by %d KiB during the flood; want bounded", grow>>10)
	}
}

func TestEndpointMTUAndAddress(t *testing.T) {
	ours, _ := socketpair(t)
	e := mustEndpoint(t, ours, endpointConfig{mtu: 1500, ethernet: true})
	e.SetMTU(9000)
	if e.MTU() != 9000 {
		t.Errorf("MTU = %d after SetMTU(9000)", e.MTU())
	}
	e.SetLinkAddress("\x02\x00\x00\x00\x00\x07")
	if e.LinkAddress() != "\x02\x00\x00\x00\x00\x07" {
		t.Errorf("LinkAddress = %q", e.LinkAddress())
	}
	if e.ARPHardwareType() != header.ARPHardwareEther {
		t.Errorf("a TAP is Ethernet")
	}
	if e.SupportedGSO() != stack.GSONotSupported {
		t.Errorf("no virtio-net header: no GSO")
	}
}

// TestNewEndpointOnSocket: NewEndpoint accepts a descriptor that is not a
// TUN (no virtio-net header, no offloads).
func TestNewEndpointOnSocket(t *testing.T) {
	ours, _ := socketpair(t)
	ep, err := NewEndpoint(ours, EndpointOptions{MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	e := ep.(*Endpoint)
	if e.vnet || e.Offloads() {
		t.Fatal("a socket has no virtio-net header")
	}
}

func TestEnableOffloadsErrors(t *testing.T) {
	if _, err := enableOffloads(-1, "bogus"); err == nil || !strings.Contains(err.Error(), "NSGATE_TUN_OFFLOAD") {
		t.Fatalf("an unknown mode: got %v, want an error naming NSGATE_TUN_OFFLOAD", err)
	}
	if _, err := enableOffloads(-1, ""); !errors.Is(err, unix.EBADF) {
		t.Fatalf("an invalid descriptor: got %v, want EBADF", err)
	}
}

// BenchmarkReadDeliver measures the inbound path (read, buffer handling,
// delivery) for packets of a few sizes, through a socketpair.
func BenchmarkReadDeliver(b *testing.B) {
	for _, size := range []int{64, 1500, 16 << 10, 65000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ours, peer := socketpair(b)
			e := mustEndpoint(b, ours, endpointConfig{})
			var n atomic.Int64
			done := make(chan struct{})
			target := int64(b.N)
			e.Attach(dispatchFunc(func() {
				if n.Add(1) == target {
					close(done)
				}
			}))
			pkt := ipv4Packet(size, 0)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					for {
						if _, err := unix.Write(peer, pkt); err == nil {
							break
						}
					}
				}
			}()
			<-done
		})
	}
}

// BenchmarkWritePackets measures the outbound path with a reader draining
// the peer.
func BenchmarkWritePackets(b *testing.B) {
	for _, size := range []int{64, 1500, 65000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ours, peer := socketpair(b)
			e := mustEndpoint(b, ours, endpointConfig{})
			var wg sync.WaitGroup
			wg.Add(1)
			stop := make(chan struct{})
			go func() {
				defer wg.Done()
				buf := make([]byte, 70000)
				unix.SetsockoptTimeval(peer, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
				for {
					select {
					case <-stop:
						return
					default:
					}
					unix.Read(peer, buf)
				}
			}()
			payload := make([]byte, size-28)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 28, Payload: buffer.MakeWithData(payload)})
				pkt.TransportHeader().Push(8)
				pkt.NetworkHeader().Push(20)
				var l stack.PacketBufferList
				l.PushBack(pkt)
				e.WritePackets(l)
				pkt.DecRef()
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
		})
	}
}

// dispatchFunc is a NetworkDispatcher calling f per packet.
type dispatchFunc func()

func (f dispatchFunc) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) { f() }
func (f dispatchFunc) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer)    {}

// TestTxQueueInlineWhenIdle: on an idle link a small packet is written by
// its producer before WritePackets returns (no hand-off to the writer);
// while a write is in progress it is queued behind it instead, so the
// order on the device stays the order of the writes.
func TestTxQueueInlineWhenIdle(t *testing.T) {
	ours, peer := socketpair(t)
	e := mustEndpoint(t, ours, endpointConfig{})
	e.Attach(newSink(1))
	if e.txq == nil {
		t.Fatal("no transmit queue")
	}
	write := func(seed byte) {
		t.Helper()
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ipv4Packet(100, seed))})
		var l stack.PacketBufferList
		l.PushBack(pkt)
		if k, err := e.WritePackets(l); k != 1 || err != nil {
			t.Fatalf("WritePackets = %d, %v", k, err)
		}
		pkt.DecRef()
	}
	read := func(seed byte) {
		t.Helper()
		buf := make([]byte, 2000)
		r, err := unix.Read(peer, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:r], ipv4Packet(100, seed)) {
			t.Fatalf("peer read a packet other than %d (out of order?)", seed)
		}
	}
	write(1)
	if st := e.Stats(); st.TxPackets != 1 {
		t.Fatalf("TxPackets = %d right after an idle write, want 1 (written inline)", st.TxPackets)
	}
	read(1)

	// A write in progress (as the writer goroutine marks it): the next
	// small packet must wait in the queue.
	q := e.txq
	q.mu.Lock()
	q.busy = true
	q.mu.Unlock()
	write(2)
	q.mu.Lock()
	queued := len(q.q)
	q.mu.Unlock()
	if queued != 1 || e.Stats().TxPackets != 1 {
		t.Fatalf("queued %d, TxPackets %d while busy; want the packet queued, not written", queued, e.Stats().TxPackets)
	}
	q.mu.Lock()
	q.busy = false
	q.room.Broadcast()
	q.mu.Unlock()
	q.kick()
	read(2)
	write(3)
	read(3)
	if st := waitTx(t, e, 3); st.TxPackets != 3 {
		t.Errorf("TxPackets = %d, want 3", st.TxPackets)
	}
}

// TestBareACK: the writer yields only before bare ACKs: a SYN-ACK, a FIN,
// a reset, a segment with data or a UDP datagram is written at once.
func TestBareACK(t *testing.T) {
	mk := func(proto tcpip.TransportProtocolNumber, flags header.TCPFlags, data int) *stack.PacketBuffer {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 60, Payload: buffer.MakeWithData(make([]byte, data))})
		pkt.TransportProtocolNumber = proto
		if proto == header.TCPProtocolNumber {
			th := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize))
			th.Encode(&header.TCPFields{DataOffset: header.TCPMinimumSize, Flags: flags})
		} else {
			pkt.TransportHeader().Push(header.UDPMinimumSize)
		}
		pkt.NetworkHeader().Push(header.IPv4MinimumSize)
		return pkt
	}
	for _, tc := range []struct {
		name  string
		pkt   *stack.PacketBuffer
		plain bool
	}{
		{"ack", mk(header.TCPProtocolNumber, header.TCPFlagAck, 0), true},
		{"ack-psh", mk(header.TCPProtocolNumber, header.TCPFlagAck|header.TCPFlagPsh, 0), true},
		{"syn-ack", mk(header.TCPProtocolNumber, header.TCPFlagSyn|header.TCPFlagAck, 0), false},
		{"fin-ack", mk(header.TCPProtocolNumber, header.TCPFlagFin|header.TCPFlagAck, 0), false},
		{"rst", mk(header.TCPProtocolNumber, header.TCPFlagRst|header.TCPFlagAck, 0), false},
		{"data", mk(header.TCPProtocolNumber, header.TCPFlagAck|header.TCPFlagPsh, 100), false},
		{"udp", mk(header.UDPProtocolNumber, 0, 0), false},
	} {
		if got := bareACK(tc.pkt); got != tc.plain {
			t.Errorf("%s: bareACK %v, want %v", tc.name, got, tc.plain)
		}
		tc.pkt.DecRef()
	}
}
