package dns

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/policy"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestResolve(t *testing.T) {
	z := zone{
		"api.app.test./A":    {rrA("api.app.test.", 60, "192.0.2.10"), rrA("api.app.test.", 30, "192.0.2.11")},
		"api.app.test./AAAA": {rrAAAA("api.app.test.", 60, "2001:db8::10")},
		// A CNAME chain; the stray A record for another owner must be
		// ignored (it is not on the chain).
		"www.cdn.test./A": {
			rrCNAME("www.cdn.test.", 300, "edge.cdn.test."),
			rrA("metadata.google.internal.", 300, "169.254.169.254"),
			rrCNAME("edge.cdn.test.", 300, "node7.edge.net.test."),
			rrA("node7.edge.net.test.", 20, "198.51.100.7"),
		},
		// Names compared without regard to ASCII case.
		"mixed.cdn.test./A": {rrCNAME("MIXED.cdn.TEST.", 60, "Target.Test."), rrA("tArGeT.test.", 60, "198.51.100.8")},
		"loop.cdn.test./A":  {rrCNAME("loop.cdn.test.", 60, "loop2.cdn.test."), rrCNAME("loop2.cdn.test.", 60, "loop.cdn.test.")},
		"dangling.test./A":  {rrCNAME("dangling.test.", 60, "nowhere.test.")},
		"txtonly.test./TXT": {},
		// A private answer is returned as is: checking it is the caller's job.
		"private.test./A": {rrA("private.test.", 60, "10.1.2.3")},
	}
	tests := []struct {
		why     string
		name    string
		ipv6    bool
		want    []netip.Addr
		err     bool
		notFnd  bool
		queries int // upstream queries expected
	}{
		{why: "a dns.hosts name is answered from the policy, never upstream",
			name: "local.test", want: addrs("127.0.0.1"), queries: 0},
		{why: "dns.hosts lookup uses the normalized name",
			name: "LOCAL.test.", want: addrs("127.0.0.1"), queries: 0},
		{why: "upstream A records, in answer order",
			name: "api.app.test", want: addrs("192.0.2.10", "192.0.2.11"), queries: 1},
		{why: "with IPv6 on, AAAA records follow the A records",
			name: "api.app.test", ipv6: true, want: addrs("192.0.2.10", "192.0.2.11", "2001:db8::10"), queries: 2},
		{why: "a CNAME chain is followed inside the answer section; off-chain records are ignored",
			name: "www.cdn.test", want: addrs("198.51.100.7"), queries: 1},
		{why: "owner names are matched without regard to ASCII case",
			name: "mixed.cdn.test", want: addrs("198.51.100.8"), queries: 1},
		{why: "a CNAME loop is an error",
			name: "loop.cdn.test", err: true, queries: 1},
		{why: "a CNAME to a name without records in the answer is not found",
			name: "dangling.test", err: true, notFnd: true, queries: 1},
		{why: "NOERROR without address records is not found",
			name: "txtonly.test", err: true, notFnd: true, queries: 1},
		{why: "NXDOMAIN is not found",
			name: "nx.test", err: true, notFnd: true, queries: 1},
		{why: "answers are not policy-checked here",
			name: "private.test", want: addrs("10.1.2.3"), queries: 1},
		{why: "an invalid name is an error before any query",
			name: "bad name.test", err: true, queries: 0},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			s, _, up := newTestServer(t, Config{IPv6: tc.ipv6}, z)
			got, err := s.Resolve(context.Background(), tc.name)
			if tc.err {
				if err == nil {
					t.Fatalf("Resolve = %v, want an error", got)
				}
				if errors.Is(err, ErrNotFound) != tc.notFnd {
					t.Errorf("error %v: errors.Is(ErrNotFound) = %v, want %v", err, !tc.notFnd, tc.notFnd)
				}
			} else if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Resolve = %v, %v; want %v", got, err, tc.want)
			}
			if n := up.count(); n != tc.queries {
				t.Errorf("upstream got %d queries, want %d: %+v", n, tc.queries, up.queries)
			}
		})
	}
}

