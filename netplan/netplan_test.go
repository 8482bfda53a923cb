package netplan

import (
	"go/parser"
	"go/token"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// TestAddresses: every address of a plan, for the default plan and for
// plans with other prefixes.
func TestAddresses(t *testing.T) {
	tests := []struct {
		why  string
		plan Plan
		// gateway, DNS, guest, guest prefix, broadcast (IPv4); gateway,
		// DNS, guest, guest prefix (IPv6).
		gw4, dns4, guest4, guestPfx4, bc4 string
		gw6, dns6, guest6, guestPfx6      string
	}{
		{"the default plan is slirp4netns's", Default(),
			"10.0.2.2", "10.0.2.3", "10.0.2.100", "10.0.2.100/24", "10.0.2.255",
			"fd00::2", "fd00::3", "fd00::100", "fd00::100/64"},
		{"the zero Plan is the default plan", Plan{},
			"10.0.2.2", "10.0.2.3", "10.0.2.100", "10.0.2.100/24", "10.0.2.255",
			"fd00::2", "fd00::3", "fd00::100", "fd00::100/64"},
		{"prefixes are masked first: the guest's own prefix names the same plan", Plan{Prefix4: pfx("10.0.2.100/24"), Prefix6: pfx("fd00::100/64")},
			"10.0.2.2", "10.0.2.3", "10.0.2.100", "10.0.2.100/24", "10.0.2.255",
			"fd00::2", "fd00::3", "fd00::100", "fd00::100/64"},
		{"an unset IPv6 prefix is the default's (slirp4netns --cidr)", Plan{Prefix4: pfx("10.9.0.0/24")},
			"10.9.0.2", "10.9.0.3", "10.9.0.100", "10.9.0.100/24", "10.9.0.255",
			"fd00::2", "fd00::3", "fd00::100", "fd00::100/64"},
		{"slirp4netns's cidr test: host numbers are added to the network, 128+100 = .228", Plan{Prefix4: pfx("10.0.135.128/25")},
			"10.0.135.130", "10.0.135.131", "10.0.135.228", "10.0.135.228/25", "10.0.135.255",
			"fd00::2", "fd00::3", "fd00::100", "fd00::100/64"},
		{"a /16 and another IPv6 prefix; ::100 is hexadecimal", Plan{Prefix4: pfx("172.20.0.0/16"), Prefix6: pfx("fd12:3456::/48")},
			"172.20.0.2", "172.20.0.3", "172.20.0.100", "172.20.0.100/16", "172.20.255.255",
			"fd12:3456::2", "fd12:3456::3", "fd12:3456::100", "fd12:3456::100/48"},
		{"the longest IPv6 prefix still holds ::100", Plan{Prefix6: pfx("fd00:1:2:3:4:5:6:0/112")},
			"10.0.2.2", "10.0.2.3", "10.0.2.100", "10.0.2.100/24", "10.0.2.255",
			"fd00:1:2:3:4:5:6:2", "fd00:1:2:3:4:5:6:3", "fd00:1:2:3:4:5:6:100", "fd00:1:2:3:4:5:6:100/112"},
	}
	for _, tt := range tests {
		p := tt.plan
		got := []string{
			p.Gateway4().String(), p.DNS4().String(), p.Guest4().String(), p.GuestPrefix4().String(), p.Broadcast4().String(),
			p.Gateway6().String(), p.DNS6().String(), p.Guest6().String(), p.GuestPrefix6().String(),
		}
		want := []string{tt.gw4, tt.dns4, tt.guest4, tt.guestPfx4, tt.bc4, tt.gw6, tt.dns6, tt.guest6, tt.guestPfx6}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", tt.why, got, want)
		}
		if err := p.Check(); err != nil {
			t.Errorf("%s: Check: %v", tt.why, err)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	tests := []struct {
		why  string
		plan Plan
		want Plan
	}{
		{"zero: both defaults", Plan{}, Plan{Prefix4: pfx("10.0.2.0/24"), Prefix6: pfx("fd00::/64")}},
		{"host bits are cleared", Plan{Prefix4: pfx("10.9.0.7/24"), Prefix6: pfx("fd01::7/64")}, Plan{Prefix4: pfx("10.9.0.0/24"), Prefix6: pfx("fd01::/64")}},
		{"only the unset prefix is defaulted", Plan{Prefix6: pfx("fd01::/64")}, Plan{Prefix4: pfx("10.0.2.0/24"), Prefix6: pfx("fd01::/64")}},
	}
	for _, tt := range tests {
		if got := tt.plan.WithDefaults(); got != tt.want {
			t.Errorf("%s: WithDefaults(%v) = %v, want %v", tt.why, tt.plan, got, tt.want)
		}
	}
	if Default() != Default().WithDefaults() {
		t.Error("Default is not already in WithDefaults form")
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		why  string
		plan Plan
		err  string // "" for a good plan, else a part of the error
	}{
		{"the default plan", Plan{}, ""},
		{"the longest prefixes that hold host 100 and ::100", Plan{Prefix4: pfx("10.0.2.0/25"), Prefix6: pfx("fd00::/112")}, ""},
		{"a /26 has no host 100", Plan{Prefix4: pfx("10.0.2.0/26")}, "want an IPv4 prefix of /25 or shorter and an IPv6 prefix of /112 or shorter"},
		{"a /113 has no host ::100", Plan{Prefix6: pfx("fd00::/113")}, "want an IPv4 prefix of /25 or shorter"},
		{"Prefix4 must be IPv4", Plan{Prefix4: pfx("fd01::/64")}, "bad network fd01::/64 fd00::/64"},
		{"Prefix6 must be IPv6", Plan{Prefix6: pfx("10.1.0.0/16")}, "bad network 10.0.2.0/24 10.1.0.0/16"},
		{"an IPv4-mapped Prefix6 is IPv4 in disguise", Plan{Prefix6: pfx("::ffff:10.1.0.0/112")}, "want an IPv4 prefix"},
		{"inside the IPv4 fake pool: a worker address would look like a name", Plan{Prefix4: pfx("198.19.0.0/24")}, "198.19.0.0/24 overlaps nsgate's fake-IP range 198.18.0.0/15"},
		{"around the IPv4 fake pool", Plan{Prefix4: pfx("192.0.0.0/4")}, "overlaps nsgate's fake-IP range 198.18.0.0/15"},
		{"/0 holds everything, the pool too", Plan{Prefix4: pfx("0.0.0.0/0")}, "overlaps nsgate's fake-IP range"},
		{"around the IPv6 fake pool", Plan{Prefix6: pfx("fd00::/8")}, "fd00::/8 overlaps nsgate's fake-IP range fd6e:7367:6174::/64"},
	}
	for _, tt := range tests {
		err := tt.plan.Check()
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: Check(%v) = %v, want nil", tt.why, tt.plan, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: Check(%v) = %v, want an error with %q", tt.why, tt.plan, err, tt.err)
		}
	}
}

