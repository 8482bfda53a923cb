package netstack

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestInspect(t *testing.T) {
	guest4, guest6 := mustAddr(Guest4), mustAddr(Guest6)
	gw4, gw6 := mustAddr(Gateway4), mustAddr(Gateway6)
	net4, net6 := mustAddr("203.0.113.10"), mustAddr("2001:db8::10")
	syn4 := tcpSyn(ap("10.0.2.100:40000"), ap("203.0.113.10:80"))
	syn6 := tcpSyn(ap("[fd00::100]:40000"), ap("[2001:db8::10]:80"))

	// An IPv6 packet with a hop-by-hop header in front of TCP.
	hbh := append([]byte{protoTCP, 0, 1, 4, 0, 0, 0, 0}, syn6[40:]...)
	withHBH := ip6(guest6, net6, protoHopByHop, hbh)
	// A later IPv6 fragment of a TCP datagram and of an unknown protocol.
	frag := func(next uint8) []byte {
		f := []byte{next, 0, 0, 0x10, 0, 0, 0, 1} // offset 2 (x8 bytes)
		return ip6(guest6, net6, protoFragment, append(f, make([]byte, 16)...))
	}
	// A later IPv4 fragment.
	frag4 := func(proto uint8) []byte {
		return withFix(ip4(guest4, net4, proto, make([]byte, 16)), func(b []byte) {
			binary.BigEndian.PutUint16(b[6:], 4) // offset 4 (x8)
		}, false)
	}
	nd := func(typ uint8) []byte {
		return ip6(mustAddr("fe80::1"), mustAddr("ff02::2"), protoICMPv6, []byte{typ, 0, 0, 0, 0, 0, 0, 0})
	}
	icmp4 := func(typ uint8, dst string) []byte {
		return ip4(guest4, mustAddr(dst), protoICMP, []byte{typ, 0, 0, 0, 0, 0, 0, 0})
	}

	tests := []struct {
		name   string
		why    string
		pkt    []byte
		ipv6   bool
		l2     bool
		act    action
		reason string // substring
	}{
		{"tcp4", "TCP goes to the stack, whose forwarder asks the policy", syn4, false, false, actPass, ""},
		{"tcp6", "TCP over IPv6 too", syn6, true, false, actPass, ""},
		{"udp4", "UDP goes to the stack", udpPacket(ap("10.0.2.100:5000"), ap("203.0.113.10:53"), []byte("q")), false, false, actPass, ""},
		{"echo-gw4", "echo to the gateway is answered by the stack", icmpEcho(guest4, gw4, 1, 1), false, false, actPass, ""},
		{"echo-gw6", "echo to the gateway over IPv6 too", icmpEcho(guest6, gw6, 1, 1), true, false, actPass, ""},
		{"echo-other4", "echo to any other address is refused, not answered by a promiscuous stack", icmpEcho(guest4, net4, 1, 1), false, false, actRefuse, "icmp echo"},
		{"echo-other6", "the same over IPv6", icmpEcho(guest6, net6, 1, 1), true, false, actRefuse, "icmp echo"},
		{"echo-dns4", "the DNS address does not answer echo", icmpEcho(guest4, mustAddr(DNS4), 1, 1), false, false, actRefuse, "icmp echo"},
		{"icmp-timestamp", "other ICMP types are refused", icmp4(13, Gateway4), false, false, actRefuse, "icmp type 13"},
		{"icmp-error", "ICMP errors from the worker are never answered with ICMP", icmp4(3, "203.0.113.10"), false, false, actDeny, "icmp error"},
		{"proto253", "an experimental IP protocol is refused", rawProto(guest4, net4, 253), false, false, actRefuse, "ip protocol 253"},
		{"gre", "GRE is refused", rawProto(guest4, net4, 47), false, false, actRefuse, "ip protocol 47"},
		{"sctp6", "SCTP over IPv6 is refused", rawProto(guest6, net6, 132), true, false, actRefuse, "ip protocol 132"},
		{"v6-off", "with IPv6 off every IPv6 packet is dropped", syn6, false, false, actDrop, "ipv6 disabled"},
		{"hbh", "extension headers are walked to find TCP", withHBH, true, false, actPass, ""},
		{"frag6-tcp", "a later TCP fragment goes to reassembly", frag(protoTCP), true, false, actPass, ""},
		{"frag6-other", "a later fragment of a refused protocol is dropped", frag(253), true, false, actDrop, "fragment"},
		{"frag4-udp", "a later UDP fragment goes to reassembly", frag4(protoUDP), false, false, actPass, ""},
		{"frag4-gre", "a later GRE fragment is dropped", frag4(47), false, false, actDrop, "fragment"},
		{"nd-l3", "neighbour discovery is not needed on a TUN", nd(135), true, false, actDrop, "neighbour discovery"},
		{"nd-l2", "but is on a TAP", nd(135), true, true, actPass, ""},
		{"rs", "router solicitations are dropped quietly", nd(133), true, false, actDrop, ""},
		{"mld", "MLD reports are dropped quietly", nd(143), true, false, actDrop, ""},
		{"spoofed4", "a source outside the guest network is denied", tcpSyn(ap("192.0.2.1:1"), ap("203.0.113.10:80")), false, false, actDeny, "source"},
		{"spoofed-gw", "the gateway's own address is not a worker source", tcpSyn(ap("10.0.2.2:1"), ap("203.0.113.10:80")), false, false, actDeny, "source"},
		{"spoofed-neighbour4", "another host of the worker's own subnet is not the worker (Podman's root has CAP_NET_RAW)", tcpSyn(ap("10.0.2.50:1"), ap("203.0.113.10:80")), false, false, actDeny, "source"},
		{"spoofed-neighbour6", "the same over IPv6", tcpSyn(ap("[fd00::50]:1"), ap("[2001:db8::10]:80")), true, false, actDeny, "source"},
		{"spoofed6", "the same over IPv6", tcpSyn(ap("[2001:db8::99]:1"), ap("[2001:db8::10]:80")), true, false, actDeny, "source"},
		{"bcast", "directed broadcast gets no ICMP", udpPacket(ap("10.0.2.100:68"), ap("10.0.2.255:67"), nil), false, false, actDeny, "broadcast"},
		{"mcast", "multicast gets no ICMP", udpPacket(ap("10.0.2.100:5353"), ap("224.0.0.251:5353"), nil), false, false, actDeny, "multicast"},
		{"mcast6", "IPv6 multicast too", udpPacket(ap("[fd00::100]:5353"), ap("[ff02::fb]:5353"), nil), true, false, actDeny, "multicast"},
		{"loopback", "a loopback destination is a martian, refused", tcpSyn(ap("10.0.2.100:1"), ap("127.0.0.1:80")), false, false, actRefuse, "martian"},

		{"empty", "an empty packet is malformed", nil, false, false, actMalformed, "empty"},
		{"version", "IP version 5 is malformed", []byte{0x50, 1, 2, 3}, false, false, actMalformed, "not ip"},
		{"short4", "a truncated IPv4 header", syn4[:19], false, false, actMalformed, "truncated"},
		{"ihl", "an IPv4 header length below 20", withFix(syn4, func(b []byte) { b[0] = 0x44 }, false), false, false, actMalformed, "header length"},
		{"ihl-long", "an IPv4 header length beyond the packet", withFix(syn4[:24], func(b []byte) { b[0] = 0x4f; b[3] = 24 }, true), false, false, actMalformed, "truncated"},
		{"totlen-big", "an IPv4 total length beyond the packet", withFix(syn4, func(b []byte) { b[2], b[3] = 0xff, 0xff }, false), false, false, actMalformed, "total length"},
		{"totlen-small", "an IPv4 total length below the header", withFix(syn4, func(b []byte) { b[2], b[3] = 0, 10 }, false), false, false, actMalformed, "total length"},
		{"csum", "a bad IPv4 header checksum", withFix(syn4, func(b []byte) { b[10] ^= 0xff }, true), false, false, actMalformed, "checksum"},
		{"icmp-short", "ICMP shorter than its header", ip4(guest4, gw4, protoICMP, []byte{8, 0}), false, false, actMalformed, "icmp"},
		{"short6", "a truncated IPv6 header", syn6[:39], true, false, actMalformed, "truncated"},
		{"plen6", "an IPv6 payload length beyond the packet", withFix(syn6, func(b []byte) { b[4] = 0xff }, true), true, false, actMalformed, "payload length"},
		{"ext-short", "an extension header beyond the payload", ip6(guest6, net6, protoDestOpts, []byte{6, 4, 0, 0}), true, false, actMalformed, "extension"},
		{"ext-len", "an extension header length beyond the payload", ip6(guest6, net6, protoDestOpts, []byte{6, 9, 0, 0, 0, 0, 0, 0}), true, false, actMalformed, "extension"},
		{"hbh-late", "a hop-by-hop header that is not first", ip6(guest6, net6, protoDestOpts, append([]byte{protoHopByHop, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 8)...)), true, false, actMalformed, "hop-by-hop"},
		{"icmp6-short", "ICMPv6 shorter than its header", ip6(guest6, gw6, protoICMPv6, []byte{128}), true, false, actMalformed, "icmpv6"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := newInspector(Network{}, tc.ipv6, tc.l2)
			v := in.inspect(bytesData(tc.pkt))
			if v.act != tc.act || !strings.Contains(v.reason, tc.reason) {
				t.Fatalf("%s: got action %d reason %q, want %d with %q", tc.why, v.act, v.reason, tc.act, tc.reason)
			}
		})
	}
}