func TestResolveCacheTTL(t *testing.T) {
	z := zone{
		"api.app.test./A":  {rrA("api.app.test.", 60, "192.0.2.10")},
		"zero.app.test./A": {rrA("zero.app.test.", 0, "192.0.2.20")},
		"long.app.test./A": {rrA("long.app.test.", 86400, "192.0.2.30")},
		"chain.test./A":    {rrCNAME("chain.test.", 10, "x.test."), rrA("x.test.", 600, "192.0.2.40")},
	}
	s, _, up := newTestServer(t, Config{}, z)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s.cache.now = clk.now
	ctx := context.Background()
	resolve := func(name string) {
		t.Helper()
		if _, err := s.Resolve(ctx, name); err != nil {
			t.Fatalf("Resolve(%s): %v", name, err)
		}
	}
	for _, tc := range []struct {
		why     string
		name    string
		advance time.Duration
		queries int // total so far
	}{
		{"first lookup asks upstream", "api.app.test", 0, 1},
		{"within the TTL the cache answers", "api.app.test", 59 * time.Second, 1},
		{"at the TTL the entry has expired", "api.app.test", time.Second, 2},
		{"TTL 0 is cached for the 1 s minimum", "zero.app.test", 0, 3},
		{"... so a repeat within it is cached", "zero.app.test", 900 * time.Millisecond, 3},
		{"... and asked again after it", "zero.app.test", 100 * time.Millisecond, 4},
		{"a day-long TTL is cut to 5 min", "long.app.test", 0, 5},
		{"... cached just under 5 min", "long.app.test", 5*time.Minute - time.Second, 5},
		{"... and gone at 5 min", "long.app.test", time.Second, 6},
		{"the TTL of a chain is its smallest (the CNAME's 10 s)", "chain.test", 0, 7},
		{"... cached under 10 s", "chain.test", 9 * time.Second, 7},
		{"... and gone at 10 s", "chain.test", time.Second, 8},
	} {
		clk.advance(tc.advance)
		resolve(tc.name)
		if n := up.count(); n != tc.queries {
			t.Errorf("%s: %d upstream queries, want %d", tc.why, n, tc.queries)
		}
	}
	// The result is the caller's: changing it does not change the cache.
	got, _ := s.Resolve(ctx, "chain.test")
	got[0] = netip.MustParseAddr("169.254.169.254")
	if again, _ := s.Resolve(ctx, "chain.test"); again[0] != netip.MustParseAddr("192.0.2.40") {
		t.Errorf("cache aliased the returned slice: %v", again)
	}
}

func TestResolveCacheBounded(t *testing.T) {
	up := &fakeUpstream{handle: func(_ string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
		return buildReply(h.ID, q, dnsmessage.RCodeSuccess, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 300},
			Body:   &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}},
		}), nil
	}}
	s, _, _ := newTestServer(t, Config{CacheSize: 8, Exchange: up.exchange}, nil)
	for i := range 50 {
		if _, err := s.Resolve(context.Background(), "n"+string(rune('a'+i%26))+string(rune('a'+i/26))+".test"); err != nil {
			t.Fatal(err)
		}
	}
	s.cache.mu.Lock()
	n := len(s.cache.entries)
	s.cache.mu.Unlock()
	if n > 8 {
		t.Errorf("cache holds %d entries, bound 8", n)
	}
}

