// Package netplan is nsgate's address plan: the one place that says which
// addresses the worker, the gateway and the DNS server have, which pools
// stand for names, which prefixes nsgate must never dial and what the
// worker's resolv.conf says. Every mode (`nsgate run`, `nsgate
// slirp4netns`), the gateway (netstack/), the DNS server (dns/), the
// slirp4netns command line (slirp/) and the lab take their addresses from
// a [Plan] instead of writing them down again.
//
// The default plan is slirp4netns's:
//
//	worker   10.0.2.100/24    fd00::100/64
//	gateway  10.0.2.2         fd00::2
//	DNS      10.0.2.3         fd00::3
//	names    198.18.0.0/15    fd6e:7367:6174::/64  (the fake-IP pools)
//
// A plan may instead name its IPv4 addresses outright ([Fixed]): `nsgate
// pasta` gives the worker the host's own address and the host's gateway,
// as pasta does, with DNS on Podman's --dns-forward address and the host
// reachable at its --map-guest-addr address ([Plan.HostAlias4]).
//
// The package is a leaf on purpose: it imports only net/netip and the
// standard library, so that every other package can import it without a
// cycle, it does no I/O, and it can be read and tested on its own.
package netplan

import (
	"fmt"
	"net/netip"
	"strings"
)

// The literals of the default plan: written here and nowhere else.
const (
	defaultPrefix4 = "10.0.2.0/24"
	defaultPrefix6 = "fd00::/64"
	fakePool4      = "198.18.0.0/15"
	fakePool6      = "fd6e:7367:6174::/64"
)

// Host numbers inside a plan's prefixes, slirp4netns's offsets. The worker
// is host 100 of the IPv4 prefix but ::100 (hexadecimal) of the IPv6 one.
const (
	hostGateway = 0x2
	hostDNS     = 0x3
	hostGuest4  = 100
	hostGuest6  = 0x100
)

// Limits on the prefixes, so that every host number above fits.
const (
	// MaxBits4 is the longest IPv4 prefix a plan may have: host 100 must
	// fit (a /25 holds hosts 0 to 127).
	MaxBits4 = 25
	// MaxBits6 is the longest IPv6 prefix a plan may have: host ::100
	// must fit in the last 16 bits.
	MaxBits6 = 112
)

// Plan is the worker's network: one IPv4 and one IPv6 prefix. In each, the
// gateway is host 2 and the DNS server host 3; the worker is host 100 of
// the IPv4 prefix and host ::100 of the IPv6 one. The fake-IP pools are the
// same for every plan.
//
// A prefix that is not set (the zero netip.Prefix) means the default's, so
// the zero Plan is [Default]; every method applies the defaults and masks
// the prefixes first, so Plan{Prefix4: 10.0.2.100/24} is the same plan as
// Plan{Prefix4: 10.0.2.0/24}. The addresses are meaningful only for a plan
// that passes [Plan.Check]. A Plan is plain data, safe to copy and compare
// (after [Plan.WithDefaults]).
type Plan struct {
	Prefix4 netip.Prefix // e.g. 10.0.2.0/24; /25 or shorter (MaxBits4)
	Prefix6 netip.Prefix // e.g. fd00::/64; /112 or shorter (MaxBits6)
	// Fixed4, when set, names the IPv4 addresses outright instead of
	// host numbers in Prefix4 (then any prefix length will do).
	Fixed4 Fixed
	// HostAlias4, when set, is an address at which the worker reaches
	// the host itself (pasta's --map-guest-addr): a flow there is
	// decided and dialled as a flow to the host's loopback address (see
	// HostSide), so the policy governs it like any other.
	HostAlias4 netip.Addr
}

// Fixed names a plan's addresses of one family outright: all three set,
// or none (the zero Fixed: host numbers). Guest must be in the plan's
// prefix; Gateway may be outside it (the worker's default route then
// reaches it on-link, as on a host whose address is a /32), and DNS may be
// anywhere (pasta's --dns-forward is a link-local address outside every
// prefix). The three differ from each other.
type Fixed struct {
	Guest, Gateway, DNS netip.Addr
}

// IsZero reports whether f names no address (the plan uses host numbers).
func (f Fixed) IsZero() bool { return f == Fixed{} }