func TestProhibitedChecksums(t *testing.T) {
	orig := tcpSyn(ap("10.0.2.100:40000"), ap("203.0.113.10:80"))
	b := prohibited4(mustAddr(Gateway4), mustAddr(Guest4), orig)
	if len(b) != 28+len(orig) {
		t.Fatalf("length %d", len(b))
	}
	if got := ^checksumOf(b[:20]); got != 0 {
		t.Fatalf("ipv4 header checksum does not verify")
	}
	if got := ^checksumOf(b[20:]); got != 0 {
		t.Fatalf("icmp checksum does not verify")
	}
	if typ, code, _ := icmpInfo(b); typ != 3 || code != 13 {
		t.Fatalf("type %d code %d, want 3/13", typ, code)
	}

	orig6 := tcpSyn(ap("[fd00::100]:40000"), ap("[2001:db8::10]:80"))
	b6 := prohibited6(mustAddr(Gateway6), mustAddr(Guest6), orig6)
	sum := checksumWith(b6[40:], pseudoSum(mustAddr(Gateway6), mustAddr(Guest6), protoICMPv6, len(b6)-40))
	if ^sum != 0 {
		t.Fatalf("icmpv6 checksum does not verify")
	}
	if typ, code, _ := icmpInfo(b6); typ != 1 || code != 1 {
		t.Fatalf("type %d code %d, want 1/1", typ, code)
	}

	// Quotes are capped to the minimum MTU.
	big := make([]byte, 4000)
	if n := len(prohibited4(mustAddr(Gateway4), mustAddr(Guest4), big)); n != 576 {
		t.Fatalf("ipv4 error is %d bytes, want 576", n)
	}
	if n := len(prohibited6(mustAddr(Gateway6), mustAddr(Guest6), big)); n != 1280 {
		t.Fatalf("ipv6 error is %d bytes, want 1280", n)
	}
}

