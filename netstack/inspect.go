package netstack

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// packetData is the read access inspect needs: stack.PacketData satisfies
// it (and, being one pointer wide, converts to the interface without
// allocating).
type packetData interface {
	// PullUp returns the first n bytes contiguously, or false when the
	// packet is shorter.
	PullUp(n int) ([]byte, bool)
	// Size is the packet's length in bytes.
	Size() int
}

// action is what the link filter does with an inbound packet.
type action uint8

const (
	// actPass hands the packet to the gVisor stack.
	actPass action = iota
	// actDrop drops it without a record: traffic that is not for us
	// (IPv6 when it is off, neighbour discovery and MLD on an L3 link,
	// fragments whose first fragment was already refused).
	actDrop
	// actMalformed drops it, counts it and records it.
	actMalformed
	// actRefuse answers ICMP "administratively prohibited" and records it.
	actRefuse
	// actDeny records it without answering: RFC 1122 and RFC 4443 forbid
	// ICMP errors about ICMP errors and about multicast or broadcast
	// packets, and a spoofed source would get the answer, not the worker.
	actDeny
	// actMapped is TCP or UDP over IPv6 to an IPv4-mapped address, which
	// gVisor drops unseen: the filter decides it as a flow (for the
	// record) and refuses it itself, with a RST or an ICMP error.
	actMapped
)

// IP protocol numbers the filter knows.
const (
	protoHopByHop = 0
	protoICMP     = 1
	protoTCP      = 6
	protoUDP      = 17
	protoRouting  = 43
	protoFragment = 44
	protoAH       = 51
	protoICMPv6   = 58
	protoDestOpts = 60
)

// maxExtHeaders bounds the IPv6 extension header chain we walk.
const maxExtHeaders = 8

// verdict is the filter's reading of one inbound packet.
type verdict struct {
	act    action
	v6     bool
	proto  uint8 // transport protocol (after IPv6 extension headers)
	thOff  int   // offset of the transport header (IPv6, actMapped only)
	src    netip.Addr
	dst    netip.Addr
	reason string // why, for records; low cardinality so records aggregate
}

// inspector classifies inbound packets. It is immutable after
// construction and safe for concurrent use.
type inspector struct {
	gw4, bc4, gw6 netip.Addr
	// dns4 and alias4 (the plan's HostAlias4, maybe invalid) are the
	// other IPv4 addresses the gateway answers ARP for.
	dns4, alias4 netip.Addr
	// guest4 and guest6 are the only sources accepted (Plan.GuestSource).
	guest4, guest6 netip.Addr
	net            Network
	ipv6           bool
	// l2 is set when the link resolves addresses (a TAP): IPv6 neighbour
	// solicitations and advertisements then go to the stack.
	l2 bool
}

func newInspector(n Network, ipv6, l2 bool) *inspector {
	n = n.WithDefaults()
	return &inspector{
		net:    n,
		gw4:    n.Gateway4(),
		bc4:    n.Broadcast4(),
		gw6:    n.Gateway6(),
		dns4:   n.DNS4(),
		alias4: n.HostAlias4,
		guest4: n.Guest4(),
		guest6: n.Guest6(),
		ipv6:   ipv6,
		l2:     l2,
	}
}

// inspect classifies one IP packet. It never panics on any input.
func (in *inspector) inspect(d packetData) verdict {
	h, ok := d.PullUp(1)
	if !ok {
		return verdict{act: actMalformed, reason: "malformed: empty packet"}
	}
	switch h[0] >> 4 {
	case 4:
		return in.inspect4(d)
	case 6:
		if !in.ipv6 {
			return verdict{act: actDrop, v6: true, reason: "ipv6 disabled"}
		}
		return in.inspect6(d)
	}
	return verdict{act: actMalformed, reason: "malformed: not ip"}
}

func malformed(v verdict, why string) verdict {
	v.act = actMalformed
	v.reason = "malformed: " + why
	return v
}

