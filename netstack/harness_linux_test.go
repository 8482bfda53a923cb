package netstack

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/nsgate/nsgate/policy"
)

// The test harness: the gateway's fdbased link sits on one end of a
// SOCK_SEQPACKET socketpair, exactly as it would on a TUN fd (IP packets,
// no header); a second gVisor stack on the other end plays the worker.
// Raw packets can also be written to the worker's end, and a recorder on
// the worker's link keeps every packet the gateway sent. Upstream is a
// loopback server reached through a Dial hook that maps the worker's
// "internet" addresses to it and refuses everything else, so no packet
// leaves the machine.

// recorder wraps the worker's link and keeps a copy of every packet the
// gateway sends to the worker.
type recorder struct {
	nested.Endpoint
	mu   sync.Mutex
	pkts [][]byte
}

func (r *recorder) DeliverNetworkPacket(p tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	b := pkt.Data().AsRange().ToSlice()
	r.mu.Lock()
	r.pkts = append(r.pkts, b)
	r.mu.Unlock()
	r.Endpoint.DeliverNetworkPacket(p, pkt)
}

// wait returns the first recorded packet matching pred, or nil after d.
func (r *recorder) wait(d time.Duration, pred func([]byte) bool) []byte {
	deadline := time.Now().Add(d)
	for {
		r.mu.Lock()
		for _, b := range r.pkts {
			if pred(b) {
				r.mu.Unlock()
				return b
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type harness struct {
	g      *Gateway
	sink   *fakeSink
	dialer *dialer
	names  *fakeNames
	worker *stack.Stack
	rec    *recorder
	wfd    int // the worker's end of the socketpair, for raw packets
}

type harnessOpt func(*Config)

// newHarness builds the gateway and the worker. Options adjust the
// gateway's Config; Config.MTU, when set, is both links' MTU (default 1500).
func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{sink: &fakeSink{}, dialer: &dialer{}}
	pol := mustPolicy(t, testPolicy)
	cfg := Config{
		Policy: func() *policy.Policy { return pol },
		// The machine's own addresses would make the tests depend on
		// the machine: no host address unless a test gives some.
		HostAddrs: func() *policy.HostAddrs { return nil },
		Audit:     h.sink,
		Dial:      h.dialer.Dial,
		IPv6:      true,
		Limits:    Limits{DialTimeout: 3 * time.Second},
	}
	for _, o := range opts {
		o(&cfg)
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = 1500
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	for _, fd := range fds {
		growBuffers(fd)
	}
	h.wfd = fds[1]
	cfg.Link, err = fdbased.New(&fdbased.Options{FDs: []int{fds[0]}, MTU: mtu})
	if err != nil {
		t.Fatalf("fdbased: %v", err)
	}
	if n, ok := cfg.Names.(*fakeNames); ok {
		h.names = n
	}
	h.g, err = New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.worker, h.rec = newWorker(t, fds[1], mtu)
	t.Cleanup(func() {
		h.g.Close()
		h.worker.Destroy()
		unix.Close(fds[0])
		unix.Close(fds[1])
	})
	return h
}

// newWorker builds the worker's stack on fd: 10.0.2.100/24 and fd00::100/64
// with default routes, like the TUN nsgate configures.
func newWorker(t testing.TB, fd int, mtu uint32) (*stack.Stack, *recorder) {
	t.Helper()
	link, err := fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: mtu})
	if err != nil {
		t.Fatalf("worker fdbased: %v", err)
	}
	rec := &recorder{}
	rec.Endpoint.Init(link, rec)
	s := stack.New(stack.Options{
		NetworkProtocols: []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocolWithOptions(ipv6.Options{
			DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0},
		})},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	if err := s.CreateNIC(1, rec); err != nil {
		t.Fatalf("worker nic: %v", err)
	}
	for _, a := range []struct {
		p    tcpip.NetworkProtocolNumber
		addr string
		bits int
	}{{ipv4.ProtocolNumber, Guest4, 24}, {ipv6.ProtocolNumber, Guest6, 64}} {
		pa := tcpip.ProtocolAddress{Protocol: a.p, AddressWithPrefix: tcpip.AddressWithPrefix{
			Address: tcpip.AddrFromSlice(mustAddr(a.addr).AsSlice()), PrefixLen: a.bits}}
		if err := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); err != nil {
			t.Fatalf("worker address: %v", err)
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: 1},
		{Destination: header.IPv6EmptySubnet, NIC: 1},
	})
	return s, rec
}

func fullAddr(a netip.AddrPort) (tcpip.FullAddress, tcpip.NetworkProtocolNumber) {
	p := ipv4.ProtocolNumber
	if a.Addr().Is6() {
		p = ipv6.ProtocolNumber
	}
	return tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(a.Addr().AsSlice()), Port: a.Port()}, p
}

// dialTCP connects from the worker to dst.
func (h *harness) dialTCP(dst string) (*gonet.TCPConn, error) {
	fa, p := fullAddr(ap(dst))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return gonet.DialContextTCP(ctx, h.worker, fa, p)
}

// dialUDP opens a connected UDP socket from the worker to dst.
func (h *harness) dialUDP(t testing.TB, dst string) *gonet.UDPConn {
	t.Helper()
	fa, p := fullAddr(ap(dst))
	c, err := gonet.DialUDP(h.worker, nil, &fa, p)
	if err != nil {
		t.Fatalf("worker udp: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// inject writes a raw IP packet onto the link as the worker.
func (h *harness) inject(t testing.TB, pkt []byte) {
	t.Helper()
	if _, err := unix.Write(h.wfd, pkt); err != nil {
		t.Fatalf("inject: %v", err)
	}
}

// growBuffers enlarges a socketpair end's buffers: a full socket makes
// fdbased drop packets (as a TUN never does), and TCP then waits for
// retransmission timeouts. FORCE needs CAP_NET_ADMIN; without it the plain
// option (capped by net.core.wmem_max) is the best there is.
func growBuffers(fd int) {
	const size = 4 << 20
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
}
