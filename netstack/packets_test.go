package netstack

import (
	"encoding/binary"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Raw packet builders for tests: well-formed unless a test breaks them.

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// ip4 builds an IPv4 packet with a correct header checksum.
func ip4(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	b := make([]byte, 20+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], 0x1234)
	b[8] = 64
	b[9] = proto
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[10:], ^checksum.Checksum(b[:20], 0))
	copy(b[20:], payload)
	return b
}

// ip6 builds an IPv6 packet.
func ip6(src, dst netip.Addr, next uint8, payload []byte) []byte {
	b := make([]byte, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = next
	b[7] = 64
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	copy(b[40:], payload)
	return b
}

// pseudoSum is the transport pseudo-header checksum.
func pseudoSum(src, dst netip.Addr, proto uint8, length int) uint16 {
	var b []byte
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	if src.Is4() {
		b = append(b, 0, proto, byte(length>>8), byte(length))
	} else {
		b = append(b, byte(length>>24), byte(length>>16), byte(length>>8), byte(length), 0, 0, 0, proto)
	}
	return checksum.Checksum(b, 0)
}

// icmpEcho builds an echo request (ICMPv4 type 8, or ICMPv6 type 128 when
// src is IPv6) with its checksum.
func icmpEcho(src, dst netip.Addr, id, seq uint16) []byte {
	b := make([]byte, 8+4)
	copy(b[8:], "ping")
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	if src.Is4() {
		b[0] = 8
		binary.BigEndian.PutUint16(b[2:], ^checksum.Checksum(b, 0))
		return ip4(src, dst, protoICMP, b)
	}
	b[0] = 128
	sum := checksum.Checksum(b, pseudoSum(src, dst, protoICMPv6, len(b)))
	binary.BigEndian.PutUint16(b[2:], ^sum)
	return ip6(src, dst, protoICMPv6, b)
}

// tcpSyn builds a TCP SYN from src to dst.
func tcpSyn(src, dst netip.AddrPort) []byte {
	t := make([]byte, 20)
	binary.BigEndian.PutUint16(t[0:], src.Port())
	binary.BigEndian.PutUint16(t[2:], dst.Port())
	binary.BigEndian.PutUint32(t[4:], 1000)
	t[12] = 5 << 4
	t[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(t[14:], 65535)
	sum := checksum.Checksum(t, pseudoSum(src.Addr(), dst.Addr(), protoTCP, len(t)))
	binary.BigEndian.PutUint16(t[16:], ^sum)
	if src.Addr().Is4() {
		return ip4(src.Addr(), dst.Addr(), protoTCP, t)
	}
	return ip6(src.Addr(), dst.Addr(), protoTCP, t)
}

// udpPacket builds a UDP datagram from src to dst.
func udpPacket(src, dst netip.AddrPort, payload []byte) []byte {
	u := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], payload)
	sum := checksum.Checksum(u, pseudoSum(src.Addr(), dst.Addr(), protoUDP, len(u)))
	if sum != 0xffff {
		sum = ^sum
	}
	binary.BigEndian.PutUint16(u[6:], sum)
	if src.Addr().Is4() {
		return ip4(src.Addr(), dst.Addr(), protoUDP, u)
	}
	return ip6(src.Addr(), dst.Addr(), protoUDP, u)
}

// rawProto builds a packet of IP protocol proto with a small payload.
func rawProto(src, dst netip.Addr, proto uint8) []byte {
	if src.Is4() {
		return ip4(src, dst, proto, []byte("payload!"))
	}
	return ip6(src, dst, proto, []byte("payload!"))
}

// withFix rewrites part of a packet and, for IPv4, recomputes the header
// checksum unless keepSum.
func withFix(b []byte, fix func([]byte), keepSum bool) []byte {
	b = append([]byte(nil), b...)
	fix(b)
	if !keepSum && len(b) >= 20 && b[0]>>4 == 4 {
		ihl := int(b[0]&0xf) * 4
		if ihl >= 20 && ihl <= len(b) {
			b[10], b[11] = 0, 0
			binary.BigEndian.PutUint16(b[10:], ^checksum.Checksum(b[:ihl], 0))
		}
	}
	return b
}

// icmpInfo returns the ICMP type and code of an IP packet carrying ICMP or
// ICMPv6 (no extension headers), and ok.
func icmpInfo(b []byte) (typ, code uint8, ok bool) {
	if len(b) < 1 {
		return 0, 0, false
	}
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0xf) * 4
		if len(b) < ihl+8 || b[9] != protoICMP {
			return 0, 0, false
		}
		return b[ihl], b[ihl+1], true
	case 6:
		if len(b) < 48 || b[6] != protoICMPv6 {
			return 0, 0, false
		}
		return b[40], b[41], true
	}
	return 0, 0, false
}

// tcpFlags returns the TCP flags of an IP packet carrying TCP, and ok.
func tcpFlags(b []byte) (uint8, bool) {
	if len(b) < 1 {
		return 0, false
	}
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0xf) * 4
		if len(b) < ihl+20 || b[9] != protoTCP {
			return 0, false
		}
		return b[ihl+13], true
	case 6:
		if len(b) < 60 || b[6] != protoTCP {
			return 0, false
		}
		return b[53], true
	}
	return 0, false
}

// bytesData adapts a byte slice to packetData.
type bytesData []byte

func (b bytesData) PullUp(n int) ([]byte, bool) {
	if n < 0 || n > len(b) {
		return nil, false
	}
	return b[:n], true
}

func (b bytesData) Size() int { return len(b) }

func checksumOf(b []byte) uint16 { return checksum.Checksum(b, 0) }

func checksumWith(b []byte, initial uint16) uint16 { return checksum.Checksum(b, initial) }
