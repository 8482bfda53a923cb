package tun

import (
	"bytes"
	"errors"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func TestVnetHdrRoundTrip(t *testing.T) {
	h := vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOTCPv6, hdrLen: 74, gsoSize: 1440, csumStart: 54, csumOffset: 16}
	var b [vnetHdrLen]byte
	h.encode(b[:])
	// Little-endian on the wire, whatever the host.
	want := []byte{1, 4, 74, 0, 0xa0, 0x05, 54, 0, 16, 0}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("encode = % x, want % x", b, want)
	}
	var g vnetHdr
	g.decode(b[:])
	if g != h {
		t.Fatalf("decode = %+v, want %+v", g, h)
	}
}

func TestCheckGSO(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     vnetHdr
		split bool
		bad   bool
		why   string
	}{
		{"none", vnetHdr{}, false, false, "an ordinary packet goes up as it is"},
		{"tcp4", vnetHdr{gsoType: vnetGSOTCPv4, gsoSize: 1448}, false, false, "TCP super-packets go up whole: gVisor takes large segments"},
		{"tcp6-ecn", vnetHdr{gsoType: vnetGSOTCPv6 | vnetGSOECNBit, gsoSize: 1428}, false, false, "the ECN bit does not change the handling"},
		{"tcp-size0", vnetHdr{gsoType: vnetGSOTCPv4}, false, true, "a super-packet without a segment size is malformed"},
		{"uso", vnetHdr{gsoType: vnetGSOUDPL4, gsoSize: 1200}, true, false, "UDP super-packets must be split: each datagram is a message"},
		{"uso-size0", vnetHdr{gsoType: vnetGSOUDPL4}, false, true, "cannot split into 0-byte datagrams"},
		{"ufo", vnetHdr{gsoType: vnetGSOUDP, gsoSize: 1200}, false, true, "UFO is never enabled, so it is refused"},
		{"unknown", vnetHdr{gsoType: 9, gsoSize: 1}, false, true, "unknown types are refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			split, err := checkGSO(&tc.h, 0, 2000)
			if (err != nil) != tc.bad || split != tc.split {
				t.Fatalf("checkGSO = %v, %v; want split %v, error %v (%s)", split, err, tc.split, tc.bad, tc.why)
			}
			if err != nil && !errors.Is(err, errBadGSO) {
				t.Fatalf("error %v is not errBadGSO", err)
			}
		})
	}
}

// udpSuper builds a USO super-packet: one IP header, one UDP header and
// payload bytes counting up.
func udpSuper(v6 bool, payload int) []byte {
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte(i * 7)
	}
	src4, dst4 := tcpip.AddrFrom4([4]byte{10, 0, 2, 100}), tcpip.AddrFrom4([4]byte{203, 0, 113, 10})
	src6 := tcpip.AddrFrom16([16]byte{0xfd, 15: 0x64})
	dst6 := tcpip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 0x10})
	var ip []byte
	if v6 {
		ip = make([]byte, header.IPv6MinimumSize+header.UDPMinimumSize+payload)
		header.IPv6(ip).Encode(&header.IPv6Fields{
			PayloadLength:     uint16(header.UDPMinimumSize + payload),
			TransportProtocol: header.UDPProtocolNumber,
			HopLimit:          64,
			SrcAddr:           src6,
			DstAddr:           dst6,
		})
	} else {
		ip = make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+payload)
		h := header.IPv4(ip)
		h.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(ip)),
			ID:          100,
			TTL:         64,
			Protocol:    uint8(header.UDPProtocolNumber),
			SrcAddr:     src4,
			DstAddr:     dst4,
		})
		h.SetChecksum(^h.CalculateChecksum())
	}
	off := len(ip) - payload - header.UDPMinimumSize
	udp := header.UDP(ip[off:])
	udp.Encode(&header.UDPFields{SrcPort: 4000, DstPort: 443, Length: uint16(header.UDPMinimumSize + payload)})
	// As the kernel leaves it with NEEDS_CSUM: only the pseudo-header sum.
	udp.SetChecksum(0x1234)
	copy(ip[off+header.UDPMinimumSize:], data)
	return ip
}

func TestUDPSplit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v6      bool
		payload int
		mss     int
		want    []int // payload length of each datagram
		why     string
	}{
		{"v4-even", false, 3600, 1200, []int{1200, 1200, 1200}, "an exact multiple splits into equal datagrams"},
		{"v4-tail", false, 3000, 1200, []int{1200, 1200, 600}, "the last datagram carries the remainder"},
		{"v6-tail", true, 2500, 1000, []int{1000, 1000, 500}, "IPv6 lengths live in the payload length field"},
		{"v4-one", false, 800, 1200, []int{800}, "a packet smaller than one segment stays one datagram"},
		{"v4-empty", false, 0, 1200, []int{0}, "an empty datagram stays one (empty) datagram"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt := udpSuper(tc.v6, tc.payload)
			plan, err := planUDPSplit(pkt, tc.mss)
			if err != nil {
				t.Fatal(err)
			}
			if plan.n != len(tc.want) {
				t.Fatalf("%d datagrams, want %d (%s)", plan.n, len(tc.want), tc.why)
			}
			var joined []byte
			for i := 0; i < plan.n; i++ {
				dg := make([]byte, plan.size(i))
				n := plan.segment(dg, pkt, i)
				if n != len(dg) {
					t.Fatalf("datagram %d: wrote %d bytes, size says %d", i, n, len(dg))
				}
				payload := checkDatagram(t, dg, tc.v6)
				if len(payload) != tc.want[i] {
					t.Fatalf("datagram %d: %d payload bytes, want %d (%s)", i, len(payload), tc.want[i], tc.why)
				}
				if !tc.v6 && header.IPv4(dg).ID() != 100+uint16(i) {
					t.Errorf("datagram %d: IPv4 ID %d, want %d", i, header.IPv4(dg).ID(), 100+i)
				}
				joined = append(joined, payload...)
			}
			if want := pkt[plan.hdrLen:]; !bytes.Equal(joined, want) {
				t.Fatalf("payloads do not add up to the super-packet's (%d vs %d bytes)", len(joined), len(want))
			}
		})
	}
}

