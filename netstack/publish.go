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

// DialGuest opens a connection from the gateway's own address to a port
// of the worker, for inbound forwards (--publish, the slirp4netns API's
// add_hostfwd). network is "tcp" or "udp"; guest must be one of the
// worker's addresses. The worker sees the connection come from the
// gateway (10.0.2.2 or fd00::2). Safe for concurrent use; blocks until the
// worker answers the handshake or ctx is done. Once the audit log has
// failed it refuses (auditgate.go).
func (g *Gateway) DialGuest(ctx context.Context, network string, guest netip.AddrPort) (net.Conn, error) {
	if g.auditDown() {
		return nil, fmt.Errorf("dial guest %s: %s", guest, auditFailedReason)
	}
	a := guest.Addr().Unmap()
	var src netip.Addr
	proto := ipv4.ProtocolNumber
	switch {
	case a == g.net.Guest4():
		src = g.net.Gateway4()
	case g.ipv6 && a == g.net.Guest6():
		src, proto = g.net.Gateway6(), ipv6.ProtocolNumber
	default:
		return nil, fmt.Errorf("dial guest %s: not the worker's address", guest)
	}
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
