package lab

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/policy"
)

func TestLabPolicyParses(t *testing.T) {
	for _, b := range append([]string{""}, BreakLayers()...) {
		text, err := Policy(b)
		if err != nil {
			t.Fatalf("Policy(%q): %v", b, err)
		}
		if _, err := policy.Parse("lab.yaml", text); err != nil {
			t.Errorf("Policy(%q) does not parse: %v", b, err)
		}
	}
	if _, err := Policy("bogus"); err == nil || !strings.Contains(err.Error(), "metadata") {
		t.Errorf("Policy(bogus): %v, want an error listing the layers", err)
	}
}

// TestLabPolicyDecisions checks, without any namespace, that the lab
// policy decides the attempts' destinations the way the catalogue says.
func TestLabPolicyDecisions(t *testing.T) {
	text, _ := Policy("")
	p, err := policy.Parse("lab.yaml", text)
	if err != nil {
		t.Fatal(err)
	}
	p = p.WithLocal(netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00::/64"))
	tcp := policy.TCP
	for _, tc := range []struct {
		why  string
		f    policy.Flow
		rule string // "allow" prefix for any allow rule
	}{
		{"the approved app", policy.Flow{Proto: tcp, Host: internet.AppName, Addr: netip.MustParseAddr(internet.AppV4), Port: 443}, "allow"},
		{"the wildcard on 8080", policy.Flow{Proto: tcp, Host: internet.OKName, Addr: netip.MustParseAddr(internet.OKV4), Port: 8080}, "allow"},
		{"dns.hosts", policy.Flow{Proto: tcp, Host: internet.StaticName, Addr: netip.MustParseAddr(internet.StaticV4), Port: 8080}, "allow"},
		{"metadata despite the careless cidr rule", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.MetadataV4), Port: 80}, "builtin:metadata"},
		{"metadata through dns.hosts", policy.Flow{Proto: tcp, Host: internet.MetaAliasName, Addr: netip.MustParseAddr(internet.MetadataV4), Port: 80}, "builtin:metadata"},
		{"NAT64 metadata", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.NAT64Meta), Port: 80}, "builtin:metadata"},
		{"6to4 metadata", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.SixToFour), Port: 80}, "builtin:metadata"},
		{"Teredo metadata", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.TeredoMeta), Port: 80}, "builtin:metadata"},
		{"a private answer for an approved name", policy.Flow{Proto: tcp, Host: internet.PrivateName, Addr: netip.MustParseAddr(internet.PrivateV4), Port: 8080}, "builtin:special-range"},
		{"a loopback answer", policy.Flow{Proto: tcp, Host: internet.LoopName, Addr: netip.MustParseAddr("127.0.0.1"), Port: 8080}, "builtin:special-range"},
		{"the gateway", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.GatewayV4), Port: 8080}, "builtin:special-range"},
		{"NAT64 of a private address", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.NAT64Private), Port: 8080}, "builtin:special-range"},
		{"the app's address by literal", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.AppV4), Port: 80}, "default"},
		{"a port the app is not approved on", policy.Flow{Proto: tcp, Host: internet.AppName, Port: 22}, "default"},
		{"UDP to the app", policy.Flow{Proto: policy.UDP, Host: internet.AppName, Port: 443}, "default"},
		{"the wildcard's apex", policy.Flow{Proto: tcp, Host: "ok.test", Port: 8080}, "default"},
		{"an unapproved address", policy.Flow{Proto: tcp, Addr: netip.MustParseAddr(internet.OtherV4), Port: 8080}, "default"},
	} {
		d := p.Decide(tc.f)
		ok := d.Rule == tc.rule || tc.rule == "allow" && d.Verdict == policy.Allow
		if !ok {
			t.Errorf("%s: %v, want %s", tc.why, d, tc.rule)
		}
	}
}
