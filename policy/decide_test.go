package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// decideSrc exercises every step of the decision order.
const decideSrc = `
version: 1
allow:
  - host: app.test              # allow[0]
    ports: [80, 443]
  - host: "*.cdn.test"          # allow[1]
    ports: ["8000-8100"]
  - cidr: 203.0.113.0/24        # allow[2]
    ports: [443]
  - host: dns.test              # allow[3]
    ports: [53]
    proto: udp
  - cidr: 127.0.0.1/32          # allow[4]: lifts the guard for one loopback port
    ports: [8080]
  - host: local.test            # allow[5]: a name whose static answer is private
    ports: [80]
  - cidr: 2001:db8::/32         # allow[6]
    proto: any
  - host: metadata.google.internal  # allow[7]: never beats the metadata set
  - cidr: 0.0.0.0/0             # allow[8]: the whole IPv4 internet on one port
    ports: [9999]
  - cidr: 198.51.100.0/24       # allow[9]
    ports: [80]
  - cidr: 10.1.2.0/24           # allow[10]: inside 10.0.0.0/8, so it opens 10.1.2.x
    ports: [8443]
  - cidr: ::/0                  # allow[11]: the whole IPv6 internet on one port
    ports: [9999]
  - cidr: 8.0.0.0/6             # allow[12]: 8-11.x.x.x, broader than 10.0.0.0/8
    ports: [7777]
  - cidr: 64:ff9b::/96          # allow[13]: NAT64 wrappers
    ports: [8443]
  - cidr: 240.0.0.0/4           # allow[14]: reserved, but not the broadcast /32 inside it
    ports: [67]
    proto: udp
deny:
  - host: "*.ads.cdn.test"      # deny[0]
  - cidr: 203.0.113.66/32       # deny[1]
  - host: app.test              # deny[2]: only port 22 (so app.test still resolves)
    ports: [22]
  - host: blocked.test          # deny[3]
dns:
  hosts:
    app.test: [203.0.113.10]
    local.test: [10.1.2.3]
    hostsonly.test: [203.0.113.20]
    blocked.test: [203.0.113.30]
    lan.test: [10.5.5.5]
`

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestDecide(t *testing.T) {
	p := mustParse(t, decideSrc)
	tests := []struct {
		why    string
		flow   Flow
		allow  bool
		rule   string
		reason string // substring of the reason
	}{
		// 1. Cloud metadata.
		{"a metadata address is denied", Flow{TCP, "", ip("169.254.169.254"), 80}, false, RuleMetadata, "169.254.169.254 is a cloud metadata address"},
		{"metadata beats an allow cidr covering it", Flow{TCP, "", ip("169.254.169.254"), 9999}, false, RuleMetadata, "cloud metadata address"},
		{"every metadata address is in the set", Flow{TCP, "", ip("168.63.129.16"), 9999}, false, RuleMetadata, "168.63.129.16"},
		{"the ECS address too", Flow{TCP, "", ip("169.254.170.2"), 80}, false, RuleMetadata, ""},
		{"IPv6 metadata", Flow{TCP, "", ip("fd00:ec2::254"), 80}, false, RuleMetadata, "fd00:ec2::254 is a cloud metadata address"},
		{"IPv6 metadata with a zone", Flow{TCP, "", ip("fd00:ec2::254%eth0"), 80}, false, RuleMetadata, ""},
		{"v4-mapped metadata", Flow{TCP, "", ip("::ffff:169.254.169.254"), 80}, false, RuleMetadata, "169.254.169.254 is a cloud metadata address"},
		{"v4-compatible metadata", Flow{TCP, "", ip("::169.254.169.254"), 80}, false, RuleMetadata, "::a9fe:a9fe embeds 169.254.169.254, a cloud metadata address"},
		{"NAT64 metadata", Flow{TCP, "", ip("64:ff9b::169.254.169.254"), 80}, false, RuleMetadata, "64:ff9b::a9fe:a9fe embeds 169.254.169.254"},
		{"local-use NAT64 /48 metadata", Flow{TCP, "", ip("64:ff9b:1:a9fe:a9:fe00::"), 80}, false, RuleMetadata, "embeds 169.254.169.254"},
		{"6to4 metadata", Flow{TCP, "", ip("2002:a9fe:a9fe::1"), 80}, false, RuleMetadata, "embeds 169.254.169.254"},
		{"Teredo metadata (inverted client)", Flow{TCP, "", ip("2001:0:4136:e378:8000:63bf:5601:5601"), 80}, false, RuleMetadata, "embeds 169.254.169.254"},
		{"a metadata name", Flow{TCP, "metadata.google.internal", netip.Addr{}, 80}, false, RuleMetadata, "metadata.google.internal is a cloud metadata name"},
		{"a metadata name in another case with a dot", Flow{TCP, "Metadata.Google.Internal.", netip.Addr{}, 80}, false, RuleMetadata, ""},
		{"a metadata name resolving to a public address", Flow{TCP, "instance-data", ip("203.0.113.9"), 443}, false, RuleMetadata, ""},

		// 2. Deny rules.
		{"a deny wildcard beats an allow wildcard", Flow{TCP, "x.ads.cdn.test", netip.Addr{}, 8000}, false, "deny[0]", "matches deny[0]: host *.ads.cdn.test (any proto, all ports)"},
		{"a deny cidr beats an allow cidr", Flow{TCP, "", ip("203.0.113.66"), 443}, false, "deny[1]", "cidr 203.0.113.66/32"},
		{"a deny cidr covers UDP too", Flow{UDP, "", ip("203.0.113.66"), 53}, false, "deny[1]", ""},
		{"a deny cidr sees through v4-mapped", Flow{TCP, "", ip("::ffff:203.0.113.66"), 443}, false, "deny[1]", ""},
		{"a deny cidr sees through 6to4", Flow{TCP, "", ip("2002:cb00:7142::"), 443}, false, "deny[1]", "2002:cb00:7142:: embeds 203.0.113.66; matches deny[1]"},
		{"a deny cidr applies to a name flow's address", Flow{TCP, "app.test", ip("203.0.113.66"), 443}, false, "deny[1]", ""},
		{"a deny host rule with ports denies that port", Flow{TCP, "app.test", ip("203.0.113.10"), 22}, false, "deny[2]", ""},
		{"a deny host rule with ports leaves other ports", Flow{TCP, "app.test", ip("203.0.113.10"), 443}, true, "allow[0]", "matches allow[0]: host app.test (tcp 80,443)"},
		{"a deny host rule beats dns.hosts", Flow{TCP, "blocked.test", ip("203.0.113.30"), 80}, false, "deny[3]", ""},

		// 3. Special ranges.
		{"loopback is guarded", Flow{TCP, "", ip("127.0.0.1"), 80}, false, RuleSpecialRange, "127.0.0.1 is in 127.0.0.0/8 (loopback)"},
		{"an allow cidr with the port lifts the guard", Flow{TCP, "", ip("127.0.0.1"), 8080}, true, "allow[4]", ""},
		{"an allow cidr lifts it only for its ports", Flow{TCP, "", ip("127.0.0.1"), 8081}, false, RuleSpecialRange, ""},
		{"an allow cidr lifts it only for its proto", Flow{UDP, "", ip("127.0.0.1"), 8080}, false, RuleSpecialRange, ""},
		{"the v4-mapped loopback is the loopback", Flow{TCP, "", ip("::ffff:127.0.0.1"), 8080}, true, "allow[4]", ""},
		{"IPv6 loopback", Flow{TCP, "", ip("::1"), 80}, false, RuleSpecialRange, "::1 is in ::1/128 (loopback)"},
		{"NAT64 loopback", Flow{TCP, "", ip("64:ff9b::127.0.0.1"), 80}, false, RuleSpecialRange, "64:ff9b::7f00:1 embeds 127.0.0.1 is in 127.0.0.0/8"},
		{"6to4 loopback", Flow{TCP, "", ip("2002:7f00:1::"), 80}, false, RuleSpecialRange, "embeds 127.0.0.1"},
		{"v4-compatible loopback", Flow{TCP, "", ip("::127.0.0.1"), 80}, false, RuleSpecialRange, "embeds 127.0.0.1"},
		{"Teredo loopback", Flow{TCP, "", ip("2001:0:4136:e378:8000:63bf:80ff:fffe"), 80}, false, RuleSpecialRange, "embeds 127.0.0.1"},
		{"the unspecified address", Flow{TCP, "", ip("0.0.0.0"), 80}, false, RuleSpecialRange, ""},
		{"IPv6 unspecified", Flow{TCP, "", ip("::"), 80}, false, RuleSpecialRange, ""},
		{"private", Flow{TCP, "", ip("10.0.0.1"), 443}, false, RuleSpecialRange, "(private)"},
		{"private 172.16/12", Flow{TCP, "", ip("172.31.255.255"), 443}, false, RuleSpecialRange, ""},
		{"CGNAT", Flow{TCP, "", ip("100.64.0.1"), 443}, false, RuleSpecialRange, ""},
		{"link-local", Flow{TCP, "", ip("169.254.1.1"), 80}, false, RuleSpecialRange, "(link-local)"},
		{"IPv6 link-local", Flow{TCP, "", ip("fe80::1%eth0"), 80}, false, RuleSpecialRange, ""},
		{"unique local", Flow{TCP, "", ip("fd12::1"), 80}, false, RuleSpecialRange, ""},
		{"the fake DNS range", Flow{TCP, "", ip("198.18.0.5"), 80}, false, RuleSpecialRange, ""},
		{"multicast", Flow{UDP, "", ip("224.0.0.251"), 5353}, false, RuleSpecialRange, ""},
		{"IPv6 multicast", Flow{UDP, "", ip("ff02::fb"), 5353}, false, RuleSpecialRange, ""},
		{"broadcast", Flow{UDP, "", ip("255.255.255.255"), 67}, false, RuleSpecialRange, ""},
		{"reserved", Flow{TCP, "", ip("240.0.0.1"), 80}, false, RuleSpecialRange, ""},
		{"0.0.0.0/0 does not open a special range, and the reason says so", Flow{TCP, "", ip("10.0.0.1"), 9999}, false, RuleSpecialRange, "10.0.0.1 is in 10.0.0.0/8 (private); allow it with a cidr rule inside that range or dns.hosts (allow[8] 0.0.0.0/0 is broader than the range and does not open it)"},
		{"0.0.0.0/0 does not open loopback", Flow{TCP, "", ip("127.0.0.2"), 9999}, false, RuleSpecialRange, "127.0.0.0/8 (loopback)"},
		{"0.0.0.0/0 does not open link-local", Flow{TCP, "", ip("169.254.1.1"), 9999}, false, RuleSpecialRange, "(link-local)"},
		{"0.0.0.0/0 does not open the fake DNS range", Flow{TCP, "", ip("198.19.255.250"), 9999}, false, RuleSpecialRange, "198.18.0.0/15"},
		{"::/0 does not open IPv6 loopback", Flow{TCP, "", ip("::1"), 9999}, false, RuleSpecialRange, "(allow[11] ::/0 is broader"},
		{"::/0 does not open unique local", Flow{TCP, "", ip("fd12::1"), 9999}, false, RuleSpecialRange, "fc00::/7"},
		{"::/0 does not open IPv6 link-local", Flow{TCP, "", ip("fe80::1"), 9999}, false, RuleSpecialRange, ""},
		{"a cidr broader than the range but not the whole internet does not open it", Flow{TCP, "", ip("10.9.9.9"), 7777}, false, RuleSpecialRange, "(allow[12] 8.0.0.0/6 is broader"},
		{"that broader cidr still allows its public part", Flow{TCP, "", ip("9.1.1.1"), 7777}, true, "allow[12]", ""},
		{"0.0.0.0/0 still allows public addresses", Flow{TCP, "", ip("192.0.2.1"), 9999}, true, "allow[8]", ""},
		{"::/0 still allows public IPv6", Flow{TCP, "", ip("2606:4700::1"), 9999}, true, "allow[11]", ""},
		{"a cidr inside the range opens it", Flow{TCP, "", ip("10.1.2.3"), 8443}, true, "allow[10]", "cidr 10.1.2.0/24"},
		{"a cidr inside the range opens only its own part", Flow{TCP, "", ip("10.1.3.3"), 8443}, false, RuleSpecialRange, "10.1.3.3 is in 10.0.0.0/8"},
		{"a cidr inside the range opens it only on its ports", Flow{TCP, "", ip("10.1.2.3"), 9999}, false, RuleSpecialRange, "(allow[8] 0.0.0.0/0 is broader"},
		{"a cidr inside the range opens the v4-mapped form", Flow{TCP, "", ip("::ffff:10.1.2.3"), 8443}, true, "allow[10]", ""},
		{"a cidr inside the range opens the address embedded in NAT64; a rule covers the wrapper", Flow{TCP, "", ip("64:ff9b::10.1.2.3"), 8443}, true, "allow[13]", ""},
		{"NAT64 of an address no inside rule covers stays guarded", Flow{TCP, "", ip("64:ff9b::10.9.9.9"), 8443}, false, RuleSpecialRange, "64:ff9b::a09:909 embeds 10.9.9.9 is in 10.0.0.0/8"},
		{"an inside rule opens the embedded address, but the 6to4 wrapper needs a rule of its own", Flow{TCP, "", ip("2002:a01:203::"), 8443}, false, RuleDefault, ""},
		{"::/0 does not open a private address embedded in 6to4", Flow{TCP, "", ip("2002:a01:203::"), 9999}, false, RuleSpecialRange, "2002:a01:203:: embeds 10.1.2.3 is in 10.0.0.0/8"},
		{"::/0 does not open a loopback embedded in Teredo", Flow{TCP, "", ip("2001:0:4136:e378:8000:63bf:80ff:fffe"), 9999}, false, RuleSpecialRange, "embeds 127.0.0.1"},
		{"::/0 does not open an IPv4-compatible private address", Flow{TCP, "", ip("::10.1.2.3"), 9999}, false, RuleSpecialRange, "embeds 10.1.2.3"},
		{"a cidr equal to a range opens it", Flow{UDP, "", ip("240.0.0.1"), 67}, true, "allow[14]", ""},
		{"the narrowest range decides: 240.0.0.0/4 does not open the broadcast /32 inside it", Flow{UDP, "", ip("255.255.255.255"), 67}, false, RuleSpecialRange, "255.255.255.255 is in 255.255.255.255/32 (broadcast)"},
		{"dns.hosts lifts the guard, but a broad cidr then does not allow the address", Flow{TCP, "lan.test", ip("10.5.5.5"), 9999}, false, RuleDefault, ""},
		{"dns.hosts lifts the guard for its own answer", Flow{TCP, "local.test", ip("10.1.2.3"), 80}, true, "allow[5]", ""},
		{"dns.hosts does not lift it for another address", Flow{TCP, "local.test", ip("10.9.9.9"), 80}, false, RuleSpecialRange, ""},
		{"a name without a static entry gets no lift", Flow{TCP, "app.test", ip("127.0.0.1"), 80}, false, RuleSpecialRange, ""},
		{"documentation ranges are public", Flow{TCP, "", ip("192.0.2.1"), 443}, false, RuleDefault, "no allow rule matches tcp 192.0.2.1:443"},

		// 4. Allow rules.
		{"an allow cidr", Flow{TCP, "", ip("203.0.113.9"), 443}, true, "allow[2]", "matches allow[2]: cidr 203.0.113.0/24 (tcp 443)"},
		{"an allow cidr for a v4-mapped address", Flow{TCP, "", ip("::ffff:203.0.113.9"), 443}, true, "allow[2]", ""},
		{"an allow cidr does not cover a 6to4 wrapping", Flow{TCP, "", ip("2002:cb00:7109::"), 443}, false, RuleDefault, ""},
		{"an allow IPv6 cidr, any proto", Flow{UDP, "", ip("2001:db8::1"), 53}, true, "allow[6]", "any proto, all ports"},
		{"an exact host", Flow{TCP, "app.test", netip.Addr{}, 80}, true, "allow[0]", ""},
		{"an exact host in another case with a dot", Flow{TCP, "APP.Test.", netip.Addr{}, 443}, true, "allow[0]", ""},
		{"a wildcard covers one label", Flow{TCP, "a.cdn.test", netip.Addr{}, 8000}, true, "allow[1]", ""},
		{"a wildcard covers several labels", Flow{TCP, "a.b.cdn.test", ip("203.0.113.50"), 8100}, true, "allow[1]", ""},
		{"a wildcard in another case with a dot", Flow{TCP, "A.CDN.TEST.", netip.Addr{}, 8050}, true, "allow[1]", ""},
		{"a wildcard never covers its apex", Flow{TCP, "cdn.test", netip.Addr{}, 8000}, false, RuleDefault, "no allow rule matches tcp cdn.test:8000"},
		{"a wildcard is label-aligned", Flow{TCP, "evilcdn.test", netip.Addr{}, 8000}, false, RuleDefault, ""},
		{"a wildcard is anchored at the end", Flow{TCP, "cdn.test.evil.test", netip.Addr{}, 8000}, false, RuleDefault, ""},
		{"a port outside the rule's ports", Flow{TCP, "a.cdn.test", netip.Addr{}, 8101}, false, RuleDefault, "port 8101 not in allow[1] ports"},
		{"a UDP rule", Flow{UDP, "dns.test", netip.Addr{}, 53}, true, "allow[3]", ""},
		{"TCP to a UDP rule", Flow{TCP, "dns.test", netip.Addr{}, 53}, false, RuleDefault, "no allow rule matches tcp dns.test:53 (allow[3] is udp only)"},
		{"UDP to a TCP rule", Flow{UDP, "app.test", netip.Addr{}, 443}, false, RuleDefault, "no allow rule matches udp app.test:443 (allow[0] is tcp only)"},
		{"dns.hosts alone does not allow", Flow{TCP, "hostsonly.test", ip("203.0.113.20"), 80}, false, RuleDefault, "no allow rule matches tcp hostsonly.test (203.0.113.20):80"},
		{"a cidr rule applies to a name flow's address", Flow{TCP, "other.test", ip("198.51.100.7"), 80}, true, "allow[9]", ""},

		// 5. Default and odd flows.
		{"an unknown address", Flow{TCP, "", ip("203.0.113.9"), 81}, false, RuleDefault, "port 81 not in allow[2] ports"},
		{"an unknown IPv6 address", Flow{TCP, "", ip("2606:4700::1"), 443}, false, RuleDefault, "no allow rule matches tcp [2606:4700::1]:443"},
		{"an unknown name", Flow{TCP, "evil.test", netip.Addr{}, 443}, false, RuleDefault, "no allow rule matches tcp evil.test:443"},
		{"an invalid name", Flow{TCP, "a b.test", netip.Addr{}, 443}, false, RuleDefault, "invalid name"},
		{"an empty flow", Flow{TCP, "", netip.Addr{}, 443}, false, RuleDefault, "neither a name nor an address"},
		{"an unknown protocol", Flow{Proto(9), "app.test", netip.Addr{}, 443}, false, RuleDefault, ""},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			d := p.Decide(tt.flow)
			if (d.Verdict == Allow) != tt.allow || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide(%+v) = %v\nwant allow=%v rule=%s reason containing %q", tt.flow, d, tt.allow, tt.rule, tt.reason)
			}
		})
	}
}