func (in *inspector) inspect4(d packetData) verdict {
	v := verdict{}
	size := d.Size()
	h, ok := d.PullUp(20)
	if !ok {
		return malformed(v, "truncated ipv4 header")
	}
	ihl := int(h[0]&0x0f) * 4
	if ihl < 20 {
		return malformed(v, "ipv4 header length")
	}
	if h, ok = d.PullUp(ihl); !ok {
		return malformed(v, "truncated ipv4 header")
	}
	total := int(binary.BigEndian.Uint16(h[2:4]))
	if total < ihl || total > size {
		return malformed(v, "ipv4 total length")
	}
	if checksum.Checksum(h[:ihl], 0) != 0xffff {
		return malformed(v, "ipv4 header checksum")
	}
	v.src = netip.AddrFrom4([4]byte(h[12:16]))
	v.dst = netip.AddrFrom4([4]byte(h[16:20]))
	v.proto = h[9]
	fragOff := binary.BigEndian.Uint16(h[6:8]) & 0x1fff

	if v.src != in.guest4 {
		v.act, v.reason = actDeny, "source address is not the worker's"
		return v
	}
	if v.dst.IsMulticast() || v.dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || v.dst == in.bc4 {
		v.act, v.reason = actDeny, "multicast or broadcast destination"
		return v
	}
	if v.dst.IsLoopback() || v.dst.As4()[0] == 0 {
		v.act, v.reason = actRefuse, "martian destination"
		return v
	}
	if fragOff != 0 {
		// A later fragment: only the stack can reassemble it. Its
		// first fragment decided the datagram's fate.
		return in.laterFragment(v, v.dst == in.gw4)
	}
	switch v.proto {
	case protoTCP, protoUDP:
		v.act = actPass
		return v
	case protoICMP:
		if total-ihl < 8 {
			return malformed(v, "truncated icmp header")
		}
		b, ok := d.PullUp(ihl + 8)
		if !ok {
			return malformed(v, "truncated icmp header")
		}
		typ := b[ihl]
		switch {
		case typ == 8 && v.dst == in.gw4:
			v.act = actPass
		case typ == 8:
			v.act, v.reason = actRefuse, "icmp echo to an address other than the gateway"
		case icmp4IsError(typ):
			v.act, v.reason = actDeny, "icmp error message from the worker"
		default:
			v.act, v.reason = actRefuse, "icmp type "+strconv.Itoa(int(typ))
		}
		return v
	}
	v.act, v.reason = actRefuse, "ip protocol "+strconv.Itoa(int(v.proto))
	return v
}

// laterFragment handles a non-first fragment: TCP and UDP (and ICMP to the
// gateway) go to the stack's reassembly; anything else cannot complete
// because its first fragment was refused.
func (in *inspector) laterFragment(v verdict, toGateway bool) verdict {
	switch {
	case v.proto == protoTCP || v.proto == protoUDP:
		v.act = actPass
	case (v.proto == protoICMP || v.proto == protoICMPv6) && toGateway:
		v.act = actPass
	default:
		v.act, v.reason = actDrop, "fragment of a refused datagram"
	}
	return v
}

// icmp4IsError reports ICMPv4 error message types (RFC 1122 3.2.2).
func icmp4IsError(typ uint8) bool {
	switch typ {
	case 3, 4, 5, 11, 12:
		return true
	}
	return false
}

