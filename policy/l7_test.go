package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestL7None checks where "l7: none" is valid, what it says, and that the
// summary and explain show it.
func TestL7None(t *testing.T) {
	errCases := []struct {
		why, rule, want string
	}{
		{"an unknown mode is an error", "{host: app.test, proto: udp, l7: quic}", `allow[0].l7: "quic" is not an l7 mode`},
		{"an empty mode is an error", "{host: app.test, proto: udp, l7: \"\"}", "allow[0].l7: empty string"},
		{"not a string", "{host: app.test, proto: udp, l7: [none]}", "allow[0].l7"},
		{"tcp flows keep their TLS and HTTP checks", "{host: app.test, l7: none}", "allow[0].l7: l7: none applies to UDP flows"},
		{"tcp flows keep their TLS and HTTP checks (explicit)", "{host: app.test, proto: tcp, l7: none}", "allow[0].l7: l7: none applies to UDP flows"},
		{"a cidr rule's flows have no name", "{cidr: 203.0.113.0/24, proto: udp, l7: none}", "allow[0].l7: only host rules take l7: none"},
	}
	for _, tc := range errCases {
		t.Run(tc.why, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte("version: 1\nallow:\n  - "+tc.rule+"\n"))
			var errs *Errors
			if !errors.As(err, &errs) || len(*errs) != 1 || !strings.Contains((*errs)[0].Error(), tc.want) {
				t.Fatalf("got %v, want one error containing %q", err, tc.want)
			}
		})
	}
	t.Run("deny rules take no l7", func(t *testing.T) {
		_, err := Parse("test.yaml", []byte("version: 1\ndeny:\n  - {host: app.test, l7: none}\n"))
		if err == nil || !strings.Contains(err.Error(), "deny[0].l7: only allow rules take l7: none") {
			t.Fatalf("got %v", err)
		}
	})

	src := "version: 1\nallow:\n  - {host: app.test, ports: [443], proto: any}\n  - {host: voip.test, ports: [5060], proto: udp, l7: none}\n  - {host: \"*.game.test\", proto: any, l7: none}\n"
	p, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		want bool
	}{
		{"allow[0]", false}, {"allow[1]", true}, {"allow[2]", true}, {"allow[3]", false},
		{"deny[1]", false}, {"", false}, {"allow[-1]", false}, {"allow[01]", false}, {"allow[1", false}, {"hosts", false},
	} {
		if got := p.L7None(tc.rule); got != tc.want {
			t.Errorf("L7None(%q) = %v, want %v", tc.rule, got, tc.want)
		}
	}
	d := p.Decide(Flow{Proto: UDP, Host: "voip.test", Port: 5060})
	if d.Verdict != Allow || d.Rule != "allow[1]" || !strings.Contains(d.Reason, "l7 none") {
		t.Errorf("decide: %v", d)
	}
	d = p.Decide(Flow{Proto: TCP, Host: "x.game.test", Port: 80})
	if d.Verdict != Allow || !p.L7None(d.Rule) {
		t.Errorf("decide tcp on an l7: none rule: %v", d)
	}
	if e, err := p.Explain(UDP, "voip.test", 5060); err != nil || !strings.Contains(e.String(), "l7 none") {
		t.Errorf("explain: %v %v", e, err)
	}
	sum := p.Summary()
	if !strings.Contains(sum, `{host: "voip.test", proto: udp, ports: [5060], l7: none}  # allow[1]`) {
		t.Errorf("summary does not show l7: none:\n%s", sum)
	}
	again, err := Parse("summary.yaml", []byte(sum))
	if err != nil {
		t.Fatalf("summary does not parse: %v\n%s", err, sum)
	}
	if again.Summary() != sum || !again.L7None("allow[2]") {
		t.Errorf("summary does not round-trip:\n%s", again.Summary())
	}
	if !p.WithLocal(netip.MustParsePrefix("10.0.2.0/24")).L7None("allow[1]") {
		t.Error("WithLocal lost l7: none")
	}
}
