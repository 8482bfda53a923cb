package session

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// BoundDialer returns a dialer for Config.Dial that binds upstream
// connections to addr4 (IPv4 destinations) and addr6 (IPv6): each an
// address, or the first address of that family on the interface so named
// (slirp4netns's --outbound-addr and --outbound-addr6). It returns nil (the
// gateway's default dialer) when both are "".
func BoundDialer(addr4, addr6 string) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	if addr4 == "" && addr6 == "" {
		return nil, nil
	}
	v4, err := outboundAddr(addr4, false)
	if err != nil {
		return nil, err
	}
	v6, err := outboundAddr(addr6, true)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			src := v4
			if ap.Addr().Is6() && !ap.Addr().Is4In6() {
				src = v6
			}
			if src.IsValid() {
				switch network {
				case "tcp", "tcp4", "tcp6":
					d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
				case "udp", "udp4", "udp6":
					d.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
				}
			}
		}
		return d.DialContext(ctx, network, addr)
	}, nil
}

// outboundAddr resolves one --outbound-addr(6) value.
func outboundAddr(s string, v6 bool) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a, nil
	}
	ifc, err := net.InterfaceByName(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("outbound address %q: %w", s, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("outbound address %q: %w", s, err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() == v6 && !ip.IsLinkLocalUnicast() {
			return ip, nil
		}
	}
	fam := "IPv4"
	if v6 {
		fam = "IPv6"
	}
	return netip.Addr{}, fmt.Errorf("outbound address: interface %s has no %s address", s, fam)
}