// Default returns the default plan: 10.0.2.0/24 and fd00::/64.
func Default() Plan {
	return Plan{
		Prefix4: netip.MustParsePrefix(defaultPrefix4),
		Prefix6: netip.MustParsePrefix(defaultPrefix6),
	}
}

// WithDefaults returns p with each unset prefix replaced by the default's
// and both prefixes masked to their network address.
func (p Plan) WithDefaults() Plan {
	d := Default()
	if !p.Prefix4.IsValid() {
		p.Prefix4 = d.Prefix4
	}
	if !p.Prefix6.IsValid() {
		p.Prefix6 = d.Prefix6
	}
	p.Prefix4 = p.Prefix4.Masked()
	p.Prefix6 = p.Prefix6.Masked()
	return p
}

// Check reports whether p (after WithDefaults) is a usable plan: Prefix4
// an IPv4 prefix of /25 or shorter, Prefix6 an IPv6 prefix (not an
// IPv4-mapped one) of /112 or shorter, and neither overlapping a fake-IP
// pool (a worker address there would look like a name). The error says
// "bad network V4 V6: ..." with the defaulted prefixes.
func (p Plan) Check() error {
	p = p.WithDefaults()
	bits4ok := p.Prefix4.Bits() <= MaxBits4 || !p.Fixed4.IsZero()
	if !p.Prefix4.Addr().Is4() || !bits4ok ||
		!p.Prefix6.Addr().Is6() || p.Prefix6.Addr().Is4In6() || p.Prefix6.Bits() > MaxBits6 {
		return fmt.Errorf("bad network %v %v: want an IPv4 prefix of /%d or shorter and an IPv6 prefix of /%d or shorter", p.Prefix4, p.Prefix6, MaxBits4, MaxBits6)
	}
	for _, pair := range [][2]netip.Prefix{{p.Prefix4, p.FakePool4()}, {p.Prefix6, p.FakePool6()}} {
		if pair[0].Overlaps(pair[1]) {
			return fmt.Errorf("bad network %v %v: %v overlaps nsgate's fake-IP range %v", p.Prefix4, p.Prefix6, pair[0], pair[1])
		}
	}
	if err := p.checkFixed4(); err != nil {
		return err
	}
	if a := p.HostAlias4; a.IsValid() {
		if err := usable4("host alias", a); err != nil {
			return err
		}
		if p.Prefix4.Contains(a) || a == p.Gateway4() || a == p.DNS4() || p.FakePool4().Contains(a) {
			return fmt.Errorf("bad host alias %v: it is in the worker's network %v, is its gateway or DNS address, or is in the fake-IP range", a, p.Prefix4)
		}
	}
	return nil
}

// checkFixed4 checks p.Fixed4 (p already WithDefaults).
func (p Plan) checkFixed4() error {
	f := p.Fixed4
	if f.IsZero() {
		return nil
	}
	for _, a := range []struct {
		what string
		a    netip.Addr
	}{{"guest", f.Guest}, {"gateway", f.Gateway}, {"DNS", f.DNS}} {
		if err := usable4(a.what, a.a); err != nil {
			return err
		}
		if p.FakePool4().Contains(a.a) {
			return fmt.Errorf("bad %s address %v: in nsgate's fake-IP range %v", a.what, a.a, p.FakePool4())
		}
	}
	if !p.Prefix4.Contains(f.Guest) {
		return fmt.Errorf("bad guest address %v: not in the network %v", f.Guest, p.Prefix4)
	}
	if f.Guest == f.Gateway || f.Guest == f.DNS || f.Gateway == f.DNS {
		return fmt.Errorf("bad addresses: guest %v, gateway %v and DNS %v must differ", f.Guest, f.Gateway, f.DNS)
	}
	return nil
}

// usable4 reports whether a may be one of a plan's IPv4 addresses: a
// unicast IPv4 address, not loopback, unspecified, multicast or the
// limited broadcast.
func usable4(what string, a netip.Addr) error {
	if !a.Is4() || a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("bad %s address %v: want a unicast IPv4 address", what, a)
	}
	return nil
}

