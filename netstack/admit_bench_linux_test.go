package netstack

import (
	"io"
	"net/netip"
	"testing"
)

// BenchmarkTCPFlow is one short allowed TCP flow per iteration, from the
// worker's SYN to both sides closed: the admission path (decide, slots,
// dial, record), the handshake and the relay's start and end.
func BenchmarkTCPFlow(b *testing.B) {
	h := newHarness(b)
	h.dialer.route("tcp", "203.0.113.10:8080", tcpServer(b, "x"))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := h.dialTCP("203.0.113.10:8080")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkUDPDenied is one denied UDP flow per iteration (a new source
// port each time), delivered synchronously: what a worker flooding a
// denied destination costs the link's delivery goroutine.
func BenchmarkUDPDenied(b *testing.B) {
	_, ep := fuzzGateway(b)
	pkts := make([][]byte, 4096)
	for i := range pkts {
		src := netip.AddrPortFrom(mustAddr(Guest4), uint16(20000+i))
		pkts[i] = udpPacket(src, ap("198.51.100.1:9"), []byte("x"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		injectRaw(ep, pkts[i%len(pkts)])
		if i%64 == 0 {
			drain(ep)
		}
	}
}
