package dns

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/policy"
)

// TestGatewayHandshakeAnswered: a gateway's DNS answers TXT
// <label>.nsgate-gateway.invalid with its token (TTL 0, whatever the
// policy: here deny-all) and records it; every other shape of the name or
// type is an ordinary name, refused by the policy.
func TestGatewayHandshakeAnswered(t *testing.T) {
	s, sink, up := newTestServer(t, Config{Policy: func() *policy.Policy { return policy.DenyAll() }}, zone{})
	reply := parseMsg(t, s.ServeDNS(makeQuery(7, question("0123abcd89ef4567.nsgate-gateway.invalid.", dnsmessage.TypeTXT)), false))
	if reply.h.RCode != dnsmessage.RCodeSuccess || len(reply.answers) != 1 {
		t.Fatalf("handshake reply %+v, want one answer", reply)
	}
	a := reply.answers[0]
	txt, ok := a.Body.(*dnsmessage.TXTResource)
	if !ok || a.Header.TTL != 0 || !slices.Equal(txt.TXT, []string{gatewayToken}) || a.Header.Name.String() != "0123abcd89ef4567.nsgate-gateway.invalid." {
		t.Fatalf("handshake answer %+v, want TXT %q, TTL 0, owned by the question", a, gatewayToken)
	}
	recs := sink.dns()
	if len(recs) != 1 || recs[0].Rule != RuleGateway || recs[0].Action != "allow" || recs[0].QType != "TXT" {
		t.Fatalf("records %+v, want one allow dns record with rule %s", recs, RuleGateway)
	}
	for _, q := range []dnsmessage.Question{
		question("nsgate-gateway.invalid.", dnsmessage.TypeTXT),                   // no label
		question("a.b.nsgate-gateway.invalid.", dnsmessage.TypeTXT),               // two labels
		question("a_b.nsgate-gateway.invalid.", dnsmessage.TypeTXT),               // not a host label
		question("0123abcd89ef4567.nsgate-gateway.invalid.", dnsmessage.TypeA),    // not TXT
		question("0123abcd89ef4567.nsgate-gateway.invalid2.", dnsmessage.TypeTXT), // another zone
	} {
		r := parseMsg(t, s.ServeDNS(makeQuery(8, q), false))
		if r.h.RCode != dnsmessage.RCodeNameError || len(r.answers) != 0 {
			t.Errorf("%s %s: rcode %v with %d answers, want NXDOMAIN", q.Name, q.Type, r.h.RCode, len(r.answers))
		}
	}
	if up.count() != 0 {
		t.Errorf("%d upstream queries: the handshake is never sent on", up.count())
	}
}

// TestResolveBehindGateway: an inner server whose upstream is an outer
// server (its ServeDNS, as over the link) resolves an allowed name to the
// outer one's fake addresses, and lists them as the gateway's after the
// handshake, which the outer server answered; the answer is cached whole.
func TestResolveBehindGateway(t *testing.T) {
	outerPol := mustPolicy(t, testPolicyYAML)
	outer, outerSink, _ := newTestServer(t, Config{IPv6: true, Policy: func() *policy.Policy { return outerPol }}, nil)
	var txt int
	inner, _, _ := newTestServer(t, Config{IPv6: true, Exchange: func(ctx context.Context, server string, msg []byte) ([]byte, error) {
		var p dnsmessage.Parser
		if _, err := p.Start(msg); err == nil {
			if q, err := p.Question(); err == nil && q.Type == dnsmessage.TypeTXT {
				txt++
			}
		}
		return outer.ServeDNS(msg, false), nil
	}}, nil)
	ans, err := inner.ResolveName(context.Background(), "app.test")
	if err != nil {
		t.Fatal(err)
	}
	want := addrs("198.18.0.1", "fd6e:7367:6174::1")
	if !slices.Equal(ans.Addrs, want) || !slices.Equal(ans.Gateway, want) {
		t.Fatalf("answer %+v, want %v as the gateway's", ans, want)
	}
	if txt != 1 {
		t.Errorf("%d handshakes, want one per server and lookup", txt)
	}
	var handshake bool
	for _, r := range outerSink.dns() {
		handshake = handshake || r.Rule == RuleGateway
	}
	if !handshake {
		t.Error("the outer server recorded no handshake")
	}
	again, err := inner.ResolveName(context.Background(), "app.test")
	if err != nil || !slices.Equal(again.Gateway, want) || txt != 1 {
		t.Errorf("cached answer %+v %v (%d handshakes), want the same without asking again", again, err, txt)
	}
}