// ParseCIDR returns the plan of a slirp4netns --cidr value: its IPv4
// prefix, with the default IPv6 prefix (slirp4netns has no flag for it).
// It applies slirp4netns 1.2.0's parse_cidr rules with its messages: a
// dotted quad, "/", a prefix length of 1 to 25 (the worker is host 100),
// and a network address (10.0.2.0/24, not 10.0.2.100/24). One rule is
// nsgate's own: the prefix must not overlap the IPv4 fake-IP pool
// ("--cidr ... overlaps nsgate's fake-IP range ..."). The error is one
// line with no prefix; the plan returned without error passes Check.
func ParseCIDR(cidr string) (Plan, error) {
	addr, bits, ok := strings.Cut(cidr, "/")
	if !ok || !dottedQuadShape(addr) || len(bits) < 1 || len(bits) > 2 || strings.Trim(bits, "0123456789") != "" {
		return Plan{}, fmt.Errorf("invalid CIDR: %s", printable(cidr))
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is4() {
		return Plan{}, fmt.Errorf("invalid network address: %s", printable(addr))
	}
	n := int(bits[0] - '0')
	if len(bits) == 2 {
		n = n*10 + int(bits[1]-'0')
	}
	if n < 1 || n > MaxBits4 {
		return Plan{}, fmt.Errorf("prefix length needs to be 1-%d", MaxBits4)
	}
	pfx := netip.PrefixFrom(a, n)
	if pfx.Masked().Addr() != a {
		d := Default()
		return Plan{}, fmt.Errorf("CIDR needs to be a network address like %s, not like %s", d.Prefix4, d.GuestPrefix4())
	}
	p := Plan{Prefix4: pfx, Prefix6: Default().Prefix6}
	if pool := p.FakePool4(); pfx.Overlaps(pool) {
		return Plan{}, fmt.Errorf("--cidr %s overlaps nsgate's fake-IP range %s: choose another network", pfx, pool)
	}
	return p, nil
}

// dottedQuadShape matches ([0-9]{1,3}\.){3}[0-9]{1,3}.
func dottedQuadShape(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if len(p) < 1 || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// printable quotes s for an error message without the quotes: control
// bytes and invalid UTF-8 come out escaped.
func printable(s string) string {
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

// host returns the address with host number h in the masked prefix p.
func host(p netip.Prefix, h uint16) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	b[len(b)-2] |= byte(h >> 8)
	b[len(b)-1] |= byte(h)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Gateway4 returns the gateway's IPv4 address: Fixed4.Gateway, else host
// 2 (10.0.2.2 by default).
func (p Plan) Gateway4() netip.Addr {
	if !p.Fixed4.IsZero() {
		return p.Fixed4.Gateway
	}
	return host(p.WithDefaults().Prefix4, hostGateway)
}

// DNS4 returns the DNS server's IPv4 address: Fixed4.DNS, else host 3
// (10.0.2.3 by default).
func (p Plan) DNS4() netip.Addr {
	if !p.Fixed4.IsZero() {
		return p.Fixed4.DNS
	}
	return host(p.WithDefaults().Prefix4, hostDNS)
}

// Guest4 returns the worker's IPv4 address: Fixed4.Guest, else host 100
// (10.0.2.100 by default).
func (p Plan) Guest4() netip.Addr {
	if !p.Fixed4.IsZero() {
		return p.Fixed4.Guest
	}
	return host(p.WithDefaults().Prefix4, hostGuest4)
}

// Gateway6 returns the gateway's IPv6 address, host ::2 (fd00::2 by
// default).
func (p Plan) Gateway6() netip.Addr { return host(p.WithDefaults().Prefix6, hostGateway) }

// DNS6 returns the DNS server's IPv6 address, host ::3 (fd00::3 by
// default).
func (p Plan) DNS6() netip.Addr { return host(p.WithDefaults().Prefix6, hostDNS) }

// Guest6 returns the worker's IPv6 address, host ::100 (fd00::100 by
// default).
func (p Plan) Guest6() netip.Addr { return host(p.WithDefaults().Prefix6, hostGuest6) }

// GuestPrefix4 returns the worker's IPv4 address with the prefix length,
// what its interface carries (10.0.2.100/24 by default).
func (p Plan) GuestPrefix4() netip.Prefix {
	return netip.PrefixFrom(p.Guest4(), p.WithDefaults().Prefix4.Bits())
}

// GuestPrefix6 returns the worker's IPv6 address with the prefix length
// (fd00::100/64 by default).
func (p Plan) GuestPrefix6() netip.Prefix {
	return netip.PrefixFrom(p.Guest6(), p.WithDefaults().Prefix6.Bits())
}

// Broadcast4 returns the directed broadcast address of the IPv4 prefix
// (10.0.2.255 by default); a /31 or /32 has none (the zero Addr).
func (p Plan) Broadcast4() netip.Addr {
	pfx := p.WithDefaults().Prefix4
	if pfx.Bits() >= 31 {
		return netip.Addr{}
	}
	b := pfx.Addr().As4()
	for i := pfx.Bits(); i < 32; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom4(b)
}

// GuestSource reports whether a may be the source of a packet from the
// worker: the worker's own two addresses (Guest4, Guest6) and nothing
// else. Other hosts of the plan's prefixes are refused too: a container
// with CAP_NET_RAW or CAP_NET_ADMIN (Podman's root) could otherwise use
// them to make flows that are not its own, e.g. spoofed SYNs that each
// become an upstream connection. An IPv4-mapped IPv6 address is not
// unmapped: it is never a source.
func (p Plan) GuestSource(a netip.Addr) bool {
	p = p.WithDefaults()
	return a == p.Guest4() || a == p.Guest6()
}

// HostSide returns what the gateway decides and dials for a flow the
// worker sent to a: the host's loopback address 127.0.0.1 for the plan's
// HostAlias4, else a itself. ok says a was the alias.
func (p Plan) HostSide(a netip.Addr) (to netip.Addr, ok bool) {
	if p.HostAlias4.IsValid() && a == p.HostAlias4 {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
	}
	return a, false
}

// FakePool4 returns the IPv4 pool of the fake addresses that stand for
// names, 198.18.0.0/15 (the same for every plan).
func (p Plan) FakePool4() netip.Prefix { return netip.MustParsePrefix(fakePool4) }

// FakePool6 returns the IPv6 pool of the fake addresses that stand for
// names, fd6e:7367:6174::/64 (the same for every plan).
func (p Plan) FakePool6() netip.Prefix { return netip.MustParsePrefix(fakePool6) }

// InFakePool reports whether a lies in one of the fake-IP pools (an
// IPv4-mapped a by its IPv4 address). The pools are the same in every
// plan, so this is also where another nsgate's fake addresses lie.
func (p Plan) InFakePool(a netip.Addr) bool {
	a = a.Unmap()
	return p.FakePool4().Contains(a) || p.FakePool6().Contains(a)
}

// Local returns the prefixes nsgate must never dial, whatever a policy
// allows: its own two prefixes (masked) and the two fake-IP pools, in
// that order. It is what the modes hand to the policy's WithLocal. With
// Fixed4 the IPv4 prefix is the host's own network, which the policy
// governs like any other; then the worker's, the gateway's and the DNS
// server's addresses (and the host alias, when set) are guarded one by
// one instead, as /32s in that order. The slice is new on each call; the
// caller may keep or change it.
func (p Plan) Local() []netip.Prefix {
	p = p.WithDefaults()
	if p.Fixed4.IsZero() {
		return []netip.Prefix{p.Prefix4, p.Prefix6, p.FakePool4(), p.FakePool6()}
	}
	var l []netip.Prefix
	for _, a := range []netip.Addr{p.Fixed4.Guest, p.Fixed4.Gateway, p.Fixed4.DNS, p.HostAlias4} {
		if a.IsValid() {
			l = append(l, netip.PrefixFrom(a, 32))
		}
	}
	return append(l, p.Prefix6, p.FakePool4(), p.FakePool6())
}

// ResolvConf returns the worker's /etc/resolv.conf: a nameserver line for
// the IPv4 DNS address, and one for the IPv6 DNS address when ipv6 is
// set; each line ends in "\n". By default:
//
//	nameserver 10.0.2.3
//	nameserver fd00::3
func (p Plan) ResolvConf(ipv6 bool) string {
	s := "nameserver " + p.DNS4().String() + "\n"
	if ipv6 {
		s += "nameserver " + p.DNS6().String() + "\n"
	}
	return s
}
