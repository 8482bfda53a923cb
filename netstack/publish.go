package netstack

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
)

// DialGuest opens a connection to a port of the worker, for inbound
// forwards (--publish, the slirp4netns API's add_hostfwd). network is
// "tcp" or "udp"; guest must be one of the worker's addresses; client is
// the host-side client's address (invalid when unknown). As under
// libslirp, the worker sees the connection come from the client's own
// address when that can be told apart from the worker's network, and from
// the gateway (10.0.2.2 or fd00::2) otherwise: a client on the host's
// loopback (127.0.0.1 would name the worker's own loopback), one whose
// address is in the worker's network or nsgate's fake-IP range, or one of
// the other address family (InboundSource). Safe for concurrent use;
// blocks until the worker answers the handshake or ctx is done. Once the
// audit log has failed it refuses (auditgate.go).
func (g *Gateway) DialGuest(ctx context.Context, network string, client netip.Addr, guest netip.AddrPort) (net.Conn, error) {
	if g.auditDown() {
		return nil, fmt.Errorf("dial guest %s: %s", guest, auditFailedReason)
	}
	a := guest.Addr().Unmap()
	proto := ipv4.ProtocolNumber
	switch {
	case a == g.net.Guest4():
	case g.ipv6 && a == g.net.Guest6():
		proto = ipv6.ProtocolNumber
	default:
		return nil, fmt.Errorf("dial guest %s: not the worker's address", guest)
	}
	// The NIC spoofs (gateway.go): the stack sends from any address, and
	// the worker's answers to it come back to this endpoint.
	src := InboundSource(g.net, client, proto == ipv6.ProtocolNumber)
	local := tcpip.FullAddress{NIC: g.nic, Addr: tcpip.AddrFromSlice(src.AsSlice())}
	remote := tcpip.FullAddress{NIC: g.nic, Addr: tcpip.AddrFromSlice(a.AsSlice()), Port: guest.Port()}
	switch network {
	case "tcp":
		c, err := gonet.DialTCPWithBind(ctx, g.stack, local, remote, proto)
		if err != nil {
			return nil, fmt.Errorf("dial guest %s: %w", guest, err)
		}
		return c, nil
	case "udp":
		c, err := gonet.DialUDP(g.stack, &local, &remote, proto)
		if err != nil {
			return nil, fmt.Errorf("dial guest %s: %w", guest, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("dial guest: unknown network %q", network)
}

// InboundSource is the source address the worker sees for an inbound
// connection from client (see DialGuest): the client's own address, or
// the gateway's of the worker's family.
func InboundSource(n Network, client netip.Addr, v6 bool) netip.Addr {
	n = n.WithDefaults()
	c := client.Unmap()
	gw, prefix, pool := n.Gateway4(), n.Prefix4, n.FakePool4()
	if v6 {
		gw, prefix, pool = n.Gateway6(), n.Prefix6, n.FakePool6()
	}
	switch {
	case !c.IsValid(), c.Is6() != v6, c.IsLoopback(), c.IsUnspecified(), c.IsMulticast(),
		c.IsLinkLocalUnicast(), c == netip.AddrFrom4([4]byte{255, 255, 255, 255}),
		prefix.Contains(c), pool.Contains(c):
		return gw
	}
	return c
}
