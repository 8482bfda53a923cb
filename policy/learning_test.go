package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestLearning: a Learning policy allows what the decision order leaves to
// the default, and nothing that a built-in set, a deny rule or the
// gateway's own prefixes refuse.
func TestLearning(t *testing.T) {
	base := mustParse(t, `
version: 1
allow:
  - host: app.test      # allow[0]
    ports: [8080]
  - host: lan.test      # allow[1]
    ports: [8080]
  - host: loop.svc      # allow[2]
    proto: udp
    ports: [5353]
deny:
  - host: ads.test      # deny[0]
  - cidr: 203.0.113.66/32
dns:
  hosts:
    lan.test: [10.5.5.5]
    loop.svc: [127.0.0.1, "::1"]
    pub.svc: [198.51.100.9]
`)
	p := Learning(base).WithLocal(netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("10.0.2.0/24"))
	for _, tc := range []struct {
		why  string
		f    Flow
		want Verdict
		rule string
	}{
		{"a name no rule covers is learned", Flow{Proto: TCP, Host: "new.test", Port: 443}, Allow, RuleLearn},
		{"any port and proto", Flow{Proto: UDP, Host: "new.test", Port: 3478}, Allow, RuleLearn},
		{"a public IP literal is learned", Flow{Proto: TCP, Addr: ip("198.51.100.7"), Port: 81}, Allow, RuleLearn},
		{"a public IPv6 literal too", Flow{Proto: UDP, Addr: ip("2001:db8::7"), Port: 443}, Allow, RuleLearn},
		{"the base's allow rules decide first, under their id", Flow{Proto: TCP, Host: "app.test", Port: 8080}, Allow, "allow[0]"},
		{"the base's rule does not cover this port: learned", Flow{Proto: TCP, Host: "app.test", Port: 443}, Allow, RuleLearn},
		{"a metadata address stays refused", Flow{Proto: TCP, Addr: ip("169.254.169.254"), Port: 80}, Deny, RuleMetadata},
		{"a metadata name stays refused", Flow{Proto: TCP, Host: "metadata.google.internal", Port: 80}, Deny, RuleMetadata},
		{"metadata behind NAT64 stays refused", Flow{Proto: TCP, Addr: ip("64:ff9b::a9fe:a9fe"), Port: 80}, Deny, RuleMetadata},
		{"a deny rule still beats learning", Flow{Proto: TCP, Host: "ads.test", Port: 443}, Deny, "deny[0]"},
		{"a deny cidr rule too", Flow{Proto: TCP, Addr: ip("203.0.113.66"), Port: 443}, Deny, "deny[1]"},
		{"a special range stays refused", Flow{Proto: TCP, Addr: ip("10.1.2.3"), Port: 8080}, Deny, RuleSpecialRange},
		{"loopback stays refused", Flow{Proto: TCP, Addr: ip("127.0.0.1"), Port: 2375}, Deny, RuleSpecialRange},
		{"a name resolving to a special range stays refused", Flow{Proto: TCP, Host: "loop.test", Addr: ip("127.0.0.1"), Port: 80}, Deny, RuleSpecialRange},
		{"the gateway's own prefixes stay refused", Flow{Proto: UDP, Addr: ip("10.0.2.2"), Port: 53}, Deny, RuleSpecialRange},
		{"the fake-address pool too", Flow{Proto: TCP, Addr: ip("198.18.0.9"), Port: 443}, Deny, RuleSpecialRange},
		{"dns.hosts lifts the range for its own address where an allow rule matches, as in base", Flow{Proto: TCP, Host: "lan.test", Addr: ip("10.5.5.5"), Port: 8080}, Allow, "allow[1]"},
		// Learning is bounded by the guard exactly as enforcing is: a
		// dns.hosts entry lifts it only where an allow rule matches the
		// port, so learning never opens the entry's other ports.
		{"dns.hosts private address, another TCP port: refused, not learned", Flow{Proto: TCP, Host: "lan.test", Addr: ip("10.5.5.5"), Port: 6379}, Deny, RuleSpecialRange},
		{"dns.hosts private address, UDP: refused, not learned", Flow{Proto: UDP, Host: "lan.test", Addr: ip("10.5.5.5"), Port: 8080}, Deny, RuleSpecialRange},
		{"dns.hosts loopback, the rule's UDP port: allowed by the rule", Flow{Proto: UDP, Host: "loop.svc", Addr: ip("127.0.0.1"), Port: 5353}, Allow, "allow[2]"},
		{"dns.hosts loopback, another UDP port: refused", Flow{Proto: UDP, Host: "loop.svc", Addr: ip("127.0.0.1"), Port: 53}, Deny, RuleSpecialRange},
		{"dns.hosts loopback, TCP on the rule's port: refused (rule is udp)", Flow{Proto: TCP, Host: "loop.svc", Addr: ip("127.0.0.1"), Port: 5353}, Deny, RuleSpecialRange},
		{"dns.hosts IPv6 loopback, TCP 22: refused", Flow{Proto: TCP, Host: "loop.svc", Addr: ip("::1"), Port: 22}, Deny, RuleSpecialRange},
		{"a dns.hosts name with a public address no rule covers: still learned", Flow{Proto: TCP, Host: "pub.svc", Addr: ip("198.51.100.9"), Port: 22}, Allow, RuleLearn},
	} {
		d := p.Decide(tc.f)
		if d.Verdict != tc.want || d.Rule != tc.rule {
			t.Errorf("%s: Decide(%+v) = %v, want %v rule=%s", tc.why, tc.f, d, tc.want, tc.rule)
		}
	}
	for _, tc := range []struct {
		name string
		want Verdict
		rule string
	}{
		{"new.test", Allow, RuleLearn},
		{"app.test", Allow, "allow[0]"},
		{"lan.test", Allow, RuleHosts},
		{"ads.test", Deny, "deny[0]"},
		{"metadata.google.internal", Deny, RuleMetadata},
		{"instance-data", Deny, RuleMetadata},
	} {
		if d := p.NameAllowed(tc.name); d.Verdict != tc.want || d.Rule != tc.rule {
			t.Errorf("NameAllowed(%s) = %v, want %v rule=%s", tc.name, d, tc.want, tc.rule)
		}
	}
	// The base is not changed, and the flag survives WithLocal.
	if d := base.Decide(Flow{Proto: TCP, Host: "new.test", Port: 443}); d.Verdict != Deny || d.Rule != RuleDefault {
		t.Errorf("base after Learning: %v, want deny rule=default", d)
	}
	if base.IsLearning() || !p.IsLearning() {
		t.Errorf("IsLearning: base %v, learning %v", base.IsLearning(), p.IsLearning())
	}
	if !strings.Contains(p.Summary(), "# learning:") {
		t.Errorf("Summary of a learning policy does not say so:\n%s", p.Summary())
	}
	if Learning(nil).Decide(Flow{Proto: TCP, Host: "x.test", Port: 1}).Rule != RuleLearn {
		t.Errorf("Learning(nil) does not learn")
	}
}

