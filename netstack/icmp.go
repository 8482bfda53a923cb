package netstack

import (
	"encoding/binary"
	"net/netip"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// How much of the refused packet an ICMP error quotes: as much as fits in
// the minimum MTU (576 bytes for IPv4 as routers do, RFC 1812 4.3.2.3; 1280
// for IPv6, RFC 4443 2.4(c)).
const (
	maxQuote4 = 576 - 20 - 8
	maxQuote6 = 1280 - 40 - 8
)

// ICMP "administratively prohibited" codes.
const (
	icmp4DstUnreachable = 3
	icmp4AdminProhibit  = 13
	icmp6DstUnreachable = 1
	icmp6AdminProhibit  = 1
)

// prohibited4 builds an IPv4 packet from src to dst carrying an ICMP
// destination unreachable, communication administratively prohibited
// (type 3 code 13), quoting the start of the refused packet.
func prohibited4(src, dst netip.Addr, quote []byte) []byte {
	if len(quote) > maxQuote4 {
		quote = quote[:maxQuote4]
	}
	b := make([]byte, 28+len(quote))
	ip := b[:20]
	ip[0] = 0x45
	ip[1] = 0xc0 // precedence: internetwork control, as Linux sends errors
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)))
	ip[8] = 64
	ip[9] = protoICMP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], ^checksum.Checksum(ip, 0))
	ic := b[20:]
	ic[0] = icmp4DstUnreachable
	ic[1] = icmp4AdminProhibit
	copy(ic[8:], quote)
	binary.BigEndian.PutUint16(ic[2:], ^checksum.Checksum(ic, 0))
	return b
}

// prohibited6 builds an IPv6 packet from src to dst carrying an ICMPv6
// destination unreachable, communication administratively prohibited
// (type 1 code 1), quoting the start of the refused packet.
func prohibited6(src, dst netip.Addr, quote []byte) []byte {
	if len(quote) > maxQuote6 {
		quote = quote[:maxQuote6]
	}
	b := make([]byte, 48+len(quote))
	ip := b[:40]
	ip[0] = 0x60
	plen := 8 + len(quote)
	binary.BigEndian.PutUint16(ip[4:], uint16(plen))
	ip[6] = protoICMPv6
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	ic := b[40:]
	ic[0] = icmp6DstUnreachable
	ic[1] = icmp6AdminProhibit
	copy(ic[8:], quote)
	// Pseudo-header: addresses, upper-layer length, next header.
	sum := checksum.Checksum(ip[8:40], 0)
	var lenNext [8]byte
	binary.BigEndian.PutUint32(lenNext[:4], uint32(plen))
	lenNext[7] = protoICMPv6
	sum = checksum.Checksum(lenNext[:], sum)
	sum = checksum.Checksum(ic, sum)
	binary.BigEndian.PutUint16(ic[2:], ^sum)
	return b
}

// sendProhibited sends the worker at dst an ICMP administratively
// prohibited error quoting quote (the start of the refused packet), from
// the gateway's address. It honours the stack's ICMP rate limit.
func (g *Gateway) sendProhibited(v6 bool, dst netip.Addr, quote []byte) {
	if !g.stack.AllowICMPMessage() {
		g.stats.icmpRateLimited.Add(1)
		return
	}
	var pkt []byte
	var src netip.Addr
	var proto tcpip.NetworkProtocolNumber
	if v6 {
		src, proto = g.net.Gateway6(), header.IPv6ProtocolNumber
		pkt = prohibited6(src, dst, quote)
	} else {
		src, proto = g.net.Gateway4(), header.IPv4ProtocolNumber
		pkt = prohibited4(src, dst, quote)
	}
	if err := g.writeIP(proto, dst, pkt); err != nil {
		g.stats.icmpErrors.Add(1)
		return
	}
	g.stats.icmpSent.Add(1)
}

// writeIP sends a complete IP packet (header included, its source address
// kept as is) to the worker's address dst through the stack, so that it
// gets link headers and neighbour resolution on an L2 link.
func (g *Gateway) writeIP(proto tcpip.NetworkProtocolNumber, dst netip.Addr, b []byte) error {
	local := g.net.Gateway4()
	if proto == header.IPv6ProtocolNumber {
		local = g.net.Gateway6()
	}
	r, terr := g.stack.FindRoute(g.nic, tcpip.AddrFromSlice(local.AsSlice()), tcpip.AddrFromSlice(dst.AsSlice()), proto, false)
	if terr != nil {
		return tcpipError(terr)
	}
	defer r.Release()
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: int(r.MaxHeaderLength()),
		Payload:            buffer.MakeWithData(b),
	})
	defer pkt.DecRef()
	if terr := r.WriteHeaderIncludedPacket(pkt); terr != nil {
		return tcpipError(terr)
	}
	return nil
}

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// tcpReset6 builds an IPv6 packet carrying the RST that answers seg (a TCP
// header and payload that went from src to dst), following RFC 9293 3.10.7.1.
// It returns nil when seg is itself a RST or too short.
func tcpReset6(src, dst netip.Addr, seg []byte) []byte {
	if len(seg) < 20 || seg[13]&tcpRST != 0 {
		return nil
	}
	dataOff := int(seg[12]>>4) * 4
	if dataOff < 20 || dataOff > len(seg) {
		return nil
	}
	flags := seg[13]
	t := make([]byte, 20)
	copy(t[0:2], seg[2:4]) // source port: the one the worker connected to
	copy(t[2:4], seg[0:2])
	if flags&tcpACK != 0 {
		copy(t[4:8], seg[8:12]) // seq = their ack
		t[13] = tcpRST
	} else {
		n := uint32(len(seg) - dataOff)
		if flags&tcpSYN != 0 {
			n++
		}
		if flags&tcpFIN != 0 {
			n++
		}
		binary.BigEndian.PutUint32(t[8:12], binary.BigEndian.Uint32(seg[4:8])+n)
		t[13] = tcpRST | tcpACK
	}
	t[12] = 5 << 4
	b := make([]byte, 40+len(t))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(t)))
	b[6] = protoTCP
	b[7] = 64
	d, s := dst.As16(), src.As16()
	copy(b[8:24], d[:]) // from the address the worker connected to
	copy(b[24:40], s[:])
	copy(b[40:], t)
	var lenNext [8]byte
	binary.BigEndian.PutUint32(lenNext[:4], uint32(len(t)))
	lenNext[7] = protoTCP
	sum := checksum.Checksum(b[8:40], 0)
	sum = checksum.Checksum(lenNext[:], sum)
	sum = checksum.Checksum(b[40:], sum)
	binary.BigEndian.PutUint16(b[40+16:], ^sum)
	return b
}