func TestNetwork(t *testing.T) {
	var n Network
	if n.Gateway4().String() != "10.0.2.2" || n.DNS4().String() != "10.0.2.3" || n.Guest4().String() != "10.0.2.100" {
		t.Fatalf("default v4 plan: %v %v %v", n.Gateway4(), n.DNS4(), n.Guest4())
	}
	if n.Gateway6().String() != "fd00::2" || n.DNS6().String() != "fd00::3" || n.Guest6().String() != "fd00::100" {
		t.Fatalf("default v6 plan: %v %v %v", n.Gateway6(), n.DNS6(), n.Guest6())
	}
	// The tests' names for the default plan (addr_test.go) are these.
	if Gateway4 != "10.0.2.2" || DNS4 != "10.0.2.3" || Guest4 != "10.0.2.100" || Gateway6 != "fd00::2" || DNS6 != "fd00::3" || Guest6 != "fd00::100" ||
		DefaultPrefix4 != "10.0.2.0/24" || DefaultPrefix6 != "fd00::/64" {
		t.Fatalf("test plan: %s %s %s %s %s %s %s %s", Gateway4, DNS4, Guest4, Gateway6, DNS6, Guest6, DefaultPrefix4, DefaultPrefix6)
	}
	if v4, v6 := n.FakePool4(), n.FakePool6(); v4.String() != "198.18.0.0/15" || v6.String() != "fd6e:7367:6174::/64" {
		t.Fatalf("fake pools %v %v", v4, v6)
	}
	d := n.WithDefaults()
	if d.Broadcast4().String() != "10.0.2.255" {
		t.Fatalf("broadcast %v", d.Broadcast4())
	}
	tests := []struct {
		addr string
		ok   bool
		why  string
	}{
		{"10.0.2.100", true, "the worker"},
		{"10.0.2.15", false, "any other host of the subnet: not the worker's (spoofed)"},
		{"10.0.2.2", false, "the gateway"},
		{"10.0.2.3", false, "the DNS server"},
		{"10.0.2.0", false, "the network address"},
		{"10.0.2.255", false, "the broadcast address"},
		{"10.0.3.1", false, "another subnet"},
		{"fd00::100", true, "the worker over IPv6"},
		{"fd00::2", false, "the IPv6 gateway"},
		{"fe80::1", false, "link-local is not a flow source"},
	}
	for _, tc := range tests {
		if got := d.GuestSource(mustAddr(tc.addr)); got != tc.ok {
			t.Errorf("guestSource(%s) = %v, want %v: %s", tc.addr, got, tc.ok, tc.why)
		}
	}
}