func TestResolveUpstreamErrors(t *testing.T) {
	okReply := func(h dnsmessage.Header, q dnsmessage.Question) []byte {
		return buildReply(h.ID, q, dnsmessage.RCodeSuccess, rrA(q.Name.String(), 60, "192.0.2.99"))
	}
	tests := []struct {
		why     string
		handle  func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error)
		want    []netip.Addr
		notFnd  bool
		servers []string // servers asked, in order
	}{
		{why: "a dead first server: the second answers",
			handle: func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				if server == "192.0.2.53:53" {
					return nil, errUpstreamDown
				}
				return okReply(h, q), nil
			},
			want: addrs("192.0.2.99"), servers: []string{"192.0.2.53:53", "198.51.100.53:53"}},
		{why: "SERVFAIL from the first server: the second answers",
			handle: func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				if server == "192.0.2.53:53" {
					return buildReply(h.ID, q, dnsmessage.RCodeServerFailure), nil
				}
				return okReply(h, q), nil
			},
			want: addrs("192.0.2.99"), servers: []string{"192.0.2.53:53", "198.51.100.53:53"}},
		{why: "NXDOMAIN is an answer: the second server is not asked",
			handle: func(_ string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				return buildReply(h.ID, q, dnsmessage.RCodeNameError), nil
			},
			notFnd: true, servers: []string{"192.0.2.53:53"}},
		{why: "a reply with the wrong ID (spoofed or stale) is not used",
			handle: func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				if server == "192.0.2.53:53" {
					return buildReply(h.ID+1, q, dnsmessage.RCodeSuccess, rrA(q.Name.String(), 60, "169.254.169.254")), nil
				}
				return okReply(h, q), nil
			},
			want: addrs("192.0.2.99"), servers: []string{"192.0.2.53:53", "198.51.100.53:53"}},
		{why: "a reply to another question is not used",
			handle: func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				if server == "192.0.2.53:53" {
					other := question("evil.test.", dnsmessage.TypeA)
					return buildReply(h.ID, other, dnsmessage.RCodeSuccess, rrA("evil.test.", 60, "169.254.169.254")), nil
				}
				return okReply(h, q), nil
			},
			want: addrs("192.0.2.99"), servers: []string{"192.0.2.53:53", "198.51.100.53:53"}},
		{why: "a reply echoing the question in another case (0x20) is accepted",
			handle: func(_ string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				q.Name = dnsmessage.MustNewName(strings.ToUpper(q.Name.String()))
				return okReply(h, q), nil
			},
			want: addrs("192.0.2.99"), servers: []string{"192.0.2.53:53"}},
		{why: "garbage from the first server: the second answers",
			handle: func(server string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
				if server == "192.0.2.53:53" {
					return []byte{0xde, 0xad}, nil
				}
				return okReply(h, q), nil
			},
			want: addrs("192.0.2.99"), servers: []string{"192.0.2.53:53", "198.51.100.53:53"}},
		{why: "every server failing is an error",
			handle: func(string, dnsmessage.Header, dnsmessage.Question) ([]byte, error) {
				return nil, errUpstreamDown
			},
			servers: []string{"192.0.2.53:53", "198.51.100.53:53"}},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			up := &fakeUpstream{handle: tc.handle}
			s, _, _ := newTestServer(t, Config{Exchange: up.exchange, Upstream: []string{"192.0.2.53:53", "198.51.100.53:53"}}, nil)
			got, err := s.Resolve(context.Background(), "api.app.test")
			if tc.want != nil {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("Resolve = %v, %v; want %v", got, err, tc.want)
				}
			} else {
				if err == nil {
					t.Fatalf("Resolve = %v, want an error", got)
				}
				if errors.Is(err, ErrNotFound) != tc.notFnd {
					t.Errorf("error %v: want ErrNotFound %v", err, tc.notFnd)
				}
				if !tc.notFnd && !errors.Is(err, errUpstreamDown) {
					t.Errorf("error %v does not wrap the cause", err)
				}
			}
			var asked []string
			for _, q := range up.queries {
				asked = append(asked, q.server)
			}
			if !slices.Equal(asked, tc.servers) {
				t.Errorf("servers asked %v, want %v", asked, tc.servers)
			}
			if _, err2 := s.Resolve(context.Background(), "api.app.test"); (err2 == nil) != (err == nil) {
				t.Errorf("second call disagrees: %v vs %v", err2, err)
			}
			if err != nil && up.count() == len(tc.servers) {
				t.Errorf("an error was cached: the second call asked nobody")
			}
		})
	}
}