// TestParseCIDR: slirp4netns's --cidr rules and messages, and nsgate's
// own rule about the fake-IP pool.
func TestParseCIDR(t *testing.T) {
	tests := []struct {
		why  string
		cidr string
		want string // the IPv4 prefix, or the error
		ok   bool
	}{
		{"the default", "10.0.2.0/24", "10.0.2.0/24", true},
		{"Podman's cidr option", "10.9.0.0/24", "10.9.0.0/24", true},
		{"slirp4netns's own cidr test", "10.0.135.128/25", "10.0.135.128/25", true},
		{"the widest: /1", "0.0.0.0/1", "0.0.0.0/1", true},
		{"one-digit prefix", "10.0.0.0/8", "10.0.0.0/8", true},
		{"no prefix", "10.0.2.0", "invalid CIDR: 10.0.2.0", false},
		{"empty", "", "invalid CIDR: ", false},
		{"a 3-digit prefix", "10.0.2.0/024", "invalid CIDR: 10.0.2.0/024", false},
		{"an empty prefix", "10.0.2.0/", "invalid CIDR: 10.0.2.0/", false},
		{"a signed prefix", "10.0.2.0/+4", "invalid CIDR: 10.0.2.0/+4", false},
		{"IPv6 is not a --cidr", "fd00::/64", "invalid CIDR: fd00::/64", false},
		{"three octets", "10.0.2/24", "invalid CIDR: 10.0.2/24", false},
		{"control bytes are escaped in the message", "10.0.2.0\n/24", `invalid CIDR: 10.0.2.0\n/24`, false},
		{"an octet over 255", "300.0.2.0/24", "invalid network address: 300.0.2.0", false},
		{"a leading zero (inet_pton refuses it)", "10.0.02.0/24", "invalid network address: 10.0.02.0", false},
		{"too long for host 100", "10.0.2.0/26", "prefix length needs to be 1-25", false},
		{"two-digit but out of range", "10.0.2.0/33", "prefix length needs to be 1-25", false},
		{"prefix 0", "0.0.0.0/0", "prefix length needs to be 1-25", false},
		{"host bits set", "10.0.2.100/24", "CIDR needs to be a network address like 10.0.2.0/24, not like 10.0.2.100/24", false},
		{"inside the fake-IP pool", "198.18.5.0/24", "--cidr 198.18.5.0/24 overlaps nsgate's fake-IP range 198.18.0.0/15: choose another network", false},
		{"containing the fake-IP pool", "128.0.0.0/1", "--cidr 128.0.0.0/1 overlaps nsgate's fake-IP range 198.18.0.0/15: choose another network", false},
	}
	for _, tt := range tests {
		p, err := ParseCIDR(tt.cidr)
		if !tt.ok {
			if err == nil || err.Error() != tt.want {
				t.Errorf("%s: ParseCIDR(%q) error = %v, want %q", tt.why, tt.cidr, err, tt.want)
			}
			if p != (Plan{}) {
				t.Errorf("%s: ParseCIDR(%q) returned %v with its error", tt.why, tt.cidr, p)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseCIDR(%q): %v", tt.why, tt.cidr, err)
			continue
		}
		if p.Prefix4.String() != tt.want || p.Prefix6 != Default().Prefix6 {
			t.Errorf("%s: ParseCIDR(%q) = %v, want %s and the default IPv6 prefix", tt.why, tt.cidr, p, tt.want)
		}
		if err := p.Check(); err != nil {
			t.Errorf("%s: ParseCIDR(%q) gave a plan that fails Check: %v", tt.why, tt.cidr, err)
		}
	}
}

// TestGuestSource: which source addresses the worker may use (moved from
// netstack's TestNetwork).
func TestGuestSource(t *testing.T) {
	tests := []struct {
		plan Plan
		addr string
		ok   bool
		why  string
	}{
		{Plan{}, "10.0.2.100", true, "the worker"},
		{Plan{}, "10.0.2.15", false, "any other host of the subnet: not the worker's (spoofed)"},
		{Plan{}, "10.0.2.2", false, "the gateway"},
		{Plan{}, "10.0.2.3", false, "the DNS server"},
		{Plan{}, "10.0.2.0", false, "the network address"},
		{Plan{}, "10.0.2.255", false, "the broadcast address"},
		{Plan{}, "10.0.3.1", false, "another subnet"},
		{Plan{}, "fd00::100", true, "the worker over IPv6"},
		{Plan{}, "fd00::101", false, "another IPv6 host of the subnet"},
		{Plan{}, "fd00::2", false, "the IPv6 gateway"},
		{Plan{}, "fd00::3", false, "the IPv6 DNS server"},
		{Plan{}, "fd00::", false, "the IPv6 network address"},
		{Plan{}, "fe80::1", false, "link-local is not a flow source"},
		{Plan{}, "::ffff:10.0.2.100", false, "an IPv4-mapped worker address is not unmapped"},
		{Plan{}, "198.18.0.1", false, "a fake address stands for a name, never for the worker"},
		{Plan{Prefix4: pfx("10.0.135.128/25")}, "10.0.135.228", true, "the worker of a /25 in the upper half"},
		{Plan{Prefix4: pfx("10.0.135.128/25")}, "10.0.135.127", false, "below a /25: outside"},
		{Plan{Prefix4: pfx("10.0.135.128/25")}, "10.0.135.130", false, "the gateway of that /25"},
		{Plan{Prefix4: pfx("10.0.135.128/25")}, "10.0.135.255", false, "the broadcast of that /25"},
	}
	for _, tt := range tests {
		if got := tt.plan.GuestSource(addr(tt.addr)); got != tt.ok {
			t.Errorf("%v GuestSource(%s) = %v, want %v: %s", tt.plan, tt.addr, got, tt.ok, tt.why)
		}
	}
}

func TestPoolsAndLocal(t *testing.T) {
	tests := []struct {
		why  string
		plan Plan
		want []string
	}{
		{"the default plan: its subnets, then the pools, as `nsgate check` prints them",
			Plan{}, []string{"10.0.2.0/24", "fd00::/64", "198.18.0.0/15", "fd6e:7367:6174::/64"}},
		{"the subnets come masked, whatever the plan holds",
			Plan{Prefix4: pfx("10.9.0.100/24"), Prefix6: pfx("fd01::100/64")}, []string{"10.9.0.0/24", "fd01::/64", "198.18.0.0/15", "fd6e:7367:6174::/64"}},
	}
	for _, tt := range tests {
		var got []string
		for _, p := range tt.plan.Local() {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Local() = %v, want %v", tt.why, got, tt.want)
		}
		if tt.plan.FakePool4() != pfx("198.18.0.0/15") || tt.plan.FakePool6() != pfx("fd6e:7367:6174::/64") {
			t.Errorf("%s: pools %v %v", tt.why, tt.plan.FakePool4(), tt.plan.FakePool6())
		}
	}
	// Each call gives a slice of its own.
	a, b := Default().Local(), Default().Local()
	a[0] = netip.Prefix{}
	if b[0] != pfx("10.0.2.0/24") {
		t.Error("Local slices share their backing array")
	}
	// The pools are where dns/ allocates; no address of the plan's
	// worker, gateway or DNS server may fall in them.
	d := Default()
	for _, a := range []netip.Addr{d.Guest4(), d.Gateway4(), d.DNS4(), d.Guest6(), d.Gateway6(), d.DNS6()} {
		if d.FakePool4().Contains(a) || d.FakePool6().Contains(a) {
			t.Errorf("%v is in a fake pool", a)
		}
	}
}

func TestResolvConf(t *testing.T) {
	tests := []struct {
		why  string
		plan Plan
		ipv6 bool
		want string
	}{
		{"IPv4 only (nsgate run --ipv6=false)", Plan{}, false, "nameserver 10.0.2.3\n"},
		{"both families, IPv4 first", Plan{}, true, "nameserver 10.0.2.3\nnameserver fd00::3\n"},
		{"another plan's DNS addresses", Plan{Prefix4: pfx("10.9.0.0/24"), Prefix6: pfx("fd01::/64")}, true, "nameserver 10.9.0.3\nnameserver fd01::3\n"},
	}
	for _, tt := range tests {
		if got := tt.plan.ResolvConf(tt.ipv6); got != tt.want {
			t.Errorf("%s: ResolvConf(%v) = %q, want %q", tt.why, tt.ipv6, got, tt.want)
		}
	}
}

// TestLeaf: the package imports only the standard library (its doc
// comment says why), so that every package can import it.
func TestLeaf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("glob: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: netplan may import only the standard library", f, path)
			}
		}
	}
}

