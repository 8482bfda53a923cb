package netstack

import (
	"encoding/binary"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// filterLink sits between the worker's link endpoint and the stack. Every
// inbound packet passes its inspector before the stack sees it: malformed
// packets are counted and dropped, ICMP other than echo to the gateway and
// every IP protocol other than TCP and UDP are refused with ICMP
// "administratively prohibited", and only the rest reaches gVisor. This is
// what keeps a promiscuous stack from answering echo for any address,
// and ARP requests other than for the gateway's own IPv4 addresses are
// dropped, which keeps it from answering ARP for any address (gVisor
// answers a request for every address a promiscuous NIC accepts; IPv6
// neighbour solicitations it answers only for assigned addresses).
//
// Outbound packets pass through unchanged. DeliverNetworkPacket may be
// called concurrently (tun.Endpoint delivers from one reader, but test
// links may use several goroutines); the filter keeps no per-packet state.
type filterLink struct {
	nested.Endpoint
	g    *Gateway
	insp *inspector
	// dhcp: answer DHCPv4 requests (dhcp.go) before the inspector,
	// which refuses their source 0.0.0.0. Set before the link is attached.
	dhcp bool
}

var _ stack.NetworkDispatcher = (*filterLink)(nil)

func newFilterLink(child stack.LinkEndpoint, g *Gateway, insp *inspector) *filterLink {
	l := &filterLink{g: g, insp: insp}
	l.Endpoint.Init(child, l)
	return l
}

// DeliverNetworkPacket implements stack.NetworkDispatcher. The caller keeps
// its reference to pkt.
func (l *filterLink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	g := l.g
	g.stats.packetsIn.Add(1)
	if proto == header.ARPProtocolNumber {
		if l.insp.l2 && l.insp.arpForUs(pkt.Data()) {
			l.Endpoint.DeliverNetworkPacket(proto, pkt)
		} else {
			g.stats.dropped.Add(1)
		}
		return
	}
	if l.dhcp && g.serveDHCP(pkt.Data()) {
		return
	}
	v := l.insp.inspect(pkt.Data())
	switch v.act {
	case actPass:
		np := header.IPv4ProtocolNumber
		if v.v6 {
			np = header.IPv6ProtocolNumber
		}
		if proto != 0 && proto != np {
			// An L2 frame whose EtherType disagrees with its content.
			g.stats.malformed.Add(1)
			return
		}
		l.Endpoint.DeliverNetworkPacket(np, pkt)
	case actDrop:
		g.stats.dropped.Add(1)
	case actMalformed:
		g.stats.malformed.Add(1)
		g.logPacket(v)
	case actDeny:
		g.stats.packetsRefused.Add(1)
		g.logPacket(v)
	case actMapped:
		g.refuseMapped(v, pkt.Data())
	case actRefuse:
		g.stats.packetsRefused.Add(1)
		max := maxQuote4
		if v.v6 {
			max = maxQuote6
		}
		quote := pkt.Data().AsRange().Capped(max).ToSlice()
		g.sendProhibited(v.v6, v.src, quote)
		g.logPacket(v)
	}
}

// logPacket records a packet the filter did not pass on.
func (g *Gateway) logPacket(v verdict) {
	ev := audit.Packet{Action: "deny", Proto: protoName(v.proto), Reason: v.reason}
	if v.act == actMalformed {
		ev.Proto = "ip"
		if v.v6 {
			ev.Proto = "ipv6"
		}
	}
	if v.src.IsValid() {
		ev.Src = v.src.String()
	}
	if v.dst.IsValid() {
		ev.Dst = v.dst.String()
	}
	g.audit.Log(ev)
}

// refuseMapped refuses TCP or UDP over IPv6 to an IPv4-mapped address
// (::ffff:a.b.c.d), which the stack would drop without a trace. A new TCP
// connection or a UDP datagram is decided as a flow, so the record names
// the rule (e.g. builtin:metadata for ::ffff:169.254.169.254); since the
// stack cannot carry such a flow it is refused even when the policy would
// allow it. TCP gets a RST, UDP ICMP administratively prohibited.
func (g *Gateway) refuseMapped(v verdict, d packetData) {
	hdrLen := 8
	proto := policy.UDP
	if v.proto == protoTCP {
		hdrLen, proto = 20, policy.TCP
	}
	b, ok := d.PullUp(v.thOff + hdrLen)
	if !ok {
		g.stats.malformed.Add(1)
		v.act, v.reason = actMalformed, "malformed: truncated transport header"
		g.logPacket(v)
		return
	}
	th := b[v.thOff:]
	src := netip.AddrPortFrom(v.src, binary.BigEndian.Uint16(th[0:2]))
	dst := netip.AddrPortFrom(v.dst, binary.BigEndian.Uint16(th[2:4]))
	isNew := proto == policy.UDP || th[13]&(tcpSYN|tcpACK|tcpRST) == tcpSYN
	if isNew {
		p := plan{proto: proto, src: src, dst: dst}
		p.d = g.decideOne(policy.Flow{Proto: proto, Addr: dst.Addr(), Port: dst.Port()})
		if p.d.Verdict == policy.Allow {
			p.fail("ipv4-mapped destination over ipv6 is not routed; connect over ipv4")
		}
		g.countDecision(&p)
		g.record(&p, dst)
	} else {
		g.stats.dropped.Add(1)
	}
	if proto == policy.UDP {
		quote, _ := d.PullUp(min(d.Size(), maxQuote6))
		g.sendProhibited(true, v.src, append([]byte(nil), quote...))
		return
	}
	seg, _ := d.PullUp(d.Size())
	if rst := tcpReset6(v.src, v.dst, seg[v.thOff:]); rst != nil {
		if err := g.writeIP(header.IPv6ProtocolNumber, v.src, rst); err != nil {
			g.stats.icmpErrors.Add(1)
		}
	}
}

// arpForUs reports whether an ARP packet may reach the stack: a request
// only when its target is the gateway's own IPv4 address, the DNS address
// or the host alias (pasta's --map-guest-addr); a reply (the worker's own answer to the gateway's request)
// always. A packet too short to be Ethernet/IPv4 ARP is not.
func (in *inspector) arpForUs(d packetData) bool {
	b, ok := d.PullUp(header.ARPSize)
	if !ok {
		return false
	}
	a := header.ARP(b)
	if !a.IsValid() {
		return false
	}
	if a.Op() != header.ARPRequest {
		return true
	}
	t := netip.AddrFrom4([4]byte(a.ProtocolAddressTarget()))
	return t == in.gw4 || t == in.dns4 || in.alias4.IsValid() && t == in.alias4
}
