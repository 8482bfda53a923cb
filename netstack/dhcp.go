package netstack

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// A DHCPv4 server for a TAP (Config.DHCP), as slirp4netns has one: a
// guest that asks (udhcpc, dhclient, a VM's firmware) gets the one
// address the gateway accepts as the worker's source, the network's mask,
// the gateway as router and the DNS address as name server. Nothing else
// is leased: a second client asking gets the same address, which the
// gateway serves for whichever of them uses it (as with a static -c
// set-up). The exchange never leaves the gateway and decides nothing, so
// it is counted (Stats.DHCPReplies) but not recorded.

// dhcpLease is the lease time offered; libslirp offers a day too.
const dhcpLease = 24 * time.Hour

// DHCP's ports.
const (
	dhcpServerPort = 67
	dhcpClientPort = 68
)

// serveDHCP answers d if it is a DHCPv4 request to the server port, and
// reports whether it was one (handled: answered or dropped as unusable).
// Anything else is left to the inspector.
func (g *Gateway) serveDHCP(d packetData) bool {
	h, ok := d.PullUp(20)
	if !ok || h[0]>>4 != 4 || h[9] != protoUDP {
		return false
	}
	ihl := int(h[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(h[2:4]))
	if ihl < 20 || total > d.Size() || total < ihl+8 || binary.BigEndian.Uint16(h[6:8])&0x3fff != 0 {
		return false // malformed or a fragment: the inspector decides
	}
	b, ok := d.PullUp(total)
	if !ok || binary.BigEndian.Uint16(b[ihl+2:ihl+4]) != dhcpServerPort ||
		binary.BigEndian.Uint16(b[ihl:ihl+2]) != dhcpClientPort {
		return false
	}
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	if dst != netip.AddrFrom4([4]byte{255, 255, 255, 255}) && dst != g.net.Gateway4() {
		return false
	}
	req, err := dhcpv4.FromBytes(b[ihl+8 : total])
	if err != nil || req.OpCode != dhcpv4.OpcodeBootRequest {
		g.stats.malformed.Add(1)
		return true
	}
	reply := g.dhcpReply(req)
	if reply == nil {
		g.stats.dropped.Add(1)
		return true
	}
	pkt := udp4Packet(g.net.Gateway4(), netip.AddrFrom4([4]byte{255, 255, 255, 255}), dhcpServerPort, dhcpClientPort, reply.ToBytes())
	if err := g.writeIP(header.IPv4ProtocolNumber, netip.AddrFrom4([4]byte{255, 255, 255, 255}), pkt); err != nil {
		g.stats.dropped.Add(1)
		return true
	}
	g.stats.dhcpReplies.Add(1)
	return true
}

// dhcpReply is the answer to req: an offer for a discover, an ack (or a
// nak for another address or server) for a request, an ack without an
// address for an inform; nil for anything else (release, decline).
func (g *Gateway) dhcpReply(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	guest := net.IP(g.net.Guest4().AsSlice())
	gw := net.IP(g.net.Gateway4().AsSlice())
	var typ dhcpv4.MessageType
	yours := guest
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		typ = dhcpv4.MessageTypeAck
		want := req.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = req.ClientIPAddr
		}
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(gw) {
			return nil // the client chose another server
		}
		if want != nil && !want.IsUnspecified() && !want.Equal(guest) {
			typ = dhcpv4.MessageTypeNak
		}
	case dhcpv4.MessageTypeInform:
		typ, yours = dhcpv4.MessageTypeAck, net.IPv4zero
	default:
		return nil
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithServerIP(gw),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(gw)),
	}
	if typ != dhcpv4.MessageTypeNak {
		mods = append(mods,
			dhcpv4.WithYourIP(yours),
			dhcpv4.WithNetmask(net.CIDRMask(g.net.Prefix4.Bits(), 32)),
			dhcpv4.WithRouter(gw),
		)
		if yours.Equal(guest) {
			mods = append(mods, dhcpv4.WithLeaseTime(uint32(dhcpLease/time.Second)))
		}
		if g.names != nil {
			mods = append(mods, dhcpv4.WithDNS(net.IP(g.net.DNS4().AsSlice())))
		}
	}
	reply, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil
	}
	return reply
}

// udp4Packet builds an IPv4 packet carrying one UDP datagram.
func udp4Packet(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(b)),
		TTL:         64,
		Protocol:    uint8(header.UDPProtocolNumber),
		SrcAddr:     tcpip.AddrFrom4(src.As4()),
		DstAddr:     tcpip.AddrFrom4(dst.As4()),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(b[header.IPv4MinimumSize:])
	u.Encode(&header.UDPFields{SrcPort: sport, DstPort: dport, Length: uint16(header.UDPMinimumSize + len(payload))})
	copy(u.Payload(), payload)
	sum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), u.Length())
	sum = checksum.Checksum(payload, sum)
	u.SetChecksum(^u.CalculateChecksum(sum))
	return b
}