func TestNameAllowed(t *testing.T) {
	p := mustParse(t, decideSrc)
	tests := []struct {
		why   string
		name  string
		allow bool
		rule  string
	}{
		{"a metadata name never resolves, even when allowed", "metadata.google.internal", false, RuleMetadata},
		{"metadata names are compared normalized", "METADATA.", false, RuleMetadata},
		{"a deny rule for every port blocks the name", "x.ads.cdn.test", false, "deny[0]"},
		{"a deny rule blocks a static name too", "blocked.test", false, "deny[3]"},
		{"a deny rule for one port leaves the name resolvable", "app.test", true, RuleHosts},
		{"a static name resolves", "hostsonly.test", true, RuleHosts},
		{"an allow wildcard", "a.b.cdn.test", true, "allow[1]"},
		{"an allow wildcard in another case", "A.CDN.test.", true, "allow[1]"},
		{"not the apex of a wildcard", "cdn.test", false, RuleDefault},
		{"a UDP-only rule still lets the name resolve", "dns.test", true, "allow[3]"},
		{"an unknown name", "evil.test", false, RuleDefault},
		{"an invalid name", "a_b.test", false, RuleDefault},
		{"an IDN name is compared in punycode", "bücher.test", false, RuleDefault},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			d := p.NameAllowed(tt.name)
			if (d.Verdict == Allow) != tt.allow || d.Rule != tt.rule || d.Reason == "" {
				t.Errorf("NameAllowed(%q) = %v, want allow=%v rule=%s", tt.name, d, tt.allow, tt.rule)
			}
		})
	}
	q := mustParse(t, "version: 1\nallow:\n  - host: Bücher.test\n    ports: [443]\n")
	if d := q.NameAllowed("xn--bcher-kva.test"); d.Verdict != Allow {
		t.Errorf("IDN rule does not cover its punycode: %v", d)
	}
}

