package dns

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// testPolicyYAML is the policy most tests run under.
const testPolicyYAML = `version: 1
allow:
  - host: app.test
    ports: [443]
  - host: "*.cdn.test"
    ports: [443]
  - host: xn--bcher-kva.test
    ports: [443]
deny:
  - host: "*.ads.cdn.test"
dns:
  hosts:
    local.test: [127.0.0.1]
`

func mustPolicy(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("policy.Parse: %v", err)
	}
	return p
}

// fakeSink records audit events. It is safe for concurrent use.
type fakeSink struct {
	mu     sync.Mutex
	events []audit.Event
}

func (f *fakeSink) Log(e audit.Event) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
	return uint64(len(f.events))
}

func (f *fakeSink) dns() []audit.DNS {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []audit.DNS
	for _, e := range f.events {
		if d, ok := e.(audit.DNS); ok {
			out = append(out, d)
		}
	}
	return out
}

// discardSink drops events, for benchmarks.
type discardSink struct{}

func (discardSink) Log(audit.Event) uint64 { return 0 }

// upstreamQuery is one query the fake upstream received.
type upstreamQuery struct {
	server string
	name   string // as sent, with trailing dot
	qtype  dnsmessage.Type
}

// fakeUpstream is an injectable Config.Exchange. handle builds the raw
// reply to one parsed query (nil handle: SERVFAIL). It records every query.
type fakeUpstream struct {
	mu      sync.Mutex
	queries []upstreamQuery
	handle  func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error)
}

func (u *fakeUpstream) exchange(ctx context.Context, server string, msg []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	u.queries = append(u.queries, upstreamQuery{server, q.Name.String(), q.Type})
	handle := u.handle
	u.mu.Unlock()
	if handle == nil {
		return buildReply(h.ID, q, dnsmessage.RCodeServerFailure), nil
	}
	return handle(server, h, q)
}

func (u *fakeUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queries)
}

// zone is a static table of answers for the fake upstream: key is
// "name./TYPE" in lower case. Missing names get NXDOMAIN; a name present
// for another type gets NOERROR with no answers.
type zone map[string][]dnsmessage.Resource

func (z zone) handle(_ string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
	name := strings.ToLower(q.Name.String())
	recs, ok := z[name+"/"+TypeString(q.Type)]
	if !ok {
		for k := range z {
			if strings.HasPrefix(k, name+"/") {
				return buildReply(h.ID, q, dnsmessage.RCodeSuccess), nil
			}
		}
		return buildReply(h.ID, q, dnsmessage.RCodeNameError), nil
	}
	return buildReply(h.ID, q, dnsmessage.RCodeSuccess, recs...), nil
}

// buildReply encodes a response with the given answers.
func buildReply(id uint16, q dnsmessage.Question, rc dnsmessage.RCode, answers ...dnsmessage.Resource) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, Response: true, RecursionDesired: true, RecursionAvailable: true, RCode: rc})
	b.EnableCompression()
	must(b.StartQuestions())
	must(b.Question(q))
	must(b.StartAnswers())
	for _, a := range answers {
		switch body := a.Body.(type) {
		case *dnsmessage.AResource:
			must(b.AResource(a.Header, *body))
		case *dnsmessage.AAAAResource:
			must(b.AAAAResource(a.Header, *body))
		case *dnsmessage.CNAMEResource:
			must(b.CNAMEResource(a.Header, *body))
		case *dnsmessage.TXTResource:
			must(b.TXTResource(a.Header, *body))
		default:
			panic("buildReply: unsupported record")
		}
	}
	out, err := b.Finish()
	must(err)
	return out
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func rrHeader(name string, t dnsmessage.Type, ttl uint32) dnsmessage.ResourceHeader {
	return dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Type: t, Class: dnsmessage.ClassINET, TTL: ttl}
}