// checkDatagram verifies lengths and checksums and returns the payload.
func checkDatagram(t *testing.T, dg []byte, v6 bool) []byte {
	t.Helper()
	var src, dst tcpip.Address
	var udp header.UDP
	if v6 {
		ip := header.IPv6(dg)
		if !ip.IsValid(len(dg)) {
			t.Fatalf("invalid IPv6 header")
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
		udp = header.UDP(ip.Payload())
	} else {
		ip := header.IPv4(dg)
		if !ip.IsValid(len(dg)) || !ip.IsChecksumValid() {
			t.Fatalf("invalid IPv4 header or checksum")
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
		udp = header.UDP(ip.Payload())
	}
	if int(udp.Length()) != len(udp) {
		t.Fatalf("UDP length %d, datagram has %d", udp.Length(), len(udp))
	}
	if !udp.IsChecksumValid(src, dst, checksum.Checksum(udp.Payload(), 0)) {
		t.Fatalf("bad UDP checksum")
	}
	return udp.Payload()
}

func TestPlanUDPSplitRefuses(t *testing.T) {
	tcp := udpSuper(false, 100)
	tcp[9] = uint8(header.TCPProtocolNumber)
	frag := udpSuper(false, 100)
	header.IPv4(frag).SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0)
	for _, tc := range []struct {
		name string
		pkt  []byte
		mss  int
		why  string
	}{
		{"empty", nil, 100, "nothing to split"},
		{"short-v4", udpSuper(false, 0)[:10], 100, "truncated IPv4 header"},
		{"short-udp", udpSuper(false, 0)[:24], 100, "truncated UDP header"},
		{"not-udp", tcp, 100, "USO is for UDP only"},
		{"fragment", frag, 100, "a fragment is not a super-packet"},
		{"version", append([]byte{0x50}, make([]byte, 40)...), 100, "neither IPv4 nor IPv6"},
		{"mss0", udpSuper(true, 100), 0, "zero segment size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := planUDPSplit(tc.pkt, tc.mss); err == nil {
				t.Fatalf("planUDPSplit accepted it; want an error (%s)", tc.why)
			}
		})
	}
}

// FuzzUDPSplit feeds arbitrary super-packets to the splitter: it must never
// panic, and every datagram it makes must fit the size it announced.
func FuzzUDPSplit(f *testing.F) {
	f.Add(udpSuper(false, 3000), uint16(1200))
	f.Add(udpSuper(true, 2500), uint16(1000))
	f.Add([]byte{0x45, 0, 0, 20}, uint16(1))
	f.Fuzz(func(t *testing.T, pkt []byte, mss uint16) {
		plan, err := planUDPSplit(pkt, int(mss))
		if err != nil {
			return
		}
		if plan.n > len(pkt)+1 {
			t.Fatalf("%d datagrams from %d bytes", plan.n, len(pkt))
		}
		total := 0
		for i := 0; i < plan.n; i++ {
			dg := make([]byte, plan.size(i))
			if n := plan.segment(dg, pkt, i); n != len(dg) {
				t.Fatalf("datagram %d: %d bytes, size said %d", i, n, len(dg))
			}
			total += len(dg) - plan.hdrLen
		}
		if total != len(pkt)-plan.hdrLen {
			t.Fatalf("datagrams carry %d payload bytes, super-packet %d", total, len(pkt)-plan.hdrLen)
		}
	})
}

// FuzzVnetHdr checks that any ten bytes decode and re-encode unchanged,
// and that checkGSO never panics on them.
func FuzzVnetHdr(f *testing.F) {
	f.Add([]byte{1, 4, 74, 0, 0xa0, 0x05, 54, 0, 16, 0}, 2000)
	f.Add(make([]byte, vnetHdrLen), 0)
	f.Fuzz(func(t *testing.T, b []byte, frameLen int) {
		if len(b) < vnetHdrLen {
			return
		}
		var h vnetHdr
		h.decode(b)
		var out [vnetHdrLen]byte
		h.encode(out[:])
		if !bytes.Equal(out[:], b[:vnetHdrLen]) {
			t.Fatalf("re-encoded % x, want % x", out, b[:vnetHdrLen])
		}
		checkGSO(&h, 14, frameLen)
	})
}