func TestExplain(t *testing.T) {
	p := mustParse(t, decideSrc)
	tests := []struct {
		why    string
		proto  Proto
		dest   string
		port   uint16
		allow  bool
		rule   string
		reason string
	}{
		{"an IPv4 literal", TCP, "203.0.113.9", 443, true, "allow[2]", ""},
		{"a bracketed IPv6 literal", UDP, "[2001:db8::1]", 53, true, "allow[6]", ""},
		{"a bare IPv6 literal", UDP, "2001:db8::1", 53, true, "allow[6]", ""},
		{"a metadata literal", TCP, "169.254.169.254", 80, false, RuleMetadata, ""},
		{"a metadata name", TCP, "metadata", 80, false, RuleMetadata, ""},
		{"a name with a static answer", TCP, "app.test", 443, true, "allow[0]", "(dns.hosts 203.0.113.10)"},
		{"a name whose static answer is private", TCP, "local.test", 80, true, "allow[5]", "(dns.hosts 10.1.2.3)"},
		{"a name denied by a deny rule", TCP, "x.ads.cdn.test", 8000, false, "deny[0]", ""},
		{"a name denied on one port", TCP, "app.test", 22, false, "deny[2]", ""},
		{"a static name without an allow rule", TCP, "hostsonly.test", 80, false, RuleDefault, ""},
		{"a wildcard name without static answers", TCP, "a.cdn.test", 8000, true, "allow[1]", ""},
		{"an unknown name", TCP, "evil.test", 443, false, RuleDefault, ""},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			d, err := p.Explain(tt.proto, tt.dest, tt.port)
			if err != nil {
				t.Fatal(err)
			}
			if (d.Verdict == Allow) != tt.allow || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Explain(%v, %q, %d) = %v, want allow=%v rule=%s reason containing %q", tt.proto, tt.dest, tt.port, d, tt.allow, tt.rule, tt.reason)
			}
		})
	}
	for _, bad := range []struct {
		why   string
		proto Proto
		dest  string
	}{
		{"an empty destination", TCP, ""},
		{"a name with a space", TCP, "a b"},
		{"brackets around a name", TCP, "[app.test]"},
		{"a number that is not an address", TCP, "127.1"},
		{"an unknown protocol", Proto(0), "app.test"},
	} {
		if d, err := p.Explain(bad.proto, bad.dest, 80); err == nil {
			t.Errorf("%s: Explain(%q) = %v, want an error", bad.why, bad.dest, d)
		}
	}
}

