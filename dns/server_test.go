package dns

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

func TestServeDNSDecisions(t *testing.T) {
	tests := []struct {
		why    string
		q      dnsmessage.Question
		ipv6   bool
		rcode  dnsmessage.RCode
		answer dnsmessage.Type // type of the single answer; 0: none
		// the audit record expected
		qname, qtype, action, rule string
	}{
		{why: "an allowed exact name gets one fake IPv4 address",
			q: question("app.test.", dnsmessage.TypeA), answer: dnsmessage.TypeA,
			qname: "app.test", qtype: "A", action: "allow", rule: "allow[0]"},
		{why: "AAAA for an allowed name gets a fake IPv6 address when IPv6 is on",
			q: question("app.test.", dnsmessage.TypeAAAA), ipv6: true, answer: dnsmessage.TypeAAAA,
			qname: "app.test", qtype: "AAAA", action: "allow", rule: "allow[0]"},
		{why: "AAAA with IPv6 off is an empty NOERROR, not NXDOMAIN (which would poison the A answer)",
			q:     question("app.test.", dnsmessage.TypeAAAA),
			qname: "app.test", qtype: "AAAA", action: "allow", rule: "allow[0]"},
		{why: "HTTPS records could carry real address hints: empty NOERROR",
			q:     question("app.test.", dnsmessage.TypeHTTPS),
			qname: "app.test", qtype: "HTTPS", action: "allow", rule: "allow[0]"},
		{why: "SVCB: empty NOERROR",
			q:     question("app.test.", dnsmessage.TypeSVCB),
			qname: "app.test", qtype: "SVCB", action: "allow", rule: "allow[0]"},
		{why: "TXT for an allowed name: empty NOERROR, nothing upstream",
			q:     question("app.test.", dnsmessage.TypeTXT),
			qname: "app.test", qtype: "TXT", action: "allow", rule: "allow[0]"},
		{why: "MX: empty NOERROR",
			q:     question("app.test.", dnsmessage.TypeMX),
			qname: "app.test", qtype: "MX", action: "allow", rule: "allow[0]"},
		{why: "an unknown type is named TYPEn in the audit log",
			q:     question("app.test.", dnsmessage.Type(65280)),
			qname: "app.test", qtype: "TYPE65280", action: "allow", rule: "allow[0]"},
		{why: "a name no rule covers is NXDOMAIN and audited with rule default",
			q: question("unknown.test.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "unknown.test", qtype: "A", action: "deny", rule: "default"},
		{why: "a denied name's TXT (exfiltration channel) is NXDOMAIN too",
			q: question("c2VjcmV0.attacker.test.", dnsmessage.TypeTXT), rcode: dnsmessage.RCodeNameError,
			qname: "c2vjcmv0.attacker.test", qtype: "TXT", action: "deny", rule: "default"},
		{why: "case is folded: the policy sees app.test",
			q: question("APP.Test.", dnsmessage.TypeA), answer: dnsmessage.TypeA,
			qname: "app.test", qtype: "A", action: "allow", rule: "allow[0]"},
		{why: "a name under an allowed wildcard is allowed",
			q: question("img.cdn.test.", dnsmessage.TypeA), answer: dnsmessage.TypeA,
			qname: "img.cdn.test", qtype: "A", action: "allow", rule: "allow[1]"},
		{why: "a wildcard does not cover its own apex",
			q: question("cdn.test.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "cdn.test", qtype: "A", action: "deny", rule: "default"},
		{why: "a name sharing a suffix but not a label boundary is not covered",
			q: question("evilcdn.test.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "evilcdn.test", qtype: "A", action: "deny", rule: "default"},
		{why: "deny beats allow",
			q: question("x.ads.cdn.test.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "x.ads.cdn.test", qtype: "A", action: "deny", rule: "deny[0]"},
		{why: "cloud metadata names are never answered",
			q: question("metadata.google.internal.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "metadata.google.internal", qtype: "A", action: "deny", rule: "builtin:metadata"},
		{why: "the bare metadata name too",
			q: question("metadata.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "metadata", qtype: "A", action: "deny", rule: "builtin:metadata"},
		{why: "a dns.hosts name gets a fake address too (the static answer is used at dial time)",
			q: question("local.test.", dnsmessage.TypeA), answer: dnsmessage.TypeA,
			qname: "local.test", qtype: "A", action: "allow", rule: "hosts"},
		{why: "a punycode name matches its allow rule",
			q: question("xn--bcher-kva.test.", dnsmessage.TypeA), answer: dnsmessage.TypeA,
			qname: "xn--bcher-kva.test", qtype: "A", action: "allow", rule: "allow[2]"},
		{why: "raw UTF-8 on the wire is normalized to the same punycode",
			q: question("bücher.test.", dnsmessage.TypeA), answer: dnsmessage.TypeA,
			qname: "xn--bcher-kva.test", qtype: "A", action: "allow", rule: "allow[2]"},
		{why: "a homograph (Cyrillic a) is a different name",
			q: question("\u0430pp.test.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "xn--pp-6kc.test", qtype: "A", action: "deny", rule: "default"},
		{why: "an invalid name is NXDOMAIN, and the audit shows its bytes escaped",
			q: question("bad name\x01.test.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: `bad\032name\001.test.`, qtype: "A", action: "deny", rule: "default"},
		{why: "an IP literal as a name is not a name",
			q: question("169.254.169.254.", dnsmessage.TypeA), rcode: dnsmessage.RCodeNameError,
			qname: "169.254.169.254.", qtype: "A", action: "deny", rule: "default"},
		{why: "the root name is not a host",
			q: question(".", dnsmessage.TypeNS), rcode: dnsmessage.RCodeNameError,
			qname: ".", qtype: "NS", action: "deny", rule: "default"},
		{why: "a non-IN class (CHAOS version.bind) is REFUSED",
			q:     dnsmessage.Question{Name: dnsmessage.MustNewName("version.bind."), Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassCHAOS},
			rcode: dnsmessage.RCodeRefused,
			qname: "version.bind.", qtype: "TXT", action: "deny", rule: "default"},
		{why: "a reverse lookup of a real address is NXDOMAIN, never sent upstream",
			q: question("1.0.0.127.in-addr.arpa.", dnsmessage.TypePTR), rcode: dnsmessage.RCodeNameError,
			qname: "1.0.0.127.in-addr.arpa", qtype: "PTR", action: "deny", rule: "default"},
		{why: "a reverse lookup of a fake address not handed out is NXDOMAIN",
			q: question("200.0.18.198.in-addr.arpa.", dnsmessage.TypePTR), rcode: dnsmessage.RCodeNameError,
			qname: "200.0.18.198.in-addr.arpa", qtype: "PTR", action: "deny", rule: "default"},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			s, sink, up := newTestServer(t, Config{IPv6: tc.ipv6}, zone{})
			const id = 0xbeef
			raw := s.ServeDNS(makeQuery(id, tc.q), false)
			if raw == nil {
				t.Fatal("no reply")
			}
			r := parseMsg(t, raw)
			if r.h.ID != id || !r.h.Response || !r.h.RecursionDesired || !r.h.RecursionAvailable {
				t.Errorf("header %+v: want id %#x, QR, RD copied, RA", r.h, id)
			}
			if r.h.RCode != tc.rcode {
				t.Errorf("rcode %v, want %v", r.h.RCode, tc.rcode)
			}
			if len(r.questions) != 1 || r.questions[0] != tc.q {
				t.Errorf("question not echoed exactly: %+v", r.questions)
			}
			switch {
			case tc.answer == 0 && len(r.answers) != 0:
				t.Errorf("answers %+v, want none", r.answers)
			case tc.answer != 0 && (len(r.answers) != 1 || r.answers[0].Header.Type != tc.answer):
				t.Errorf("answers %+v, want one %v", r.answers, tc.answer)
			}
			for _, a := range answerAddrs(r) {
				if !s.IsFake(a) {
					t.Errorf("answer %v is not a fake address", a)
				}
				if r.answers[0].Header.TTL != uint32(DefaultTTL.Seconds()) {
					t.Errorf("ttl %d, want %v", r.answers[0].Header.TTL, DefaultTTL)
				}
				if got, ok := s.NameOf(a); !ok || got != tc.qname {
					t.Errorf("NameOf(%v) = %q, %v; want %q", a, got, ok, tc.qname)
				}
			}
			if n := up.count(); n != 0 {
				t.Errorf("upstream received %d queries; ServeDNS must never ask upstream", n)
			}
			ev := sink.dns()
			if len(ev) != 1 {
				t.Fatalf("audit events %+v, want exactly one", ev)
			}
			want := audit.DNS{QName: tc.qname, QType: tc.qtype, Action: tc.action, Rule: tc.rule}
			for _, a := range answerAddrs(r) {
				want.Answer = append(want.Answer, a.String())
			}
			if got := ev[0]; got.QName != want.QName || got.QType != want.QType || got.Action != want.Action ||
				got.Rule != want.Rule || !slices.Equal(got.Answer, want.Answer) {
				t.Errorf("audit %+v, want %+v", got, want)
			}
		})
	}
}

func TestServeDNSMessageErrors(t *testing.T) {
	s, sink, _ := newTestServer(t, Config{}, nil)
	q := question("app.test.", dnsmessage.TypeA)
	bad := question("unapproved.test.", dnsmessage.TypeA)
	const malformed, opcode = "builtin:dns-malformed", "builtin:dns-opcode"
	tests := []struct {
		why   string
		msg   []byte
		nil   bool
		rcode dnsmessage.RCode
		qd    int // questions echoed
		// The audit record every message leaves: a refusal (action
		// deny) under rule, naming qname/qtype when a question was read.
		rule, qname, qtype string
	}{
		{why: "empty input is dropped", msg: nil, nil: true, rule: malformed},
		{why: "a message shorter than a header has no usable header: dropped", msg: []byte{0x12, 0x34, 0x01}, nil: true, rule: malformed},
		{why: "a response is never answered (no reflection loops)",
			msg: makeQuery(7, bad, withHeader(func(h *dnsmessage.Header) { h.Response = true })), nil: true, rule: malformed},
		{why: "two questions: FORMERR keeping the ID",
			msg: makeQuery(7, q, withQuestions(q, question("img.cdn.test.", dnsmessage.TypeA))), rcode: dnsmessage.RCodeFormatError, rule: malformed},
		{why: "no question: FORMERR",
			msg: makeQuery(7, q, withQuestions()), rcode: dnsmessage.RCodeFormatError, rule: malformed},
		{why: "a header claiming 65535 questions with one present: FORMERR",
			msg: func() []byte {
				m := makeQuery(7, q)
				binary.BigEndian.PutUint16(m[4:], 0xffff)
				return m
			}(), rcode: dnsmessage.RCodeFormatError, rule: malformed},
		{why: "a question cut short: FORMERR",
			msg: makeQuery(7, q)[:20], rcode: dnsmessage.RCodeFormatError, rule: malformed},
		{why: "a compression pointer loop in the question: FORMERR",
			msg: []byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}, rcode: dnsmessage.RCodeFormatError, rule: malformed},
		{why: "opcode STATUS: NOTIMP with the question echoed",
			msg: makeQuery(7, q, withHeader(func(h *dnsmessage.Header) { h.OpCode = 2 })), rcode: dnsmessage.RCodeNotImplemented, qd: 1,
			rule: opcode, qname: "app.test", qtype: "A"},
		{why: "opcode UPDATE naming an unapproved zone: NOTIMP, and the name is in the log",
			msg:   makeQuery(7, question("unapproved.test.", dnsmessage.TypeSOA), withHeader(func(h *dnsmessage.Header) { h.OpCode = 5 })),
			rcode: dnsmessage.RCodeNotImplemented, qd: 1, rule: opcode, qname: "unapproved.test", qtype: "SOA"},
		{why: "opcode UPDATE with garbage after the header: NOTIMP without a question",
			msg: []byte{0, 7, 0x28, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff}, rcode: dnsmessage.RCodeNotImplemented, rule: opcode},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			before := len(sink.dns())
			out := s.ServeDNS(tc.msg, false)
			ev := sink.dns()[before:]
			if len(ev) != 1 || ev[0].Action != "deny" || ev[0].Rule != tc.rule || ev[0].QName != tc.qname || ev[0].QType != tc.qtype || len(ev[0].Answer) != 0 {
				t.Errorf("audit records %+v, want one deny by rule %s for %q %q", ev, tc.rule, tc.qname, tc.qtype)
			}
			if tc.nil {
				if out != nil {
					t.Fatalf("reply % x, want drop", out)
				}
				return
			}
			r := parseMsg(t, out)
			if r.h.ID != 7 || !r.h.Response || r.h.RCode != tc.rcode || len(r.questions) != tc.qd || len(r.answers) != 0 {
				t.Errorf("reply %+v with %d questions, %d answers; want id 7 rcode %v, %d questions, no answers",
					r.h, len(r.questions), len(r.answers), tc.rcode, tc.qd)
			}
		})
	}
	st := s.Stats()
	if st.Dropped != 3 || st.Malformed != 8 || st.Queries != 11 || st.Denied != 0 {
		t.Errorf("stats %+v, want 3 dropped, 8 malformed of 11, none denied as names", st)
	}
}

func TestServeDNSEDNSAndTransport(t *testing.T) {
	s, _, _ := newTestServer(t, Config{}, nil)
	q := question("app.test.", dnsmessage.TypeA)
	for _, tcp := range []bool{false, true} {
		r := parseMsg(t, s.ServeDNS(makeQuery(1, q, withEDNS()), tcp))
		if len(r.addits) != 1 || r.addits[0].Header.Type != dnsmessage.TypeOPT {
			t.Fatalf("tcp=%v: additionals %+v, want one OPT echoed", tcp, r.addits)
		}
		if size := int(r.addits[0].Header.Class); size != ednsSize {
			t.Errorf("OPT payload size %d, want %d", size, ednsSize)
		}
		if len(r.answers) != 1 {
			t.Errorf("tcp=%v: answers %+v", tcp, r.answers)
		}
	}
	r := parseMsg(t, s.ServeDNS(makeQuery(1, q), false))
	if len(r.addits) != 0 {
		t.Errorf("OPT added to a query without EDNS: %+v", r.addits)
	}
}

// TestExtendedDNSError: a name the policy refuses is NXDOMAIN with an
// Extended DNS Error "Blocked" (RFC 8914) naming nsgate, the rule and the
// reason, when the query speaks EDNS; an approved name and a query
// without EDNS carry none.
func TestExtendedDNSError(t *testing.T) {
	s, _, _ := newTestServer(t, Config{}, nil)
	ede := func(r parsed) (code uint16, text string, ok bool) {
		for _, a := range r.addits {
			opt, isOPT := a.Body.(*dnsmessage.OPTResource)
			if !isOPT {
				continue
			}
			for _, o := range opt.Options {
				if o.Code == optionEDE && len(o.Data) >= 2 {
					return uint16(o.Data[0])<<8 | uint16(o.Data[1]), string(o.Data[2:]), true
				}
			}
		}
		return 0, "", false
	}
	for _, tcp := range []bool{false, true} {
		r := parseMsg(t, s.ServeDNS(makeQuery(1, question("evil.test.", dnsmessage.TypeA), withEDNS()), tcp))
		code, text, ok := ede(r)
		if r.h.RCode != dnsmessage.RCodeNameError || !ok || code != edeBlocked {
			t.Fatalf("tcp=%v: rcode %v, EDE %v %d %q; want NXDOMAIN with EDE 15 (Blocked)", tcp, r.h.RCode, ok, code, text)
		}
		for _, w := range []string{"nsgate", "rule default", "evil.test"} {
			if !strings.Contains(text, w) {
				t.Errorf("EDE text %q does not name %q", text, w)
			}
		}
	}
	r := parseMsg(t, s.ServeDNS(makeQuery(2, question("metadata.google.internal.", dnsmessage.TypeA), withEDNS()), false))
	if _, text, ok := ede(r); !ok || !strings.Contains(text, "metadata") {
		t.Errorf("a metadata name: EDE %v %q, want the metadata rule", ok, text)
	}
	if _, _, ok := ede(parseMsg(t, s.ServeDNS(makeQuery(3, question("app.test.", dnsmessage.TypeA), withEDNS()), false))); ok {
		t.Errorf("an approved name carries an EDE")
	}
	if r := parseMsg(t, s.ServeDNS(makeQuery(4, question("evil.test.", dnsmessage.TypeA)), false)); len(r.addits) != 0 {
		t.Errorf("EDE without EDNS in the query: %+v", r.addits)
	}
}

func TestReplyTruncation(t *testing.T) {
	// Fake answers never reach 512 bytes, so drive the builder directly:
	// a long-named question with answers past the limit.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + ".test."
	q := question(long, dnsmessage.TypeA)
	h := dnsmessage.Header{ID: 9, RecursionDesired: true}
	build := func() *reply {
		r := newReply(h, dnsmessage.RCodeSuccess, &q)
		for i := range 40 {
			r.answer(dnsmessage.TypeA, 5, []byte{198, 18, 0, byte(i)})
		}
		r.opt()
		return &r
	}
	udp := parseMsg(t, build().finish(maxUDP))
	if !udp.h.Truncated || len(udp.answers) != 0 || len(udp.questions) != 1 || udp.questions[0] != q {
		t.Errorf("udp reply over 512: %+v, %d answers; want TC, question only", udp.h, len(udp.answers))
	}
	tcp := parseMsg(t, build().finish(0))
	if tcp.h.Truncated || len(tcp.answers) != 40 {
		t.Errorf("tcp reply: %+v, %d answers; want all 40, no TC", tcp.h, len(tcp.answers))
	}
}

func TestFakeAddressStable(t *testing.T) {
	s, _, _ := newTestServer(t, Config{IPv6: true}, nil)
	ask := func(name string, qt dnsmessage.Type) netip.Addr {
		t.Helper()
		r := parseMsg(t, s.ServeDNS(makeQuery(1, question(name, qt)), false))
		a := answerAddrs(r)
		if len(a) != 1 {
			t.Fatalf("%s %v: answers %v", name, qt, a)
		}
		return a[0]
	}
	a1 := ask("app.test.", dnsmessage.TypeA)
	b1 := ask("img.cdn.test.", dnsmessage.TypeA)
	a2 := ask("App.Test.", dnsmessage.TypeA)
	a6 := ask("app.test.", dnsmessage.TypeAAAA)
	b6 := ask("img.cdn.test.", dnsmessage.TypeAAAA)
	if a1 != a2 {
		t.Errorf("same name, two addresses: %v %v", a1, a2)
	}
	if a1 == b1 || a6 == b6 {
		t.Errorf("two names share an address: %v %v / %v %v", a1, b1, a6, b6)
	}
	if a1 != netip.MustParseAddr("198.18.0.1") {
		t.Errorf("first address %v, want 198.18.0.1 (the pool's first address is skipped)", a1)
	}
	if a6 != netip.MustParseAddr("fd6e:7367:6174::1") {
		t.Errorf("first v6 address %v, want fd6e:7367:6174::1", a6)
	}
	for _, tc := range []struct {
		why  string
		addr netip.Addr
		name string
		ok   bool
	}{
		{"v4 round trip", a1, "app.test", true},
		{"v6 round trip", a6, "app.test", true},
		{"second name", b1, "img.cdn.test", true},
		{"an IPv4-mapped fake address is the same address", netip.AddrFrom16(a1.As16()), "app.test", true},
		{"a pool address not handed out", netip.MustParseAddr("198.18.0.77"), "", false},
		{"the pool's network address", netip.MustParseAddr("198.18.0.0"), "", false},
		{"an address outside the pools", netip.MustParseAddr("203.0.113.1"), "", false},
		{"a v6 address in the pool's /64 but far from any slot", netip.MustParseAddr("fd6e:7367:6174:0:1::1"), "", false},
		{"the zero Addr", netip.Addr{}, "", false},
	} {
		name, ok := s.NameOf(tc.addr)
		if name != tc.name || ok != tc.ok {
			t.Errorf("%s: NameOf(%v) = %q, %v; want %q, %v", tc.why, tc.addr, name, ok, tc.name, tc.ok)
		}
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"198.18.0.1", true}, {"198.19.255.255", true}, {"198.18.200.3", true},
		{"::ffff:198.18.0.1", true}, {"fd6e:7367:6174::5", true},
		{"198.20.0.1", false}, {"10.0.2.3", false}, {"fd00::3", false},
	} {
		if got := s.IsFake(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("IsFake(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	// The PTR of a handed-out fake address answers its name.
	for _, rev := range []string{"1.0.18.198.in-addr.arpa.", "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.4.7.1.6.7.6.3.7.e.6.d.f.ip6.arpa."} {
		r := parseMsg(t, s.ServeDNS(makeQuery(1, question(rev, dnsmessage.TypePTR)), false))
		if len(r.answers) != 1 {
			t.Fatalf("PTR %s: %+v", rev, r)
		}
		if ptr, ok := r.answers[0].Body.(*dnsmessage.PTRResource); !ok || ptr.PTR.String() != "app.test." {
			t.Errorf("PTR %s answered %+v, want app.test.", rev, r.answers[0].Body)
		}
	}
}

func TestFakeAddressPolicySwap(t *testing.T) {
	// A PTR for a fake address whose name the current policy no longer
	// allows is NXDOMAIN.
	var mu sync.Mutex
	pol := mustPolicy(t, testPolicyYAML)
	s, _, _ := newTestServer(t, Config{Policy: func() *policy.Policy { mu.Lock(); defer mu.Unlock(); return pol }}, nil)
	s.ServeDNS(makeQuery(1, question("app.test.", dnsmessage.TypeA)), false)
	mu.Lock()
	pol = mustPolicy(t, "version: 1\n")
	mu.Unlock()
	r := parseMsg(t, s.ServeDNS(makeQuery(1, question("1.0.18.198.in-addr.arpa.", dnsmessage.TypePTR)), false))
	if r.h.RCode != dnsmessage.RCodeNameError {
		t.Errorf("PTR after the name was dropped from the policy: %v", r.h.RCode)
	}
	r = parseMsg(t, s.ServeDNS(makeQuery(1, question("app.test.", dnsmessage.TypeA)), false))
	if r.h.RCode != dnsmessage.RCodeNameError {
		t.Errorf("A after the name was dropped from the policy: %v", r.h.RCode)
	}
	if _, ok := s.NameOf(netip.MustParseAddr("198.18.0.1")); !ok {
		t.Error("the mapping itself must stay (flows are checked against the policy at dial time)")
	}
}

func TestNilPolicyDeniesAll(t *testing.T) {
	s, sink, _ := newTestServer(t, Config{Policy: func() *policy.Policy { return nil }}, nil)
	r := parseMsg(t, s.ServeDNS(makeQuery(1, question("app.test.", dnsmessage.TypeA)), false))
	if r.h.RCode != dnsmessage.RCodeNameError {
		t.Errorf("rcode %v, want NXDOMAIN", r.h.RCode)
	}
	if ev := sink.dns(); len(ev) != 1 || ev[0].Action != "deny" || ev[0].Rule != "default" {
		t.Errorf("audit %+v", ev)
	}
}

func TestTableEviction(t *testing.T) {
	s, _, _ := newTestServer(t, Config{MaxNames: 3}, nil)
	addr := func(name string) netip.Addr {
		t.Helper()
		a := answerAddrs(parseMsg(t, s.ServeDNS(makeQuery(1, question(name, dnsmessage.TypeA)), false)))
		if len(a) != 1 {
			t.Fatalf("%s: %v", name, a)
		}
		return a[0]
	}
	a := addr("a.cdn.test.")
	b := addr("b.cdn.test.")
	c := addr("c.cdn.test.")
	// Use a (by address, as a flow would), so b is the least recently used.
	if n, _ := s.NameOf(a); n != "a.cdn.test" {
		t.Fatalf("NameOf(a) = %q", n)
	}
	d := addr("d.cdn.test.")
	if d != b {
		t.Errorf("d got %v; want b's slot %v reused (b was least recently used)", d, b)
	}
	if n, ok := s.NameOf(b); !ok || n != "d.cdn.test" {
		t.Errorf("NameOf(b's address) = %q, %v; want d.cdn.test", n, ok)
	}
	if n, _ := s.NameOf(a); n != "a.cdn.test" {
		t.Errorf("a was evicted although recently used: %q", n)
	}
	if n, _ := s.NameOf(c); n != "c.cdn.test" {
		t.Errorf("c: %q", n)
	}
	if got := s.table.len(); got != 3 {
		t.Errorf("table holds %d names, want the bound 3", got)
	}
	// Order of use is now c, a, d: b comes back by evicting d.
	if b2 := addr("b.cdn.test."); b2 != b {
		t.Errorf("b got %v; want d's slot %v (d was least recently used)", b2, b)
	}
	if n, _ := s.NameOf(b); n != "b.cdn.test" {
		t.Errorf("NameOf = %q after d was evicted, want b.cdn.test", n)
	}
}

func TestTableSmallPool(t *testing.T) {
	s, _, _ := newTestServer(t, Config{V4Pool: netip.MustParsePrefix("100.64.7.4/30")}, nil)
	var got []string
	for _, n := range []string{"a.cdn.test.", "b.cdn.test.", "c.cdn.test.", "d.cdn.test."} {
		for _, a := range answerAddrs(parseMsg(t, s.ServeDNS(makeQuery(1, question(n, dnsmessage.TypeA)), false))) {
			got = append(got, a.String())
		}
	}
	want := []string{"100.64.7.5", "100.64.7.6", "100.64.7.5", "100.64.7.6"}
	if !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v (only the two inner addresses of a /30, reused LRU)", got, want)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	pol := func() *policy.Policy { return nil }
	for _, tc := range []struct {
		why string
		cfg Config
	}{
		{"no policy source", Config{}},
		{"v4 pool is IPv6", Config{Policy: pol, V4Pool: netip.MustParsePrefix("fd00::/64")}},
		{"v4 pool too small", Config{Policy: pol, V4Pool: netip.MustParsePrefix("198.18.0.0/31")}},
		{"v6 pool is IPv4", Config{Policy: pol, V6Pool: netip.MustParsePrefix("198.18.0.0/15")}},
		{"v6 pool is IPv4-mapped", Config{Policy: pol, V6Pool: netip.MustParsePrefix("::ffff:198.18.0.0/111")}},
		{"upstream without port", Config{Policy: pol, Upstream: []string{"192.0.2.1"}}},
		{"upstream a name", Config{Policy: pol, Upstream: []string{"dns.test:53"}}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted it", tc.why)
		}
	}
}

func TestServeDNSConcurrent(t *testing.T) {
	s, _, _ := newTestServer(t, Config{IPv6: true, MaxNames: 50}, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				name := string(rune('a'+(g+i)%26)) + "x" + string(rune('a'+i%26)) + ".cdn.test."
				qt := dnsmessage.TypeA
				if i%2 == 1 {
					qt = dnsmessage.TypeAAAA
				}
				r := s.ServeDNS(makeQuery(uint16(i), question(name, qt)), false)
				for _, a := range answerAddrs(parseMsg(t, r)) {
					s.NameOf(a)
				}
			}
		})
	}
	wg.Wait()
	if n := s.table.len(); n > 50 {
		t.Errorf("table grew to %d names past its bound", n)
	}
}

func TestReverseAddr(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string // "" = not a reverse name
	}{
		{"4.3.2.1.in-addr.arpa", "1.2.3.4"},
		{"255.0.18.198.in-addr.arpa", "198.18.0.255"},
		{"1.0.18.in-addr.arpa", ""},
		{"5.4.3.2.1.in-addr.arpa", ""},
		{"04.3.2.1.in-addr.arpa", ""},
		{"256.3.2.1.in-addr.arpa", ""},
		{"in-addr.arpa", ""},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa", "::1"},
		{"b.a.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.0.0.0.0.1.2.3.4.ip6.arpa", "4321:0:1:2:3:4:567:89ab"},
		{"0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa", ""},
		{"g.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa", ""},
		{"10.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa", ""},
		{"app.test", ""},
	} {
		a, ok := reverseAddr(tc.name)
		if tc.want == "" {
			if ok {
				t.Errorf("reverseAddr(%q) = %v, want not a reverse name", tc.name, a)
			}
			continue
		}
		if !ok || a != netip.MustParseAddr(tc.want) {
			t.Errorf("reverseAddr(%q) = %v, %v; want %s", tc.name, a, ok, tc.want)
		}
	}
}

func BenchmarkServeDNS(b *testing.B) {
	pol := mustPolicy(b, testPolicyYAML)
	s, err := New(Config{Policy: func() *policy.Policy { return pol }, Audit: discardSink{}})
	if err != nil {
		b.Fatal(err)
	}
	msg := makeQuery(0x1234, question("app.test.", dnsmessage.TypeA))
	if r := s.ServeDNS(msg, false); len(r) == 0 {
		b.Fatal("no reply")
	}
	b.ReportAllocs()
	for b.Loop() {
		s.ServeDNS(msg, false)
	}
}

// wireQuery builds a query whose name is the given labels, byte for byte
// (a label may hold a dot or any other byte, as the wire allows).
func wireQuery(id uint16, qtype dnsmessage.Type, labels ...string) []byte {
	m := []byte{byte(id >> 8), byte(id), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range labels {
		m = append(m, byte(len(l)))
		m = append(m, l...)
	}
	m = append(m, 0)
	return binary.BigEndian.AppendUint32(m, uint32(qtype)<<16|uint32(dnsmessage.ClassINET))
}

// TestServeDNSWireNameTricks asks for names whose wire labels differ from
// the name they spell. A dot or a backslash inside a label is refused as
// malformed (the parser will not flatten it into a label boundary);
// full-width and ideographic full stops, which IDNA maps to a dot, and
// full-width letters are normalized before the policy sees the name. Either
// way the name decided is the one the fake address then stands for (the
// name the gateway resolves and dials), so a spelling can neither slip past
// a deny rule nor get an allowed name's address for another name.
func TestServeDNSWireNameTricks(t *testing.T) {
	tests := []struct {
		why    string
		labels []string
		rcode  dnsmessage.RCode
		name   string // decided, and what the answer maps back to
		rule   string
	}{
		{"a dot inside a label is not read as a boundary: the message is malformed",
			[]string{"x.ads", "cdn", "test"}, dnsmessage.RCodeFormatError, "", RuleMalformed},
		{"the whole allowed name in one label: malformed, not the allowed name",
			[]string{"img.cdn.test"}, dnsmessage.RCodeFormatError, "", RuleMalformed},
		{"a full-width full stop (U+FF0E) is a dot after mapping: deny rule holds",
			[]string{"x", "ads\uff0ecdn", "test"}, dnsmessage.RCodeNameError, "x.ads.cdn.test", "deny[0]"},
		{"an ideographic full stop (U+3002) maps to a dot",
			[]string{"img", "cdn\u3002test"}, dnsmessage.RCodeSuccess, "img.cdn.test", "allow[1]"},
		{"upper case full-width letters fold to the allowed name",
			[]string{"\uff21\uff30\uff30", "test"}, dnsmessage.RCodeSuccess, "app.test", "allow[0]"},
		{"a trailing dot inside the last label: malformed",
			[]string{"app", "test."}, dnsmessage.RCodeFormatError, "", RuleMalformed},
		{"a NUL byte inside a label is not a name",
			[]string{"app\x00", "test"}, dnsmessage.RCodeNameError, `app\000.test.`, "default"},
		{"a backslash inside a label (an escape to a presentation parser): malformed",
			[]string{`app\.test`}, dnsmessage.RCodeFormatError, "", RuleMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			s, sink, up := newTestServer(t, Config{}, zone{})
			raw := s.ServeDNS(wireQuery(9, dnsmessage.TypeA, tc.labels...), false)
			r := parseMsg(t, raw)
			if r.h.RCode != tc.rcode {
				t.Fatalf("rcode %v, want %v", r.h.RCode, tc.rcode)
			}
			addrs := answerAddrs(r)
			if (tc.rcode == dnsmessage.RCodeSuccess) != (len(addrs) == 1) {
				t.Fatalf("answers %v", addrs)
			}
			for _, a := range addrs {
				if got, ok := s.NameOf(a); !ok || got != tc.name {
					t.Errorf("answer %v stands for %q, want %q (the name decided)", a, got, tc.name)
				}
			}
			ev := sink.dns()
			if len(ev) != 1 || ev[0].QName != tc.name || ev[0].Rule != tc.rule {
				t.Errorf("audit %+v, want one record for %q by %s", ev, tc.name, tc.rule)
			}
			if up.count() != 0 {
				t.Error("asked upstream")
			}
		})
	}
	// Labels longer than 63 bytes and names longer than 255 never reach
	// the policy: the message is malformed, refused and recorded.
	s, sink, _ := newTestServer(t, Config{}, zone{})
	long := []string{strings.Repeat("a", 60), strings.Repeat("b", 60), strings.Repeat("c", 60), strings.Repeat("d", 60), "xxxx", "app", "test"}
	for _, m := range [][]byte{
		wireQuery(9, dnsmessage.TypeA, strings.Repeat("a", 64), "test"),
		wireQuery(9, dnsmessage.TypeA, long...),
	} {
		if r := parseMsg(t, s.ServeDNS(m, true)); r.h.RCode != dnsmessage.RCodeFormatError || len(r.answers) != 0 {
			t.Errorf("reply %+v, want FORMERR", r.h)
		}
	}
	if ev := sink.dns(); len(ev) != 2 || ev[0].Rule != RuleMalformed || ev[1].Rule != RuleMalformed {
		t.Errorf("audit %+v, want two builtin:dns-malformed records", ev)
	}
}

// optRR is an OPT record: payload size, the TTL field (extended rcode,
// version, DO bit) and raw option bytes.
func optRR(size uint16, ttl uint32, options []byte) []byte {
	b := []byte{0, 0, 41}
	b = binary.BigEndian.AppendUint16(b, size)
	b = binary.BigEndian.AppendUint32(b, ttl)
	b = binary.BigEndian.AppendUint16(b, uint16(len(options)))
	return append(b, options...)
}

// ednsOption is one EDNS option: code, length, data.
func ednsOption(code uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, code)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

// TestServeDNSHostileEDNS sends OPT records a stub resolver would not:
// two of them, client subnet, cookie and padding options, the DO bit,
// version 1, sizes of 0 and 65535, an option whose length runs past the
// record. Each query is answered once, from the fake table, with one OPT
// of nsgate's own (size 1232, no option echoed, DO clear); a UDP reply
// never exceeds 1232 bytes; and each leaves one audit record.
func TestServeDNSHostileEDNS(t *testing.T) {
	ecs := ednsOption(8, []byte{0, 1, 24, 0, 203, 0, 113})
	cookie := ednsOption(10, []byte("8bytecoo"))
	padding := ednsOption(12, make([]byte, 400))
	tests := []struct {
		why  string
		opts [][]byte // OPT records, in order
	}{
		{"client subnet, cookie, padding, DO bit, version 1, size 65535",
			[][]byte{optRR(65535, 1<<16|1<<15, slices.Concat(ecs, cookie, padding))}},
		{"two OPT records (RFC 6891 allows one)",
			[][]byte{optRR(4096, 0, cookie), optRR(100, 1<<15, ecs)}},
		{"payload size 0", [][]byte{optRR(0, 0, nil)}},
		{"an option whose length runs past the record", [][]byte{optRR(1232, 0, []byte{0, 8, 0xff, 0xff, 1})}},
	}
	for _, tc := range tests {
		for _, name := range []string{"app.test", "evil.test"} {
			t.Run(tc.why+"/"+name, func(t *testing.T) {
				s, sink, up := newTestServer(t, Config{}, zone{})
				m := makeQuery(5, question(name+".", dnsmessage.TypeA))
				binary.BigEndian.PutUint16(m[10:], uint16(len(tc.opts)))
				for _, o := range tc.opts {
					m = append(m, o...)
				}
				out := s.ServeDNS(m, false)
				if len(out) > ednsSize {
					t.Fatalf("udp reply of %d bytes", len(out))
				}
				r := parseMsg(t, out)
				if r.h.ID != 5 || r.h.Truncated {
					t.Fatalf("header %+v", r.h)
				}
				if name == "app.test" && len(answerAddrs(r)) != 1 || name == "evil.test" && (r.h.RCode != dnsmessage.RCodeNameError || len(r.answers) != 0) {
					t.Fatalf("%s: rcode %v, answers %+v", name, r.h.RCode, r.answers)
				}
				var opts int
				for _, a := range r.addits {
					opt, ok := a.Body.(*dnsmessage.OPTResource)
					if !ok {
						t.Fatalf("additional %+v", a)
					}
					opts++
					if a.Header.Class != ednsSize || a.Header.TTL != 0 {
						t.Errorf("OPT size %d ttl %#x, want %d and 0 (DO clear)", a.Header.Class, a.Header.TTL, ednsSize)
					}
					for _, o := range opt.Options {
						if o.Code != optionEDE {
							t.Errorf("option %d echoed", o.Code)
						}
					}
				}
				// A malformed OPT is ignored as a whole: no OPT back
				// is as good as ours.
				if opts > 1 {
					t.Errorf("%d OPT records in the reply", opts)
				}
				if ev := sink.dns(); len(ev) != 1 || ev[0].QName != name {
					t.Errorf("audit %+v, want one record for %s", ev, name)
				}
				if up.count() != 0 {
					t.Error("asked upstream")
				}
			})
		}
	}
}