// pastaPlan is the plan `nsgate pasta` builds on a host whose address is
// 192.168.1.50/24 behind 192.168.1.1, with Podman's DNS forward and host
// alias addresses.
func pastaPlan() Plan {
	return Plan{
		Prefix4:    pfx("192.168.1.0/24"),
		Fixed4:     Fixed{Guest: addr("192.168.1.50"), Gateway: addr("192.168.1.1"), DNS: addr("169.254.1.1")},
		HostAlias4: addr("169.254.1.2"),
	}
}

// TestFixed: a plan that names its IPv4 addresses outright (pasta's model:
// the host's address and gateway) keeps the IPv6 host numbers and the
// default plan's behaviour elsewhere.
func TestFixed(t *testing.T) {
	p := pastaPlan()
	if err := p.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	got := []string{p.Guest4().String(), p.Gateway4().String(), p.DNS4().String(), p.GuestPrefix4().String(),
		p.Broadcast4().String(), p.Guest6().String(), p.ResolvConf(false)}
	want := []string{"192.168.1.50", "192.168.1.1", "169.254.1.1", "192.168.1.50/24", "192.168.1.255", "fd00::100", "nameserver 169.254.1.1\n"}
	if !slices.Equal(got, want) {
		t.Errorf("addresses:\n got %q\nwant %q", got, want)
	}
	var local []string
	for _, l := range p.Local() {
		local = append(local, l.String())
	}
	if want := []string{"192.168.1.50/32", "192.168.1.1/32", "169.254.1.1/32", "169.254.1.2/32", "fd00::/64", "198.18.0.0/15", "fd6e:7367:6174::/64"}; !slices.Equal(local, want) {
		t.Errorf("Local() = %v, want %v (the host's network is the policy's business, not the gateway's own)", local, want)
	}
	for _, tt := range []struct {
		a  string
		ok bool
	}{
		{"192.168.1.50", true}, {"192.168.1.77", false}, {"192.168.1.1", false}, {"192.168.1.0", false},
		{"192.168.1.255", false}, {"169.254.1.1", false}, {"169.254.1.2", false}, {"10.0.2.100", false},
	} {
		if p.GuestSource(addr(tt.a)) != tt.ok {
			t.Errorf("GuestSource(%s) = %v, want %v", tt.a, !tt.ok, tt.ok)
		}
	}
	// A /32 host address behind an off-link gateway (as some clouds give
	// out): the guest is its own network, and there is no broadcast.
	c := Plan{Prefix4: pfx("10.128.0.5/32"), Fixed4: Fixed{Guest: addr("10.128.0.5"), Gateway: addr("10.128.0.1"), DNS: addr("169.254.1.1")}}
	if err := c.Check(); err != nil {
		t.Errorf("a /32 host: %v", err)
	}
	if !c.GuestSource(addr("10.128.0.5")) || c.GuestSource(addr("10.128.0.6")) || c.Broadcast4().IsValid() {
		t.Errorf("a /32 host: GuestSource or Broadcast4 wrong (broadcast %v)", c.Broadcast4())
	}
}