func TestLearningAllocs(t *testing.T) {
	p := Learning(nil)
	f := Flow{Proto: TCP, Host: "new.test", Addr: ip("203.0.113.9"), Port: 443}
	if n := testing.AllocsPerRun(100, func() { p.Decide(f) }); n != 0 {
		t.Errorf("Decide allocates %v times when learning", n)
	}
}

// TestRuleSpecRoundTrip: AllowRules and DenyRules, written with YAML,
// parse back to the same rules.
func TestRuleSpecRoundTrip(t *testing.T) {
	p := mustParse(t, decideSrc)
	var b strings.Builder
	b.WriteString("version: 1\nallow:\n")
	for _, r := range p.AllowRules() {
		b.WriteString("  - " + r.YAML() + "\n")
	}
	b.WriteString("deny:\n")
	for _, r := range p.DenyRules() {
		b.WriteString("  - " + r.YAML() + "\n")
	}
	q := mustParse(t, b.String())
	if got, want := len(q.AllowRules())+len(q.DenyRules()), len(p.AllowRules())+len(p.DenyRules()); got != want {
		t.Fatalf("round trip: %d rules, want %d", got, want)
	}
	for i, r := range p.AllowRules() {
		if got := q.AllowRules()[i].YAML(); got != r.YAML() {
			t.Errorf("allow[%d]: %s, want %s", i, got, r.YAML())
		}
	}
	for i, r := range p.DenyRules() {
		if got := q.DenyRules()[i].YAML(); got != r.YAML() {
			t.Errorf("deny[%d]: %s, want %s", i, got, r.YAML())
		}
	}
	if got := p.HostNames(); len(got) != 5 || got[0] != "app.test" {
		t.Errorf("HostNames = %v", got)
	}
}
