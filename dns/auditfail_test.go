package dns

import (
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// failingSink is a fakeSink whose audit can fail (audit.Failer).
type failingSink struct {
	fakeSink
	failed chan struct{}
}

func (f *failingSink) Failed() <-chan struct{} { return f.failed }

// TestAuditFailureRefusesEveryAnswer: once the audit log has failed, the
// server answers nothing but refusals, for approved names too (the audit
// fails closed: what cannot be recorded is not done).
func TestAuditFailureRefusesEveryAnswer(t *testing.T) {
	sink := &failingSink{failed: make(chan struct{})}
	s, _, _ := newTestServer(t, Config{Audit: sink}, nil)
	ask := func(name string, typ dnsmessage.Type) parsed {
		return parseMsg(t, s.ServeDNS(makeQuery(7, question(name, typ)), false))
	}
	if r := ask("app.test.", dnsmessage.TypeA); r.h.RCode != dnsmessage.RCodeSuccess || len(answerAddrs(r)) != 1 {
		t.Fatalf("before the failure: rcode %v, %d answers; want an answer", r.h.RCode, len(answerAddrs(r)))
	}
	before := len(sink.dns())
	close(sink.failed)
	for _, q := range []struct {
		name string
		typ  dnsmessage.Type
		why  string
	}{
		{"app.test.", dnsmessage.TypeA, "an approved name gets no fake address"},
		{"app.test.", dnsmessage.TypeAAAA, "nor an IPv6 one"},
		{"app.test.", dnsmessage.TypeTXT, "nor an empty answer"},
		{"evil.test.", dnsmessage.TypeA, "a refused name is refused, not NXDOMAIN (the decision cannot be recorded)"},
		{"1.0.18.198.in-addr.arpa.", dnsmessage.TypePTR, "no reverse answer either"},
	} {
		r := ask(q.name, q.typ)
		if r.h.RCode != dnsmessage.RCodeRefused || len(r.answers) != 0 {
			t.Errorf("%s: rcode %v with %d answers; want REFUSED and none", q.why, r.h.RCode, len(r.answers))
		}
	}
	if n := len(sink.dns()); n != before {
		t.Errorf("%d records logged after the failure; the failed log takes none", n-before)
	}
	if st := s.Stats(); st.Denied != 5 {
		t.Errorf("stats %+v; want the 5 refusals counted as denied", st)
	}
}
