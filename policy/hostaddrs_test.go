package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// hostSrc allows every address on port 5432, the host's subnet, one host
// address exactly, a private range holding another, and names one host
// address in dns.hosts.
const hostSrc = `
version: 1
allow:
  - {cidr: 0.0.0.0/0, ports: [5432]}           # allow[0]
  - {cidr: "::/0", ports: [5432]}              # allow[1]
  - {cidr: 198.51.100.0/24, ports: [5432]}     # allow[2]: the host's subnet
  - {cidr: 198.51.100.51/32, ports: [5432]}    # allow[3]: exactly one host address
  - {cidr: 192.168.0.0/16, ports: [5432]}      # allow[4]: opens the private range, not the host's 192.168.1.50
  - {cidr: "2001:db8::50/128", proto: udp, ports: [5432]} # allow[5]: exactly, but only udp
  - {host: db.test, ports: [5432]}             # allow[6]
  - {host: rebind.test, ports: [5432]}         # allow[7]
deny:
  - {cidr: 198.51.100.52/32, ports: [5432]}    # deny[0]
dns:
  hosts:
    db.test: [198.51.100.50]
`

// TestWithHostAddrs: each of the host's own addresses is a special range
// of its own: only an allow cidr rule naming exactly it, or a dns.hosts
// entry holding it, opens it; 0.0.0.0/0, ::/0, its subnet and its private
// range do not. Deny rules and metadata still come first.
func TestWithHostAddrs(t *testing.T) {
	p := mustParse(t, hostSrc)
	set := NewHostAddrs([]netip.Addr{ip("198.51.100.50"), ip("198.51.100.51"), ip("198.51.100.52"), ip("192.168.1.50"),
		ip("2001:db8::50"), ip("::ffff:203.0.113.77"), ip("fe80::1%eth0"), ip("169.254.169.254"), netip.Addr{}, ip("0.0.0.0")})
	q := p.WithHostAddrs(set)
	tests := []struct {
		why    string
		pol    *Policy
		flow   Flow
		allow  bool
		rule   string
		reason string
	}{
		{"without the set, 0.0.0.0/0 reaches the address", p, Flow{TCP, "", ip("198.51.100.50"), 5432}, true, "allow[0]", ""},
		{"0.0.0.0/0 does not open a host address", q, Flow{TCP, "", ip("198.51.100.50"), 5432}, false, RuleSpecialRange,
			"198.51.100.50 is the host's own address; allow it with a cidr rule naming exactly 198.51.100.50/32 or dns.hosts (allow[0] 0.0.0.0/0 is broader than the address and does not open it)"},
		{"::/0 does not open an IPv6 host address", q, Flow{TCP, "", ip("2001:db8::50"), 5432}, false, RuleSpecialRange, "2001:db8::50 is the host's own address"},
		{"a /128 for another proto does not open it", q, Flow{TCP, "", ip("2001:db8::50"), 5432}, false, RuleSpecialRange, "naming exactly 2001:db8::50/128"},
		{"a /128 with the flow's proto opens it", q, Flow{UDP, "", ip("2001:db8::50"), 5432}, true, "allow[5]", ""},
		{"a /32 naming the address opens it", q, Flow{TCP, "", ip("198.51.100.51"), 5432}, true, "allow[3]", ""},
		{"the /32 does not open another port", q, Flow{TCP, "", ip("198.51.100.51"), 22}, false, RuleSpecialRange, "198.51.100.51 is the host's own address"},
		{"the private range's rule does not open the host's address in it", q, Flow{TCP, "", ip("192.168.1.50"), 5432}, false, RuleSpecialRange, "192.168.1.50 is the host's own address"},
		{"the private range's rule still opens the rest of it", q, Flow{TCP, "", ip("192.168.1.51"), 5432}, true, "allow[4]", ""},
		{"an address the host does not hold is allowed", q, Flow{TCP, "", ip("198.51.100.60"), 5432}, true, "allow[0]", ""},
		{"a mapped host address is read as IPv4", q, Flow{TCP, "", ip("203.0.113.77"), 5432}, false, RuleSpecialRange, "203.0.113.77 is the host's own address"},
		{"an embedded host address is guarded", q, Flow{TCP, "", ip("::ffff:198.51.100.50"), 5432}, false, RuleSpecialRange, "198.51.100.50 is the host's own address"},
		{"6to4 embedding a host address", q, Flow{TCP, "", ip("2002:c633:6432::"), 5432}, false, RuleSpecialRange, "2002:c633:6432:: embeds 198.51.100.50 is the host's own address"},
		{"a zone is dropped", q, Flow{TCP, "", ip("fe80::1"), 5432}, false, RuleSpecialRange, "fe80::1 is the host's own address"},
		{"dns.hosts lifts it for its name", q, Flow{TCP, "db.test", ip("198.51.100.50"), 5432}, true, "allow[6]", ""},
		{"a name resolving to a host address", q, Flow{TCP, "rebind.test", ip("198.51.100.50"), 5432}, false, RuleSpecialRange, "198.51.100.50 is the host's own address"},
		{"a deny rule still comes first", q, Flow{TCP, "", ip("198.51.100.52"), 5432}, false, "deny[0]", ""},
		{"metadata still comes first", q, Flow{TCP, "", ip("169.254.169.254"), 5432}, false, RuleMetadata, ""},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			d := tt.pol.Decide(tt.flow)
			if (d.Verdict == Allow) != tt.allow || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide(%+v) = %v, want allow=%v rule=%s reason containing %q", tt.flow, d, tt.allow, tt.rule, tt.reason)
			}
		})
	}
	if got, err := q.Explain(TCP, "198.51.100.50", 5432); err != nil || got.Rule != RuleSpecialRange {
		t.Errorf("Explain of a host address = %v, %v; want the special-range guard", got, err)
	}
	if got, err := q.Explain(TCP, "db.test", 5432); err != nil || got.Verdict != Allow {
		t.Errorf("Explain of a dns.hosts name on a host address = %v, %v; want allowed", got, err)
	}
	want := []netip.Addr{ip("169.254.169.254"), ip("192.168.1.50"), ip("198.51.100.50"), ip("198.51.100.51"), ip("198.51.100.52"),
		ip("203.0.113.77"), ip("2001:db8::50"), ip("fe80::1")}
	if got := set.Addrs(); !slices.Equal(got, want) {
		t.Errorf("Addrs() = %v, want %v", got, want)
	}
	if !set.Equal(NewHostAddrs(want)) || set.Equal(nil) || !(*HostAddrs)(nil).Equal(NewHostAddrs(nil)) {
		t.Error("Equal is wrong")
	}
	if p.SHA256() != q.SHA256() || p.HostAddrs() != nil || q.HostAddrs() != set {
		t.Error("WithHostAddrs changed the hash or the original")
	}
	if q.WithHostAddrs(nil).Decide(Flow{TCP, "", ip("198.51.100.50"), 5432}).Verdict != Allow {
		t.Error("WithHostAddrs(nil) still guards the old set")
	}
}

