package tun

import (
	"encoding/binary"
	"errors"
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The virtio-net header that a TUN device opened with IFF_VNET_HDR puts
// before every packet in both directions (linux/virtio_net.h, struct
// virtio_net_hdr; little-endian since virtio 1.0, which is what TUN uses
// unless TUNSETVNETLE/BE says otherwise on a big-endian host).
const vnetHdrLen = 10

// Flag and GSO type values of the virtio-net header.
const (
	vnetFlagNeedsCsum = 1 // only part of the L4 checksum is filled in
	vnetFlagDataValid = 2 // the checksum was verified

	vnetGSONone   = 0
	vnetGSOTCPv4  = 1
	vnetGSOUDP    = 3 // UFO: IP fragmentation offload, never enabled here
	vnetGSOTCPv6  = 4
	vnetGSOUDPL4  = 5 // USO: UDP segmentation offload
	vnetGSOECNBit = 0x80
)

// vnetHdr is a decoded virtio-net header.
type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16 // length of the headers before the payload (a hint)
	gsoSize    uint16 // payload bytes per segment
	csumStart  uint16 // where the checksummed region starts
	csumOffset uint16 // where the checksum goes, from csumStart
}

// decode reads a header from the first vnetHdrLen bytes of b.
func (h *vnetHdr) decode(b []byte) {
	_ = b[vnetHdrLen-1]
	h.flags = b[0]
	h.gsoType = b[1]
	h.hdrLen = binary.LittleEndian.Uint16(b[2:])
	h.gsoSize = binary.LittleEndian.Uint16(b[4:])
	h.csumStart = binary.LittleEndian.Uint16(b[6:])
	h.csumOffset = binary.LittleEndian.Uint16(b[8:])
}

// encode writes h into the first vnetHdrLen bytes of b.
func (h *vnetHdr) encode(b []byte) {
	_ = b[vnetHdrLen-1]
	b[0] = h.flags
	b[1] = h.gsoType
	binary.LittleEndian.PutUint16(b[2:], h.hdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.gsoSize)
	binary.LittleEndian.PutUint16(b[6:], h.csumStart)
	binary.LittleEndian.PutUint16(b[8:], h.csumOffset)
}

// errBadGSO reports a super-packet that cannot be split.
var errBadGSO = errors.New("malformed gso packet")

// udpSegments describes how a USO super-packet (an IP header, one UDP
// header and the payload of several datagrams) splits into datagrams.
type udpSegments struct {
	v6     bool
	ipLen  int // IP header length (IPv4 options included; IPv6: 40, no extension headers)
	mss    int // payload bytes per datagram; the last one may be shorter
	n      int // number of datagrams
	hdrLen int // ipLen + 8
	total  int // payload bytes in all
}

// planUDPSplit checks pkt (an IP packet starting at its IP header) and
// returns how it splits into gsoSize-byte datagrams.
func planUDPSplit(pkt []byte, gsoSize int) (udpSegments, error) {
	var s udpSegments
	if len(pkt) < 1 || gsoSize <= 0 {
		return s, errBadGSO
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < header.IPv4MinimumSize {
			return s, errBadGSO
		}
		ip := header.IPv4(pkt)
		s.ipLen = int(ip.HeaderLength())
		if s.ipLen < header.IPv4MinimumSize || ip.Protocol() != uint8(header.UDPProtocolNumber) || ip.More() || ip.FragmentOffset() != 0 {
			return s, errBadGSO
		}
	case 6:
		if len(pkt) < header.IPv6MinimumSize {
			return s, errBadGSO
		}
		s.v6 = true
		s.ipLen = header.IPv6MinimumSize
		if header.IPv6(pkt).NextHeader() != uint8(header.UDPProtocolNumber) {
			return s, errBadGSO
		}
	default:
		return s, errBadGSO
	}
	s.hdrLen = s.ipLen + header.UDPMinimumSize
	if len(pkt) < s.hdrLen {
		return s, errBadGSO
	}
	s.mss = gsoSize
	s.total = len(pkt) - s.hdrLen
	s.n = (s.total + s.mss - 1) / s.mss
	if s.n == 0 {
		s.n = 1 // an empty datagram stays one datagram
	}
	return s, nil
}

// segment writes datagram i of the super-packet pkt into dst, which must
// hold at least s.size(i) bytes, and returns the datagram's length. The
// IPv4 ID goes up by one per datagram, lengths are rewritten and both
// checksums (IPv4 header, UDP) are computed in full, as if the worker's
// kernel had segmented the packet itself.
func (s *udpSegments) segment(dst, pkt []byte, i int) int {
	off := s.hdrLen + i*s.mss
	plen := min(s.mss, len(pkt)-off)
	if plen < 0 {
		plen = 0
	}
	n := s.hdrLen + plen
	copy(dst[:s.hdrLen], pkt[:s.hdrLen])
	copy(dst[s.hdrLen:n], pkt[off:off+plen])
	var src, dstAddr []byte
	if s.v6 {
		ip := header.IPv6(dst)
		ip.SetPayloadLength(uint16(n - header.IPv6MinimumSize))
		src, dstAddr = ip.SourceAddressSlice(), ip.DestinationAddressSlice()
	} else {
		ip := header.IPv4(dst)
		ip.SetTotalLength(uint16(n))
		ip.SetID(ip.ID() + uint16(i))
		ip.SetChecksum(0)
		ip.SetChecksum(^ip.CalculateChecksum())
		src, dstAddr = ip.SourceAddressSlice(), ip.DestinationAddressSlice()
	}
	udp := header.UDP(dst[s.ipLen:n])
	udp.SetLength(uint16(n - s.ipLen))
	udp.SetChecksum(0)
	xsum := pseudoHeaderChecksum(src, dstAddr, uint16(n-s.ipLen))
	xsum = checksum.Checksum(dst[s.ipLen:n], xsum)
	c := ^xsum
	if c == 0 {
		c = 0xffff // zero means "no checksum" in UDP
	}
	udp.SetChecksum(c)
	return n
}

// size is the length of datagram i.
func (s *udpSegments) size(i int) int {
	return s.hdrLen + max(0, min(s.mss, s.total-i*s.mss))
}

// pseudoHeaderChecksum is the (unfolded, not inverted) checksum of the
// UDP pseudo-header.
func pseudoHeaderChecksum(src, dst []byte, length uint16) uint16 {
	xsum := checksum.Checksum(src, 0)
	xsum = checksum.Checksum(dst, xsum)
	xsum = checksum.Combine(xsum, uint16(header.UDPProtocolNumber))
	return checksum.Combine(xsum, length)
}

// checkGSO validates the header of a packet read from the device against
// the packet (starting at its network header, l2 bytes after the start of
// the frame). It returns whether the packet must be split (USO) before the
// stack sees it. TCP super-packets (TSO) are passed up whole: gVisor takes
// a 64 KiB segment as readily as a GRO-merged one.
func checkGSO(h *vnetHdr, l2 int, frameLen int) (split bool, err error) {
	switch h.gsoType &^ vnetGSOECNBit {
	case vnetGSONone:
		return false, nil
	case vnetGSOTCPv4, vnetGSOTCPv6:
		if h.gsoSize == 0 {
			return false, fmt.Errorf("%w: tcp gso with size 0", errBadGSO)
		}
		return false, nil
	case vnetGSOUDPL4:
		if h.gsoSize == 0 || frameLen <= l2 {
			return false, fmt.Errorf("%w: udp gso with size 0", errBadGSO)
		}
		return true, nil
	default:
		return false, fmt.Errorf("%w: gso type %d", errBadGSO, h.gsoType)
	}
}