func TestWithLocal(t *testing.T) {
	p := mustParse(t, decideSrc)
	q := p.WithLocal(netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("3fff:1::1/32"), netip.MustParsePrefix("2001:db8:1::/48"), netip.MustParsePrefix("::ffff:192.0.2.0/120"), netip.Prefix{})
	tests := []struct {
		why    string
		pol    *Policy
		flow   Flow
		allow  bool
		rule   string
		reason string
	}{
		{"the original policy is unchanged", p, Flow{TCP, "", ip("198.51.100.7"), 80}, true, "allow[9]", ""},
		{"a local subnet is guarded", q, Flow{TCP, "", ip("198.51.100.7"), 81}, false, RuleSpecialRange, "198.51.100.7 is in 198.51.100.0/24 (the gateway's own addresses); never dialled"},
		{"an allow cidr equal to the local prefix does not lift it", q, Flow{TCP, "", ip("198.51.100.7"), 80}, false, RuleSpecialRange, "(the gateway's own addresses)"},
		{"a local IPv6 subnet, masked", q, Flow{UDP, "", ip("3fff:1::9"), 53}, false, RuleSpecialRange, "3fff:1::9 is in 3fff:1::/32 (the gateway's own addresses)"},
		{"an allow IPv6 cidr around the local prefix does not lift it", q, Flow{UDP, "", ip("2001:db8:1::9"), 53}, false, RuleSpecialRange, "2001:db8:1::/48"},
		{"the rest of that IPv6 cidr is still allowed", q, Flow{UDP, "", ip("2001:db8:2::9"), 53}, true, "allow[6]", ""},
		{"a v4-mapped local prefix means IPv4", q, Flow{TCP, "", ip("192.0.2.9"), 443}, false, RuleSpecialRange, "192.0.2.0/24"},
		{"a local address embedded in 6to4 is guarded", q, Flow{TCP, "", ip("2002:c633:6407::"), 80}, false, RuleSpecialRange, "2002:c633:6407:: embeds 198.51.100.7 is in 198.51.100.0/24 (the gateway's own"},
		{"a deny rule still comes first", q.WithLocal(netip.MustParsePrefix("203.0.113.0/24")), Flow{TCP, "", ip("203.0.113.66"), 443}, false, "deny[1]", ""},
		{"metadata still comes first", p.WithLocal(netip.MustParsePrefix("169.254.0.0/16")), Flow{TCP, "", ip("169.254.169.254"), 80}, false, RuleMetadata, ""},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			d := tt.pol.Decide(tt.flow)
			if (d.Verdict == Allow) != tt.allow || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide(%+v) = %v, want allow=%v rule=%s reason containing %q", tt.flow, d, tt.allow, tt.rule, tt.reason)
			}
		})
	}
	if p.SHA256() != q.SHA256() {
		t.Error("WithLocal changed the hash")
	}
}