func rrA(name string, ttl uint32, addr string) dnsmessage.Resource {
	return dnsmessage.Resource{Header: rrHeader(name, dnsmessage.TypeA, ttl), Body: &dnsmessage.AResource{A: netip.MustParseAddr(addr).As4()}}
}

func rrAAAA(name string, ttl uint32, addr string) dnsmessage.Resource {
	return dnsmessage.Resource{Header: rrHeader(name, dnsmessage.TypeAAAA, ttl), Body: &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(addr).As16()}}
}

func rrCNAME(name string, ttl uint32, target string) dnsmessage.Resource {
	return dnsmessage.Resource{Header: rrHeader(name, dnsmessage.TypeCNAME, ttl), Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(target)}}
}

// newTestServer returns a Server under testPolicyYAML with a recording
// sink and a fake upstream that answers from z.
func newTestServer(t testing.TB, cfg Config, z zone) (*Server, *fakeSink, *fakeUpstream) {
	t.Helper()
	pol := mustPolicy(t, testPolicyYAML)
	sink := &fakeSink{}
	up := &fakeUpstream{}
	if z != nil {
		up.handle = z.handle
	}
	if cfg.Policy == nil {
		cfg.Policy = func() *policy.Policy { return pol }
	}
	if cfg.Audit == nil {
		cfg.Audit = sink
	}
	if cfg.Exchange == nil {
		cfg.Exchange = up.exchange
	}
	if cfg.Upstream == nil {
		cfg.Upstream = []string{"192.0.2.53:53"}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, sink, up
}

// query encodes a query. Options tweak the header or add records.
type queryOpt func(*dnsmessage.Header, *[]dnsmessage.Question, *bool)

func withEDNS() queryOpt {
	return func(_ *dnsmessage.Header, _ *[]dnsmessage.Question, edns *bool) { *edns = true }
}

func withHeader(f func(*dnsmessage.Header)) queryOpt {
	return func(h *dnsmessage.Header, _ *[]dnsmessage.Question, _ *bool) { f(h) }
}

func withQuestions(qs ...dnsmessage.Question) queryOpt {
	return func(_ *dnsmessage.Header, q *[]dnsmessage.Question, _ *bool) { *q = qs }
}

func question(name string, t dnsmessage.Type) dnsmessage.Question {
	return dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: t, Class: dnsmessage.ClassINET}
}

func makeQuery(id uint16, q dnsmessage.Question, opts ...queryOpt) []byte {
	h := dnsmessage.Header{ID: id, RecursionDesired: true}
	qs := []dnsmessage.Question{q}
	edns := false
	for _, o := range opts {
		o(&h, &qs, &edns)
	}
	b := dnsmessage.NewBuilder(nil, h)
	must(b.StartQuestions())
	for _, q := range qs {
		must(b.Question(q))
	}
	if edns {
		must(b.StartAdditionals())
		var rh dnsmessage.ResourceHeader
		must(rh.SetEDNS0(4096, dnsmessage.RCodeSuccess, false))
		must(b.OPTResource(rh, dnsmessage.OPTResource{}))
	}
	out, err := b.Finish()
	must(err)
	return out
}

// parsed is a decoded reply.
type parsed struct {
	h         dnsmessage.Header
	questions []dnsmessage.Question
	answers   []dnsmessage.Resource
	addits    []dnsmessage.Resource
}

func parseMsg(t testing.TB, b []byte) parsed {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("reply does not parse: %v (% x)", err, b)
	}
	return parsed{h: m.Header, questions: m.Questions, answers: m.Answers, addits: m.Additionals}
}

// answerAddrs returns the A/AAAA addresses in a reply.
func answerAddrs(p parsed) []netip.Addr {
	var out []netip.Addr
	for _, a := range p.answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA))
		}
	}
	return out
}

// errUpstreamDown is what a dead fake upstream returns.
var errUpstreamDown = errors.New("upstream down")

// fakeClock is an injectable clock for the resolver cache.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
