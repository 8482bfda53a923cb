package policy

import (
	"net/netip"
	"slices"
)

// HostAddrs is a set of the host's own addresses: those on the interfaces
// of the network namespace the gateway dials from, other than loopback,
// and the prefixes it routes as local on them (netstack reads them). A flow to one of them reaches whatever listens on
// the host's wildcard address, so WithHostAddrs guards each as a special
// range of its own. A HostAddrs is immutable and safe for concurrent use;
// the zero value and nil are the empty set.
type HostAddrs struct {
	list []netip.Addr // sorted, unique, unmapped, zone-free
	// prefixes the host routes as local without holding an address in
	// them (NewHostAddrsRouted), masked, sorted.
	prefixes []netip.Prefix
	// unknown, when set, says why the addresses could not be read: then
	// any address may be one of them (UnknownHostAddrs).
	unknown string
}

// UnknownHostAddrs returns the set of a host whose addresses could not be
// read (why says why): any address may be the host's own, so a policy
// guarding it (WithHostAddrs) treats every address as one, each a special
// range of its own, and a flow to an address is allowed only by a rule
// naming exactly that address or by dns.hosts. The gateway uses it when a
// re-read after an announced change fails: the last set read may lack
// the address the host just gained, and the guard fails closed.
func UnknownHostAddrs(why string) *HostAddrs {
	if why == "" {
		why = "unknown error"
	}
	return &HostAddrs{unknown: why}
}

// Unknown says why the set's addresses could not be read; "" for a set
// that was read.
func (h *HostAddrs) Unknown() string {
	if h == nil {
		return ""
	}
	return h.unknown
}

// NewHostAddrs returns the set of addrs: IPv4-mapped addresses are read as
// IPv4, zones are dropped, invalid and unspecified addresses are ignored.
func NewHostAddrs(addrs []netip.Addr) *HostAddrs {
	h := &HostAddrs{}
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if a.IsValid() && !a.IsUnspecified() {
			h.list = append(h.list, a)
		}
	}
	slices.SortFunc(h.list, netip.Addr.Compare)
	h.list = slices.Compact(h.list)
	return h
}

// NewHostAddrsRouted is NewHostAddrs(addrs) together with the prefixes
// the host routes as local (its routing table's "local" routes, such as
// an AnyIP "ip route add local 198.51.100.0/24 dev eth0"): every address
// in one reaches the host's own services too. A prefix as long as its
// address is an address; an invalid prefix is ignored.
func NewHostAddrsRouted(addrs []netip.Addr, prefixes []netip.Prefix) *HostAddrs {
	for _, p := range prefixes {
		if p.IsValid() && p.IsSingleIP() {
			addrs = append(addrs, p.Addr())
		}
	}
	h := NewHostAddrs(addrs)
	for _, p := range prefixes {
		if !p.IsValid() || p.IsSingleIP() {
			continue
		}
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() && bits >= 96 {
			a, bits = a.Unmap(), bits-96
		}
		q := netip.PrefixFrom(a.WithZone(""), bits).Masked()
		if !slices.Contains(h.prefixes, q) {
			h.prefixes = append(h.prefixes, q)
		}
	}
	slices.SortFunc(h.prefixes, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	return h
}

// Contains reports whether a (zone-free, unmapped) is in the set: one of
// its addresses, or in one of its local prefixes.
func (h *HostAddrs) Contains(a netip.Addr) bool {
	if h == nil {
		return false
	}
	if h.unknown != "" {
		return true
	}
	if _, ok := slices.BinarySearchFunc(h.list, a, netip.Addr.Compare); ok {
		return true
	}
	for _, p := range h.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Prefixes returns the set's local prefixes (NewHostAddrsRouted), sorted.
func (h *HostAddrs) Prefixes() []netip.Prefix {
	if h == nil {
		return nil
	}
	return slices.Clone(h.prefixes)
}

// Addrs returns the set's addresses, sorted (none for an unknown set).
func (h *HostAddrs) Addrs() []netip.Addr {
	if h == nil {
		return nil
	}
	return slices.Clone(h.list)
}

// Len returns the number of addresses and local prefixes in the set.
func (h *HostAddrs) Len() int {
	if h == nil {
		return 0
	}
	return len(h.list) + len(h.prefixes)
}

// Equal reports whether h and o hold the same addresses. An unknown set
// equals only an unknown set with the same reason.
func (h *HostAddrs) Equal(o *HostAddrs) bool {
	if h.Unknown() != o.Unknown() {
		return false
	}
	var a, b []netip.Addr
	var pa, pb []netip.Prefix
	if h != nil {
		a, pa = h.list, h.prefixes
	}
	if o != nil {
		b, pb = o.list, o.prefixes
	}
	return slices.Equal(a, b) && slices.Equal(pa, pb)
}

// WithHostAddrs returns a copy of p that guards the host's own addresses
// h (replacing any set given before; nil guards none). Each address is a
// special range of its own, the narrowest one holding it: at step 3 of
// Decide a flow to it, or embedding it, is denied with rule
// builtin:special-range, unless an allow cidr rule naming exactly that
// address (a /32 or /128, with matching proto and port) covers it, or the
// flow's name has a dns.hosts entry holding it. 0.0.0.0/0, ::/0, and a
// rule for the address's subnet or its private range, never open it. p is
// not changed.
func (p *Policy) WithHostAddrs(h *HostAddrs) *Policy {
	q := *p
	q.hostAddrs = h
	return &q
}

// HostAddrs returns the host's own addresses WithHostAddrs gave p (nil:
// none).
func (p *Policy) HostAddrs() *HostAddrs { return p.hostAddrs }

// hostAddrWhat names the range a host's own address is; hostAddrUnknown
// starts the name of an address that may be one (UnknownHostAddrs).
const (
	hostAddrWhat    = "the host's own address"
	hostAddrUnknown = "possibly the host's own address (they could not be read: "
)

// guarded reports whether a lies in a range guardRangeOf finds.
func (p *Policy) guarded(a netip.Addr) bool {
	_, ok := p.guardRangeOf(a)
	return ok
}

// guardRangeOf returns the narrowest guarded range holding a (zone-free,
// unmapped): the address itself when it is one of the host's own, else
// its built-in special range. ok is false when a is in none.
func (p *Policy) guardRangeOf(a netip.Addr) (sr specialRange, ok bool) {
	if p.hostAddrs.Contains(a) {
		what := hostAddrWhat
		if why := p.hostAddrs.Unknown(); why != "" {
			what = hostAddrUnknown + why + ")"
		}
		return specialRange{netip.PrefixFrom(a, a.BitLen()), what}, true
	}
	if r := specialRangeOf(a); r != nil {
		return *r, true
	}
	return specialRange{}, false
}