// gatewaySrc allows everything it can, including the gateway's own subnets
// and fake-IP pools by every cidr that could name them, and names them in
// dns.hosts.
const gatewaySrc = `
version: 1
allow:
  - {cidr: 0.0.0.0/0, proto: any}               # allow[0]
  - {cidr: "::/0", proto: any}                  # allow[1]
  - {cidr: 10.0.0.0/8, proto: any}              # allow[2]: the special range holding the subnet
  - {cidr: 10.0.2.0/24, proto: any}             # allow[3]: exactly the gateway's subnet
  - {cidr: 10.0.2.2/32, proto: any}             # allow[4]: inside it
  - {cidr: "fd00::/64", proto: any}             # allow[5]
  - {cidr: "fd00::2/128", proto: any}           # allow[6]
  - {cidr: 198.18.0.0/15, proto: any}           # allow[7]: exactly the fake pool
  - {cidr: 198.18.0.5/32, proto: any}           # allow[8]
  - {cidr: "fd6e:7367:6174::/64", proto: any}   # allow[9]
  - {cidr: "fd6e:7367:6174::5/128", proto: any} # allow[10]
  - {cidr: "64:ff9b::/96", proto: any}          # allow[11]
  - {host: gw.test, proto: any}                 # allow[12]
dns:
  hosts:
    gw.test: [10.0.2.2, "fd00::2", 198.18.0.5, "fd6e:7367:6174::5"]
`