// TestResolveFakeRangeWithoutGateway: a resolver that answers a name with
// an address in nsgate's pools but is no gateway (no handshake answer, a
// wrong one, one for another name or query) gets no Gateway mark; answers
// outside the pools cause no handshake at all.
func TestResolveFakeRangeWithoutGateway(t *testing.T) {
	bench := rrA("bench.app.test.", 60, "198.18.0.9")
	public := rrA("api.app.test.", 60, "203.0.113.5")
	txtRR := func(name, text string) dnsmessage.Resource {
		return dnsmessage.Resource{Header: rrHeader(name, dnsmessage.TypeTXT, 0), Body: &dnsmessage.TXTResource{TXT: []string{text}}}
	}
	for _, tc := range []struct {
		why       string
		handshake func(h dnsmessage.Header, q dnsmessage.Question) []byte
	}{
		{"NXDOMAIN, as a real resolver answers .invalid", func(h dnsmessage.Header, q dnsmessage.Question) []byte {
			return buildReply(h.ID, q, dnsmessage.RCodeNameError)
		}},
		{"another text", func(h dnsmessage.Header, q dnsmessage.Question) []byte {
			return buildReply(h.ID, q, dnsmessage.RCodeSuccess, txtRR(q.Name.String(), "nsgate-gateway v2"))
		}},
		{"the token for another name", func(h dnsmessage.Header, q dnsmessage.Question) []byte {
			return buildReply(h.ID, q, dnsmessage.RCodeSuccess, txtRR("guessed.nsgate-gateway.invalid.", gatewayToken))
		}},
		{"the token in a reply to another query id", func(h dnsmessage.Header, q dnsmessage.Question) []byte {
			return buildReply(h.ID+1, q, dnsmessage.RCodeSuccess, txtRR(q.Name.String(), gatewayToken))
		}},
		{"the token under another question", func(h dnsmessage.Header, q dnsmessage.Question) []byte {
			q2 := question("0000000000000000.nsgate-gateway.invalid.", dnsmessage.TypeTXT)
			return buildReply(h.ID, q2, dnsmessage.RCodeSuccess, txtRR(q2.Name.String(), gatewayToken))
		}},
	} {
		t.Run(tc.why, func(t *testing.T) {
			z := zone{"bench.app.test./A": {bench}, "api.app.test./A": {public}}
			s, _, up := newTestServer(t, Config{}, z)
			up.handle = func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				if q.Type == dnsmessage.TypeTXT && strings.HasSuffix(q.Name.String(), ".nsgate-gateway.invalid.") {
					return tc.handshake(h, q), nil
				}
				return z.handle(server, h, q)
			}
			ans, err := s.ResolveName(context.Background(), "bench.app.test")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ans.Addrs, addrs("198.18.0.9")) || len(ans.Gateway) != 0 {
				t.Fatalf("answer %+v, want 198.18.0.9 and no gateway mark", ans)
			}
			if n := up.count(); n != 2 {
				t.Errorf("%d upstream queries, want the A query and one handshake", n)
			}
			if _, err := s.ResolveName(context.Background(), "api.app.test"); err != nil {
				t.Fatal(err)
			}
			if n := up.count(); n != 3 {
				t.Errorf("%d upstream queries after a public answer, want no handshake for it", n)
			}
		})
	}
}

func TestIsGatewayProbe(t *testing.T) {
	for name, want := range map[string]bool{
		"0123abcd89ef4567.nsgate-gateway.invalid":           true,
		"x.nsgate-gateway.invalid":                          true,
		"a-b.nsgate-gateway.invalid":                        true,
		strings.Repeat("a", 63) + ".nsgate-gateway.invalid": true,
		strings.Repeat("a", 64) + ".nsgate-gateway.invalid": false,
		"nsgate-gateway.invalid":                            false,
		".nsgate-gateway.invalid":                           false,
		"a.b.nsgate-gateway.invalid":                        false,
		"a_b.nsgate-gateway.invalid":                        false,
		"anensgate-gateway.invalid":                         false,
	} {
		if got := isGatewayProbe(name); got != want {
			t.Errorf("isGatewayProbe(%q) = %v, want %v", name, got, want)
		}
	}
	if !isNsgateFake(netip.MustParseAddr("::ffff:198.19.255.255")) || isNsgateFake(netip.MustParseAddr("198.20.0.1")) {
		t.Error("isNsgateFake does not follow the pools")
	}
}