func (in *inspector) inspect6(d packetData) verdict {
	v := verdict{v6: true}
	size := d.Size()
	h, ok := d.PullUp(40)
	if !ok {
		return malformed(v, "truncated ipv6 header")
	}
	end := 40 + int(binary.BigEndian.Uint16(h[4:6]))
	if end > size {
		return malformed(v, "ipv6 payload length")
	}
	v.src = netip.AddrFrom16([16]byte(h[8:24]))
	v.dst = netip.AddrFrom16([16]byte(h[24:40]))

	next, off, later := h[6], 40, false
	for i := 0; ; i++ {
		switch next {
		case protoHopByHop, protoRouting, protoDestOpts, protoFragment, protoAH:
		default:
			goto transport
		}
		if i >= maxExtHeaders {
			return malformed(v, "too many ipv6 extension headers")
		}
		if next == protoHopByHop && i != 0 {
			return malformed(v, "ipv6 hop-by-hop header not first")
		}
		if off+8 > end {
			return malformed(v, "truncated ipv6 extension header")
		}
		b, ok := d.PullUp(off + 8)
		if !ok {
			return malformed(v, "truncated ipv6 extension header")
		}
		cur := next
		next = b[off]
		switch cur {
		case protoFragment:
			if binary.BigEndian.Uint16(b[off+2:off+4])>>3 != 0 {
				later = true
			}
			off += 8
		case protoAH:
			off += (int(b[off+1]) + 2) * 4
		default:
			off += (int(b[off+1]) + 1) * 8
		}
		if off > end {
			return malformed(v, "truncated ipv6 extension header")
		}
		if later {
			break
		}
	}
transport:
	v.proto = next
	var icmpType uint8
	if next == protoICMPv6 && !later {
		if off+4 > end {
			return malformed(v, "truncated icmpv6 header")
		}
		b, ok := d.PullUp(off + 4)
		if !ok {
			return malformed(v, "truncated icmpv6 header")
		}
		icmpType = b[off]
		// Neighbour discovery and MLD come from link-local or
		// unspecified sources to multicast: sort them out first.
		switch icmpType {
		case 135, 136: // neighbour solicitation, advertisement
			if in.l2 {
				v.act = actPass
				return v
			}
			v.act, v.reason = actDrop, "neighbour discovery on an l3 link"
			return v
		case 130, 131, 132, 143, // MLD
			133, 134, 137: // router solicitation, advertisement, redirect
			v.act, v.reason = actDrop, "neighbour discovery or mld"
			return v
		}
	}
	if v.src != in.guest6 {
		v.act, v.reason = actDeny, "source address is not the worker's"
		return v
	}
	if v.dst.IsMulticast() {
		v.act, v.reason = actDeny, "multicast or broadcast destination"
		return v
	}
	if v.dst.IsLoopback() || v.dst.IsUnspecified() {
		v.act, v.reason = actRefuse, "martian destination"
		return v
	}
	if later {
		return in.laterFragment(v, v.dst == in.gw6)
	}
	if v.dst.Is4In6() && (next == protoTCP || next == protoUDP) {
		v.act, v.thOff, v.reason = actMapped, off, "ipv4-mapped destination over ipv6"
		return v
	}
	switch next {
	case protoTCP, protoUDP:
		v.act = actPass
		return v
	case protoICMPv6:
		switch {
		case icmpType == 128 && v.dst == in.gw6:
			v.act = actPass
		case icmpType == 128:
			v.act, v.reason = actRefuse, "icmp echo to an address other than the gateway"
		case icmpType < 128:
			v.act, v.reason = actDeny, "icmp error message from the worker"
		default:
			v.act, v.reason = actRefuse, "icmpv6 type "+strconv.Itoa(int(icmpType))
		}
		return v
	}
	v.act, v.reason = actRefuse, "ip protocol "+strconv.Itoa(int(next))
	return v
}

// protoName names an IP protocol for records.
func protoName(p uint8) string {
	switch p {
	case protoICMP:
		return "icmp"
	case 2:
		return "igmp"
	case 4:
		return "ipip"
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case 41:
		return "ipv6-in-ip"
	case 47:
		return "gre"
	case 50:
		return "esp"
	case protoAH:
		return "ah"
	case protoICMPv6:
		return "icmpv6"
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	}
	return "ip-" + strconv.Itoa(int(p))
}
