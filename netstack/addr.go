package netstack

import (
	"net/netip"
)

// The default address plan, slirp4netns's: the worker is .100 in a /24 (and
// ::100 in a /64), the gateway .2, the DNS server .3. The fake-IP pools are
// where dns/ allocates the addresses that stand for names.
const (
	DefaultPrefix4 = "10.0.2.0/24"
	DefaultPrefix6 = "fd00::/64"

	Guest4   = "10.0.2.100"
	Gateway4 = "10.0.2.2"
	DNS4     = "10.0.2.3"

	Guest6   = "fd00::100"
	Gateway6 = "fd00::2"
	DNS6     = "fd00::3"

	FakePool4 = "198.18.0.0/15"
	FakePool6 = "fd6e:7367:6174::/64"
)

// Host numbers inside a Network's prefixes. The worker is 10.0.2.100 but
// fd00::100 (hexadecimal), as with slirp4netns.
const (
	hostGateway = 0x2
	hostDNS     = 0x3
	hostGuest4  = 100
	hostGuest6  = 0x100
)

// Network is the worker's address plan: one IPv4 and one IPv6 prefix. The
// gateway is host 2, the DNS server host 3 of each prefix, and the worker
// host 100 (IPv4) and ::100 (IPv6). The zero value means DefaultNetwork.
type Network struct {
	Prefix4 netip.Prefix // e.g. 10.0.2.0/24; /25 or shorter, so host 100 fits
	Prefix6 netip.Prefix // e.g. fd00::/64; /112 or shorter
}

// DefaultNetwork returns 10.0.2.0/24 and fd00::/64.
func DefaultNetwork() Network {
	return Network{
		Prefix4: netip.MustParsePrefix(DefaultPrefix4),
		Prefix6: netip.MustParsePrefix(DefaultPrefix6),
	}
}

// FakePools returns the fake-IP pools 198.18.0.0/15 and fd6e:7367:6174::/64.
func FakePools() (v4, v6 netip.Prefix) {
	return netip.MustParsePrefix(FakePool4), netip.MustParsePrefix(FakePool6)
}

func (n Network) withDefaults() Network {
	d := DefaultNetwork()
	if !n.Prefix4.IsValid() {
		n.Prefix4 = d.Prefix4
	}
	if !n.Prefix6.IsValid() {
		n.Prefix6 = d.Prefix6
	}
	n.Prefix4 = n.Prefix4.Masked()
	n.Prefix6 = n.Prefix6.Masked()
	return n
}

func (n Network) valid() bool {
	return n.Prefix4.Addr().Is4() && n.Prefix4.Bits() <= 25 &&
		n.Prefix6.Addr().Is6() && !n.Prefix6.Addr().Is4In6() && n.Prefix6.Bits() <= 112
}

// host returns the address with host number h in p.
func host(p netip.Prefix, h uint16) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	b[len(b)-2] |= byte(h >> 8)
	b[len(b)-1] |= byte(h)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Gateway4 returns the gateway's IPv4 address (10.0.2.2 by default).
func (n Network) Gateway4() netip.Addr { return host(n.withDefaults().Prefix4, hostGateway) }

// DNS4 returns the DNS server's IPv4 address (10.0.2.3 by default).
func (n Network) DNS4() netip.Addr { return host(n.withDefaults().Prefix4, hostDNS) }

// Guest4 returns the worker's IPv4 address (10.0.2.100 by default).
func (n Network) Guest4() netip.Addr { return host(n.withDefaults().Prefix4, hostGuest4) }

// Gateway6 returns the gateway's IPv6 address (fd00::2 by default).
func (n Network) Gateway6() netip.Addr { return host(n.withDefaults().Prefix6, hostGateway) }

// DNS6 returns the DNS server's IPv6 address (fd00::3 by default).
func (n Network) DNS6() netip.Addr { return host(n.withDefaults().Prefix6, hostDNS) }

// Guest6 returns the worker's IPv6 address (fd00::100 by default).
func (n Network) Guest6() netip.Addr { return host(n.withDefaults().Prefix6, hostGuest6) }

// broadcast4 returns the directed broadcast address of the IPv4 prefix.
func (n Network) broadcast4() netip.Addr {
	p := n.Prefix4
	b := p.Addr().As4()
	bits := p.Bits()
	for i := 0; i < 4; i++ {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	return netip.AddrFrom4(b)
}

// guestSource reports whether a may be the source of a packet from the
// worker: an address of its own prefix other than the network, broadcast,
// gateway and DNS addresses.
func (n Network) guestSource(a netip.Addr) bool {
	if a.Is4() {
		if !n.Prefix4.Contains(a) {
			return false
		}
		return a != n.Prefix4.Addr() && a != n.broadcast4() &&
			a != host(n.Prefix4, hostGateway) && a != host(n.Prefix4, hostDNS)
	}
	if !n.Prefix6.Contains(a) {
		return false
	}
	return a != n.Prefix6.Addr() && a != host(n.Prefix6, hostGateway) && a != host(n.Prefix6, hostDNS)
}
