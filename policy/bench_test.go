package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// benchPolicy returns a policy with 1,300 rules of every kind: exact and
// wildcard hosts, IPv4 cidrs of several lengths, IPv6 cidrs, and deny rules.
func benchPolicy(tb testing.TB) *Policy {
	var b strings.Builder
	b.WriteString("version: 1\nallow:\n")
	for i := range 400 {
		fmt.Fprintf(&b, "  - {host: h%d.bench.test, ports: [443, \"8000-8100\"]}\n", i)
	}
	for i := range 200 {
		fmt.Fprintf(&b, "  - {host: \"*.w%d.bench.test\", ports: [443]}\n", i)
	}
	for i := range 300 {
		bits := []int{16, 20, 24, 28, 32}[i%5]
		a := netip.AddrFrom4([4]byte{byte(20 + i/250), byte(i % 250), byte(i % 7 * 16), 0})
		pr, _ := a.Prefix(bits)
		fmt.Fprintf(&b, "  - {cidr: %s, ports: [443], proto: any}\n", pr)
	}
	for i := range 200 {
		fmt.Fprintf(&b, "  - {cidr: \"2001:db8:%x::/48\", ports: [443]}\n", i)
	}
	b.WriteString("deny:\n")
	for i := range 100 {
		fmt.Fprintf(&b, "  - {host: \"*.ads%d.bench.test\"}\n", i)
	}
	for i := range 100 {
		fmt.Fprintf(&b, "  - {cidr: 198.51.100.%d/32}\n", i)
	}
	p, err := Parse("bench.yaml", []byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	if n := len(p.allow.rules) + len(p.deny.rules); n < 1000 {
		tb.Fatalf("only %d rules", n)
	}
	return p
}

func BenchmarkDecide(b *testing.B) {
	p := benchPolicy(b)
	cases := []struct {
		name string
		flow Flow
	}{
		{"allow-exact-host", Flow{TCP, "h399.bench.test", netip.MustParseAddr("203.0.113.9"), 8050}},
		{"allow-wildcard-host", Flow{TCP, "a.b.c.w199.bench.test", netip.MustParseAddr("203.0.113.9"), 443}},
		{"allow-cidr-v4", Flow{UDP, "", netip.MustParseAddr("21.45.200.7"), 443}},
		{"allow-cidr-v6", Flow{TCP, "", netip.MustParseAddr("2001:db8:c7::1"), 443}},
		{"deny-rule", Flow{TCP, "x.ads99.bench.test", netip.Addr{}, 443}},
		{"deny-metadata", Flow{TCP, "", netip.MustParseAddr("169.254.169.254"), 80}},
		{"deny-embedded-metadata", Flow{TCP, "", netip.MustParseAddr("2002:a9fe:a9fe::"), 80}},
		{"deny-special", Flow{TCP, "", netip.MustParseAddr("10.0.0.1"), 443}},
		{"deny-default", Flow{TCP, "", netip.MustParseAddr("203.0.113.9"), 443}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(c.flow)
			}
		})
	}
}

func BenchmarkNameAllowed(b *testing.B) {
	p := benchPolicy(b)
	b.ReportAllocs()
	for b.Loop() {
		p.NameAllowed("a.b.c.w199.bench.test")
	}
}

func BenchmarkParse(b *testing.B) {
	p := benchPolicy(b)
	src := []byte(p.Summary())
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBenchPolicy checks the benchmark's flows decide as their names say.
func TestBenchPolicy(t *testing.T) {
	p := benchPolicy(t)
	for _, c := range []struct {
		flow  Flow
		allow bool
		rule  string
	}{
		{Flow{TCP, "h399.bench.test", netip.MustParseAddr("203.0.113.9"), 8050}, true, "allow[399]"},
		{Flow{TCP, "a.b.c.w199.bench.test", netip.MustParseAddr("203.0.113.9"), 443}, true, "allow[599]"},
		{Flow{UDP, "", netip.MustParseAddr("21.45.200.7"), 443}, true, "allow[895]"},
		{Flow{TCP, "", netip.MustParseAddr("2001:db8:c7::1"), 443}, true, "allow[1099]"},
		{Flow{TCP, "x.ads99.bench.test", netip.Addr{}, 443}, false, "deny[99]"},
		{Flow{TCP, "", netip.MustParseAddr("198.51.100.99"), 443}, false, "deny[199]"},
	} {
		d := p.Decide(c.flow)
		if (d.Verdict == Allow) != c.allow || d.Rule != c.rule {
			t.Errorf("Decide(%+v) = %v, want %s", c.flow, d, c.rule)
		}
	}
}