func TestResolveUpstreamSources(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(conf, []byte("# host\nsearch example.test\nnameserver 198.51.100.1\nnameserver fe80::1%lo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withUp := mustPolicy(t, "version: 1\ndns:\n  upstream: [\"203.0.113.5:5353\"]\n")
	without := mustPolicy(t, "version: 1\n")
	for _, tc := range []struct {
		why  string
		cfg  Config
		pol  *policy.Policy
		want []string
		err  bool
	}{
		{why: "Config.Upstream overrides everything",
			cfg: Config{Upstream: []string{"192.0.2.53:53"}, ResolvConfPath: conf}, pol: withUp, want: []string{"192.0.2.53:53"}},
		{why: "else the policy's dns.upstream",
			cfg: Config{ResolvConfPath: conf}, pol: withUp, want: []string{"203.0.113.5:5353"}},
		{why: "else the host resolv.conf, in order, scoped IPv6 kept",
			cfg: Config{ResolvConfPath: conf}, pol: without, want: []string{"198.51.100.1:53", "[fe80::1%lo]:53"}},
		{why: "no policy at all still falls back to resolv.conf",
			cfg: Config{ResolvConfPath: conf}, want: []string{"198.51.100.1:53", "[fe80::1%lo]:53"}},
		{why: "an unreadable resolv.conf is an error",
			cfg: Config{ResolvConfPath: filepath.Join(dir, "missing")}, pol: without, err: true},
	} {
		t.Run(tc.why, func(t *testing.T) {
			up := &fakeUpstream{}
			cfg := tc.cfg
			cfg.Exchange = up.exchange
			cfg.Policy = func() *policy.Policy { return tc.pol }
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Resolve(context.Background(), "api.app.test")
			if err == nil {
				t.Fatal("the fake upstream SERVFAILs; Resolve must fail")
			}
			var asked []string
			for _, q := range up.queries {
				asked = append(asked, q.server)
			}
			if tc.err {
				if len(asked) != 0 {
					t.Errorf("asked %v with no upstream source", asked)
				}
				return
			}
			if !slices.Equal(asked, tc.want) {
				t.Errorf("asked %v, want %v", asked, tc.want)
			}
		})
	}
}

func TestResolveSharesConcurrentLookups(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	started := make(chan struct{})
	up := &fakeUpstream{handle: func(_ string, h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
		once.Do(func() { close(started) })
		<-release
		return buildReply(h.ID, q, dnsmessage.RCodeSuccess, rrA(q.Name.String(), 60, "192.0.2.1")), nil
	}}
	s, _, _ := newTestServer(t, Config{Exchange: up.exchange}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() {
			got, err := s.Resolve(context.Background(), "api.app.test")
			if err == nil && (len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.1")) {
				err = errors.New("wrong answer")
			}
			errs <- err
		})
	}
	<-started
	time.Sleep(20 * time.Millisecond) // let the others join the flight
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := up.count(); n != 1 {
		t.Errorf("%d upstream queries for 10 concurrent lookups, want 1", n)
	}
}

func TestResolveContextCancel(t *testing.T) {
	up := &fakeUpstream{handle: func(string, dnsmessage.Header, dnsmessage.Question) ([]byte, error) {
		return nil, context.DeadlineExceeded
	}}
	s, _, _ := newTestServer(t, Config{Exchange: up.exchange}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Resolve(ctx, "api.app.test"); err == nil {
		t.Fatal("Resolve with a cancelled context succeeded")
	}
	if n := up.count(); n > 1 {
		t.Errorf("kept asking servers after the context ended: %d queries", n)
	}
}

func TestParseReplyRejects(t *testing.T) {
	q := question("api.app.test.", dnsmessage.TypeA)
	good := buildReply(7, q, dnsmessage.RCodeSuccess, rrA("api.app.test.", 60, "192.0.2.1"))
	if a, _, err := parseReply(good, 7, "api.app.test", dnsmessage.TypeA); err != nil || len(a) != 1 {
		t.Fatalf("good reply: %v %v", a, err)
	}
	notResp := slices.Clone(good)
	notResp[2] &^= 0x80
	twoQ := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, Response: true})
		must(b.StartQuestions())
		must(b.Question(q))
		must(b.Question(q))
		out, _ := b.Finish()
		return out
	}()
	for _, tc := range []struct {
		why string
		raw []byte
		typ dnsmessage.Type
	}{
		{"a query, not a response", notResp, dnsmessage.TypeA},
		{"the wrong type", good, dnsmessage.TypeAAAA},
		{"two questions", twoQ, dnsmessage.TypeA},
		{"cut short inside the answer", good[:len(good)-2], dnsmessage.TypeA},
		{"empty", nil, dnsmessage.TypeA},
	} {
		if a, _, err := parseReply(tc.raw, 7, "api.app.test", tc.typ); err == nil {
			t.Errorf("%s: accepted, %v", tc.why, a)
		}
	}
}