// TestHostAddrsNoAlloc: an allowed flow still decides without allocating
// when a host set is given.
func TestHostAddrsNoAlloc(t *testing.T) {
	q := mustParse(t, hostSrc).WithHostAddrs(NewHostAddrs([]netip.Addr{ip("198.51.100.50"), ip("198.51.100.51")}))
	for _, f := range []Flow{{TCP, "", ip("198.51.100.51"), 5432}, {TCP, "", ip("203.0.113.9"), 5432}} {
		if n := testing.AllocsPerRun(100, func() { q.Decide(f) }); n != 0 {
			t.Errorf("Decide(%+v) allocates %v times", f, n)
		}
	}
}

// TestUnknownHostAddrs: while the host's own addresses cannot be read,
// any address may be one of them: a flow to any address is refused as
// the host's own would be, with a reason saying they could not be read,
// unless a rule naming exactly the address or dns.hosts opens it.
func TestUnknownHostAddrs(t *testing.T) {
	p := mustParse(t, hostSrc).WithHostAddrs(UnknownHostAddrs("netlink: dump interrupted"))
	d := p.Decide(Flow{Proto: TCP, Addr: netip.MustParseAddr("203.0.113.9"), Port: 5432})
	if d.Verdict != Deny || d.Rule != RuleSpecialRange || !strings.Contains(d.Reason, "could not be read") || !strings.Contains(d.Reason, "dump interrupted") {
		t.Errorf("a flow under 0.0.0.0/0 while the host's addresses are unknown: %+v", d)
	}
	d = p.Decide(Flow{Proto: TCP, Addr: netip.MustParseAddr("2001:db8::9"), Port: 5432})
	if d.Verdict != Deny || d.Rule != RuleSpecialRange {
		t.Errorf("an IPv6 flow under ::/0 while the host's addresses are unknown: %+v", d)
	}
	if d := p.Decide(Flow{Proto: TCP, Addr: netip.MustParseAddr("198.51.100.51"), Port: 5432}); d.Verdict != Allow || d.Rule != "allow[3]" {
		t.Errorf("a rule naming exactly the address: %+v", d)
	}
	if d := p.Decide(Flow{Proto: TCP, Host: "db.test", Addr: netip.MustParseAddr("198.51.100.50"), Port: 5432}); d.Verdict != Allow {
		t.Errorf("a dns.hosts answer: %+v", d)
	}
	if d := p.Decide(Flow{Proto: TCP, Host: "db.test", Port: 5432}); d.Verdict != Allow {
		t.Errorf("a name alone: %+v", d)
	}
	if h := UnknownHostAddrs("x"); h.Len() != 0 || h.Addrs() != nil || h.Equal(NewHostAddrs(nil)) || NewHostAddrs(nil).Equal(h) || h.Unknown() != "x" {
		t.Errorf("an unknown set: len %d, addrs %v, unknown %q", h.Len(), h.Addrs(), h.Unknown())
	}
}