func TestHostSide(t *testing.T) {
	p := pastaPlan()
	if to, ok := p.HostSide(addr("169.254.1.2")); !ok || to != addr("127.0.0.1") {
		t.Errorf("the host alias goes to %v (%v), want the host's loopback 127.0.0.1", to, ok)
	}
	for _, a := range []string{"169.254.1.1", "203.0.113.10", "192.168.1.1"} {
		if to, ok := p.HostSide(addr(a)); ok || to != addr(a) {
			t.Errorf("HostSide(%s) = %v, %v: only the alias is mapped", a, to, ok)
		}
	}
	if to, ok := Default().HostSide(addr("169.254.1.2")); ok || to != addr("169.254.1.2") {
		t.Errorf("the default plan has no host alias, got %v", to)
	}
}

func TestCheckFixed(t *testing.T) {
	good := pastaPlan()
	for _, tt := range []struct {
		why  string
		edit func(*Plan)
		err  string
	}{
		{"guest outside the network", func(p *Plan) { p.Fixed4.Guest = addr("192.168.2.50") }, "bad guest address 192.168.2.50: not in the network 192.168.1.0/24"},
		{"half-set: a gateway without DNS", func(p *Plan) { p.Fixed4.DNS = netip.Addr{} }, "bad DNS address invalid IP"},
		{"an IPv6 gateway in the IPv4 set", func(p *Plan) { p.Fixed4.Gateway = addr("fe80::1") }, "bad gateway address fe80::1"},
		{"loopback DNS", func(p *Plan) { p.Fixed4.DNS = addr("127.0.0.53") }, "bad DNS address 127.0.0.53"},
		{"DNS in the fake pool", func(p *Plan) { p.Fixed4.DNS = addr("198.18.0.1") }, "in nsgate's fake-IP range"},
		{"gateway equals guest", func(p *Plan) { p.Fixed4.Gateway = addr("192.168.1.50") }, "must differ"},
		{"alias equals DNS", func(p *Plan) { p.HostAlias4 = addr("169.254.1.1") }, "bad host alias 169.254.1.1"},
		{"alias inside the worker's network", func(p *Plan) { p.HostAlias4 = addr("192.168.1.9") }, "bad host alias 192.168.1.9"},
		{"a multicast alias", func(p *Plan) { p.HostAlias4 = addr("224.0.0.1") }, "bad host alias address 224.0.0.1"},
		{"the host's network inside the fake pool", func(p *Plan) {
			p.Prefix4 = pfx("198.18.0.0/24")
			p.Fixed4.Guest = addr("198.18.0.5")
		}, "overlaps nsgate's fake-IP range"},
	} {
		p := good
		tt.edit(&p)
		if err := p.Check(); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: Check() = %v, want %q", tt.why, err, tt.err)
		}
	}
}