// TestGatewayNeverAllowed: with the gateway's subnets and fake-IP pools
// given to WithLocal (as run and slirp4netns do), no allow rule and no
// dns.hosts entry lets a flow reach them, in any spelling.
func TestGatewayNeverAllowed(t *testing.T) {
	raw := mustParse(t, gatewaySrc)
	p := raw.WithLocal(
		netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00::/64"),
		netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd6e:7367:6174::/64"))
	for _, tt := range []struct {
		why  string
		flow Flow
	}{
		{"the IPv4 gateway", Flow{TCP, "", ip("10.0.2.2"), 80}},
		{"the IPv4 gateway over UDP", Flow{UDP, "", ip("10.0.2.2"), 53}},
		{"the DNS address", Flow{UDP, "", ip("10.0.2.3"), 53}},
		{"the worker's own address", Flow{TCP, "", ip("10.0.2.100"), 22}},
		{"the IPv6 gateway", Flow{TCP, "", ip("fd00::2"), 80}},
		{"the IPv6 gateway with a zone", Flow{TCP, "", ip("fd00::2%tun0"), 80}},
		{"an allocated fake address", Flow{TCP, "", ip("198.18.0.5"), 443}},
		{"an unallocated fake address", Flow{TCP, "", ip("198.19.255.250"), 80}},
		{"an IPv6 fake address", Flow{TCP, "", ip("fd6e:7367:6174::5"), 443}},
		{"the v4-mapped gateway", Flow{TCP, "", ip("::ffff:10.0.2.2"), 80}},
		{"the gateway inside NAT64", Flow{TCP, "", ip("64:ff9b::10.0.2.2"), 80}},
		{"a fake address inside NAT64", Flow{TCP, "", ip("64:ff9b::198.18.0.5"), 80}},
		{"the gateway inside 6to4", Flow{TCP, "", ip("2002:a00:202::1"), 80}},
		{"the gateway inside Teredo", Flow{TCP, "", ip("2001:0:4136:e378:8000:63bf:f5ff:fdfd"), 80}},
		{"the gateway, IPv4-compatible", Flow{TCP, "", ip("::10.0.2.2"), 80}},
		{"a name whose dns.hosts answer is the gateway", Flow{TCP, "gw.test", ip("10.0.2.2"), 80}},
		{"a name whose dns.hosts answer is the IPv6 gateway", Flow{TCP, "gw.test", ip("fd00::2"), 80}},
		{"a name whose dns.hosts answer is a fake address", Flow{TCP, "gw.test", ip("198.18.0.5"), 80}},
		{"a name whose dns.hosts answer is an IPv6 fake address", Flow{TCP, "gw.test", ip("fd6e:7367:6174::5"), 80}},
		{"a name resolving upstream to the gateway", Flow{TCP, "other.test", ip("10.0.2.2"), 80}},
	} {
		t.Run(tt.why, func(t *testing.T) {
			d := p.Decide(tt.flow)
			if d.Verdict != Deny || d.Rule != RuleSpecialRange || !strings.Contains(d.Reason, "the gateway's own addresses") {
				t.Errorf("Decide(%+v) = %v, want deny rule=%s for the gateway's own addresses", tt.flow, d, RuleSpecialRange)
			}
		})
	}
	// The same policy without WithLocal: rules inside a special range open
	// it (so WithLocal is what closes the gateway), broad ones do not.
	if d := raw.Decide(Flow{TCP, "", ip("10.0.2.2"), 80}); d.Verdict != Allow || d.Rule != "allow[2]" {
		t.Errorf("without WithLocal, 10.0.2.2 = %v, want allow[2] (10.0.0.0/8 is inside the private range)", d)
	}
	broadOnly := mustParse(t, "version: 1\nallow:\n  - {cidr: 0.0.0.0/0, proto: any}\n  - {cidr: \"::/0\", proto: any}\n")
	for _, a := range []string{"10.0.2.2", "fd00::2", "198.18.0.5", "fd6e:7367:6174::5"} {
		if d := broadOnly.Decide(Flow{TCP, "", ip(a), 80}); d.Verdict != Deny || d.Rule != RuleSpecialRange {
			t.Errorf("allow-all without WithLocal: %s = %v, want the special-range guard", a, d)
		}
	}
	// Public destinations stay allowed.
	if d := p.Decide(Flow{TCP, "", ip("203.0.113.9"), 443}); d.Verdict != Allow {
		t.Errorf("public address = %v", d)
	}
	if d := p.Decide(Flow{TCP, "gw.test", netip.Addr{}, 443}); d.Verdict != Allow {
		t.Errorf("the unresolved name flow = %v, want allow (its answers are checked one by one)", d)
	}
}

// TestDecideNoAlloc pins the allocation contract documented on Decide.
func TestDecideNoAlloc(t *testing.T) {
	p := mustParse(t, decideSrc)
	for _, tt := range []struct {
		why  string
		flow Flow
	}{
		{"allow by host", Flow{TCP, "a.b.cdn.test", ip("203.0.113.50"), 8000}},
		{"allow by cidr", Flow{TCP, "", ip("203.0.113.9"), 443}},
		{"allow by lifted guard", Flow{TCP, "", ip("127.0.0.1"), 8080}},
		{"deny by rule", Flow{TCP, "x.ads.cdn.test", netip.Addr{}, 8000}},
		{"deny by metadata", Flow{TCP, "", ip("169.254.169.254"), 80}},
		{"deny by metadata name", Flow{TCP, "metadata", netip.Addr{}, 80}},
	} {
		if n := testing.AllocsPerRun(100, func() { p.Decide(tt.flow) }); n != 0 {
			t.Errorf("%s: %v allocs per Decide, want 0", tt.why, n)
		}
	}
}

// TestWithoutMetadataStep: the lab's --break metadata copy lets the
// metadata address through where an allow rule covers it, and the
// original policy is untouched.
func TestWithoutMetadataStep(t *testing.T) {
	p, err := Parse("t.yaml", []byte("version: 1\nallow:\n  - cidr: 169.254.169.254/32\n    ports: [80]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := Flow{Proto: TCP, Addr: netip.MustParseAddr("169.254.169.254"), Port: 80}
	if d := p.Decide(f); d.Verdict != Deny || d.Rule != RuleMetadata {
		t.Fatalf("normal policy: %v, want the metadata step to deny", d)
	}
	if d := p.WithoutMetadataStep().Decide(f); d.Verdict != Allow {
		t.Fatalf("broken policy: %v, want allow[0]", d)
	}
	if d := p.WithoutMetadataStep().NameAllowed("metadata.google.internal"); d.Rule == RuleMetadata {
		t.Errorf("broken policy still denies metadata names: %v", d)
	}
	if d := p.Decide(f); d.Verdict != Deny {
		t.Errorf("WithoutMetadataStep changed the original: %v", d)
	}
}