// TestHostAddrsRouted: every address of a prefix the host routes as
// local is guarded as the host's own, each a range of its own (a rule
// naming exactly it opens it, the prefix or 0.0.0.0/0 does not); an
// IPv4-mapped or embedding form is guarded too; addresses outside are not.
func TestHostAddrsRouted(t *testing.T) {
	h := NewHostAddrsRouted([]netip.Addr{ip("192.0.2.7")}, []netip.Prefix{
		netip.MustParsePrefix("198.51.100.128/25"), netip.MustParsePrefix("2001:db8:6::/64"),
		netip.MustParsePrefix("::ffff:203.0.113.0/120"), netip.MustParsePrefix("198.51.100.51/32"),
	})
	if h.Len() != 5 || len(h.Prefixes()) != 3 {
		t.Fatalf("set: addrs %v prefixes %v", h.Addrs(), h.Prefixes())
	}
	q := mustParse(t, hostSrc).WithHostAddrs(h)
	for _, a := range []string{"198.51.100.130", "198.51.100.255", "2001:db8:6::9", "203.0.113.9", "::ffff:198.51.100.200", "2002:c633:6482::"} {
		d := q.Decide(Flow{TCP, "", ip(a), 5432})
		if d.Verdict != Deny || d.Rule != RuleSpecialRange || !strings.Contains(d.Reason, "the host's own address") {
			t.Errorf("%s under 0.0.0.0/0: %+v", a, d)
		}
	}
	for _, a := range []string{"198.51.100.51", "198.51.100.127", "2001:db8:7::9"} {
		if d := q.Decide(Flow{TCP, "", ip(a), 5432}); d.Verdict != Allow {
			t.Errorf("%s: %+v", a, d)
		}
	}
	if !h.Equal(NewHostAddrsRouted([]netip.Addr{ip("192.0.2.7"), ip("198.51.100.51")}, []netip.Prefix{
		netip.MustParsePrefix("2001:db8:6::/64"), netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.128/25"),
	})) || h.Equal(NewHostAddrs(h.Addrs())) {
		t.Error("Equal does not compare the prefixes")
	}
}
