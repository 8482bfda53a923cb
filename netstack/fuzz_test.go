package netstack

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// inboundSeeds are well-formed packets of every kind the filter sorts, so
// the fuzzer starts from each branch.
func inboundSeeds() [][]byte {
	g4, g6 := mustAddr(Guest4), mustAddr(Guest6)
	syn6 := tcpSyn(ap("[fd00::100]:40000"), ap("[2001:db8::10]:8080"))
	seeds := [][]byte{
		tcpSyn(ap("10.0.2.100:40000"), ap("203.0.113.10:8080")),
		tcpSyn(ap("10.0.2.100:40000"), ap("198.51.100.1:80")),
		syn6,
		tcpSyn(ap("[fd00::100]:40001"), ap("[::ffff:169.254.169.254]:80")),
		udpPacket(ap("10.0.2.100:5000"), ap("203.0.113.10:7"), []byte("hello")),
		udpPacket(ap("10.0.2.100:5000"), ap("10.0.2.3:53"), []byte("query")),
		udpPacket(ap("[fd00::100]:5000"), ap("[fd00::3]:53"), []byte("query")),
		udpPacket(ap("[fd00::100]:5000"), ap("[::ffff:203.0.113.10]:7"), []byte("x")),
		icmpEcho(g4, mustAddr(Gateway4), 1, 1),
		icmpEcho(g4, mustAddr("203.0.113.10"), 1, 1),
		icmpEcho(g6, mustAddr(Gateway6), 1, 1),
		rawProto(g4, mustAddr("203.0.113.10"), 253),
		rawProto(g6, mustAddr("2001:db8::1"), 47),
		ip6(g6, mustAddr("2001:db8::10"), protoHopByHop, append([]byte{protoTCP, 0, 1, 4, 0, 0, 0, 0}, syn6[40:]...)),
		ip6(g6, mustAddr("2001:db8::10"), protoFragment, append([]byte{protoUDP, 0, 0, 1, 0, 0, 0, 9}, make([]byte, 16)...)),
		withFix(ip4(g4, mustAddr("203.0.113.10"), protoUDP, make([]byte, 24)), func(b []byte) {
			binary.BigEndian.PutUint16(b[6:], 0x2000) // first fragment, more to come
		}, false),
		ip6(mustAddr("fe80::1"), mustAddr("ff02::2"), protoICMPv6, []byte{133, 0, 0, 0, 0, 0, 0, 0}),
	}
	return seeds
}

// fuzzGateway is a gateway on a channel endpoint: the fuzzer injects
// packets directly, and whatever the gateway sends is drained.
func fuzzGateway(tb testing.TB) (*Gateway, *channel.Endpoint) {
	tb.Helper()
	ep := channel.New(1024, 1500, "")
	pol := mustPolicy(tb, testPolicy)
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.5"): "app.test"},
		answers: map[string][]netip.Addr{"app.test": {mustAddr("203.0.113.10")}},
	}
	g, err := New(Config{
		Link:   ep,
		Policy: func() *policy.Policy { return pol },
		Audit:  &countSink{},
		Names:  names,
		// Nothing is ever dialed: every allowed flow fails to dial.
		Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Err: errRefused}
		},
		IPv6:   true,
		Limits: Limits{DialTimeout: time.Second, UDPIdle: time.Second},
	})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { g.Close() })
	return g, ep
}

// countSink counts events without keeping them (the fuzzer makes
// millions).
type countSink struct{ n atomic.Uint64 }

func (s *countSink) Log(audit.Event) uint64 { return s.n.Add(1) }

type refusedError struct{}

func (refusedError) Error() string { return "connection refused (fuzz)" }

var errRefused = refusedError{}

func injectRaw(ep *channel.Endpoint, b []byte) {
	proto := tcpip.NetworkProtocolNumber(0)
	if len(b) > 0 {
		switch b[0] >> 4 {
		case 4:
			proto = header.IPv4ProtocolNumber
		case 6:
			proto = header.IPv6ProtocolNumber
		}
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	ep.InjectInbound(proto, pkt)
	pkt.DecRef()
}

func drain(ep *channel.Endpoint) int {
	n := 0
	for {
		pkt := ep.Read()
		if pkt == nil {
			return n
		}
		pkt.DecRef()
		n++
	}
}

// FuzzInbound feeds arbitrary bytes to the gateway as packets from the
// worker: through the filter and, for what it passes, into gVisor and the
// flow handlers. Nothing may panic.
func FuzzInbound(f *testing.F) {
	for _, s := range inboundSeeds() {
		f.Add(s)
	}
	g, ep := fuzzGateway(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		injectRaw(ep, b)
		drain(ep)
		_ = g.Stats()
	})
}

// TestGatewaySurvivesGarbage checks that after every seed and a run of
// truncated and bit-flipped copies, the gateway still answers a ping.
func TestGatewaySurvivesGarbage(t *testing.T) {
	g, ep := fuzzGateway(t)
	for _, s := range inboundSeeds() {
		for n := 0; n <= len(s); n++ {
			injectRaw(ep, s[:n])
		}
		for i := range s {
			b := append([]byte(nil), s...)
			b[i] ^= 0xa5
			injectRaw(ep, b)
		}
		drain(ep)
	}
	injectRaw(ep, icmpEcho(mustAddr(Guest4), mustAddr(Gateway4), 9, 9))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if pkt := ep.Read(); pkt != nil {
			b := pkt.ToView().AsSlice()
			pkt.DecRef()
			if typ, _, ok := icmpInfo(b); ok && typ == 0 {
				if st := g.Stats(); st.Malformed == 0 {
					t.Fatalf("stats %+v: no malformed packet counted", st)
				}
				return
			}
			continue
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no echo reply after garbage")
}

// FuzzInspect checks the filter's own invariants on arbitrary input: a
// packet it passes has a sane header for its version.
func FuzzInspect(f *testing.F) {
	for _, s := range inboundSeeds() {
		f.Add(s, true, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, ipv6, l2 bool) {
		in := newInspector(Network{}, ipv6, l2)
		v := in.inspect(bytesData(b))
		if v.act != actPass {
			return
		}
		switch b[0] >> 4 {
		case 4:
			if len(b) < 20 || int(b[0]&0xf)*4 < 20 || int(binary.BigEndian.Uint16(b[2:4])) > len(b) {
				t.Fatalf("passed a bad IPv4 packet % x", b)
			}
		case 6:
			if !ipv6 || len(b) < 40 || 40+int(binary.BigEndian.Uint16(b[4:6])) > len(b) {
				t.Fatalf("passed a bad IPv6 packet % x", b)
			}
		default:
			t.Fatalf("passed a non-IP packet % x", b)
		}
	})
}

func BenchmarkInspect(b *testing.B) {
	in := newInspector(Network{}, true, false)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		Payload: buffer.MakeWithData(tcpSyn(ap("10.0.2.100:40000"), ap("203.0.113.10:8080"))),
	})
	defer pkt.DecRef()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if v := in.inspect(pkt.Data()); v.act != actPass {
			b.Fatal(v.reason)
		}
	}
}
