package dns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/policy"
)

// ErrNotFound is wrapped by Resolve's error when the upstream answered
// that the name does not exist (NXDOMAIN) or has no address records, or
// when a dns.hosts entry lists no addresses.
var ErrNotFound = errors.New("no such host")

// Bounds on cached answers: an upstream TTL is clamped to this range.
const (
	minCacheTTL = time.Second
	maxCacheTTL = 5 * time.Minute
	// maxCNAMEHops bounds how far Resolve follows a CNAME chain.
	maxCNAMEHops = 8
)

// Answer is what the host side found for a name (Server.ResolveName).
type Answer struct {
	// Addrs are the addresses, A records first, as the upstream gave
	// them.
	Addrs []netip.Addr
	// Gateway are those of Addrs that an upstream nsgate gateway handed
	// out for the name: they lie in nsgate's fake-IP pools, and the
	// resolver that gave them answered the gateway handshake (gateway.go).
	// A flow to one is a flow to the name at that gateway, which decides
	// and dials it; they are not destinations of their own.
	Gateway []netip.Addr
}

// ViaGateway reports whether a is one of the upstream gateway's names
// (a is in Gateway).
func (a Answer) ViaGateway(x netip.Addr) bool { return slices.Contains(a.Gateway, x) }

func (a Answer) clone() Answer {
	return Answer{Addrs: slices.Clone(a.Addrs), Gateway: slices.Clone(a.Gateway)}
}

// Resolve returns the addresses of name as the host sees them: see
// ResolveName, whose Answer.Addrs it returns.
func (s *Server) Resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	a, err := s.ResolveName(ctx, name)
	return a.Addrs, err
}

// ResolveName returns the addresses of name as the host sees them: the
// policy's dns.hosts entry when there is one, else the A records (and
// AAAA records when IPv6 is on) from the upstream resolvers, following a
// CNAME chain within the answer section. Answers are cached by name for
// their TTL (at least 1 s, at most 5 min); concurrent calls for the same
// name share one lookup. The addresses are returned as the upstream gave
// them: checking them against the policy is the caller's job, and so is
// deciding whether the name may be resolved at all (ResolveName does not
// call NameAllowed). Answers from an upstream in nsgate's fake-IP pools
// are checked for the gateway handshake and, when it is answered, listed
// in Answer.Gateway (gateway.go). The returned slices are the caller's.
//
// ResolveName blocks until an answer, an error from every upstream, or
// ctx's end. Each upstream attempt is bounded by Config.Timeout.
func (s *Server) ResolveName(ctx context.Context, name string) (Answer, error) {
	n, err := policy.NormalizeName(strings.TrimSuffix(name, "."))
	if err != nil {
		return Answer{}, fmt.Errorf("resolve %q: %w", name, err)
	}
	pol := s.policy()
	if pol != nil {
		if addrs, ok := pol.StaticHosts(n); ok {
			if len(addrs) == 0 {
				return Answer{}, fmt.Errorf("resolve %s: dns.hosts entry is empty: %w", n, ErrNotFound)
			}
			return Answer{Addrs: addrs}, nil // StaticHosts returns a copy
		}
	}
	servers, err := s.servers(pol)
	if err != nil {
		return Answer{}, fmt.Errorf("resolve %s: %w", n, err)
	}
	return s.cache.get(ctx, n, strings.Join(servers, ","), func(ctx context.Context) (Answer, time.Duration, error) {
		return s.lookup(ctx, n, servers)
	})
}

// servers returns the upstream resolvers in order of preference.
func (s *Server) servers(pol *policy.Policy) ([]string, error) {
	if len(s.upstream) > 0 {
		return s.upstream, nil
	}
	if pol != nil {
		if u := pol.Upstreams(); len(u) > 0 {
			return u, nil
		}
	}
	data, err := os.ReadFile(s.resolv)
	if err != nil {
		return nil, fmt.Errorf("no upstream configured and host resolver list unreadable: %w", err)
	}
	ns := ParseResolvConf(data)
	if len(ns) == 0 {
		return nil, fmt.Errorf("no upstream configured and no nameserver in %s", s.resolv)
	}
	return ns, nil
}

// lookup asks the upstreams for A (and AAAA) records of name in parallel
// and merges the answers, A first. Addresses in nsgate's fake-IP pools
// are listed in Answer.Gateway when the server that gave them answers
// the gateway handshake (asked once per server and lookup).
func (s *Server) lookup(ctx context.Context, name string, servers []string) (Answer, time.Duration, error) {
	type result struct {
		addrs  []netip.Addr
		ttl    uint32
		server string // the upstream that answered
		err    error
	}
	types := []dnsmessage.Type{dnsmessage.TypeA}
	if s.ipv6 {
		types = append(types, dnsmessage.TypeAAAA)
	}
	results := make([]result, len(types))
	var wg sync.WaitGroup
	for i, t := range types {
		wg.Go(func() {
			r := &results[i]
			r.addrs, r.ttl, r.server, r.err = s.query(ctx, name, t, servers)
		})
	}
	wg.Wait()
	var ans Answer
	var ttl uint32
	first := true
	gateway := map[string]bool{} // per server: answered the handshake
	for _, r := range results {
		if r.err != nil || len(r.addrs) == 0 {
			continue
		}
		ans.Addrs = append(ans.Addrs, r.addrs...)
		if first || r.ttl < ttl {
			ttl = r.ttl
		}
		first = false
		for _, a := range r.addrs {
			if !isNsgateFake(a) {
				continue
			}
			ok, asked := gateway[r.server]
			if !asked {
				ok = s.isGateway(ctx, r.server)
				gateway[r.server] = ok
			}
			if ok {
				ans.Gateway = append(ans.Gateway, a)
			}
		}
	}
	if len(ans.Addrs) == 0 {
		for _, r := range results {
			if r.err != nil {
				return Answer{}, 0, r.err
			}
		}
		return Answer{}, 0, fmt.Errorf("resolve %s: no addresses: %w", name, ErrNotFound)
	}
	return ans, time.Duration(ttl) * time.Second, nil
}

// query asks each server in turn for one record type until one gives a
// usable answer. NXDOMAIN and "no records" are answers: they end the
// search. Transport errors, mismatched replies, SERVFAIL and the like move
// on to the next server.
func (s *Server) query(ctx context.Context, name string, qtype dnsmessage.Type, servers []string) ([]netip.Addr, uint32, string, error) {
	var lastErr error
	for _, srv := range servers {
		id := uint16(rand.Uint32())
		msg, err := buildQuery(id, name, qtype)
		if err != nil {
			return nil, 0, "", fmt.Errorf("resolve %s %s: %w", name, TypeString(qtype), err)
		}
		actx, cancel := context.WithTimeout(ctx, s.timeout)
		raw, err := s.exchange(actx, srv, msg)
		cancel()
		if err != nil {
			lastErr = fmt.Errorf("upstream %s: %w", srv, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		addrs, ttl, err := parseReply(raw, id, name, qtype)
		if err == nil {
			return addrs, ttl, srv, nil
		}
		lastErr = fmt.Errorf("upstream %s: %w", srv, err)
		if errors.Is(err, ErrNotFound) {
			break
		}
	}
	if lastErr == nil {
		lastErr = errors.New("no upstream")
	}
	return nil, 0, "", fmt.Errorf("resolve %s %s: %w", name, TypeString(qtype), lastErr)
}

// buildQuery makes a recursive query for name (normalized, no trailing
// dot) with an EDNS0 OPT advertising ednsSize.
func buildQuery(id uint16, name string, qtype dnsmessage.Type) ([]byte, error) {
	n, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, fmt.Errorf("encode name: %w", err)
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 32+len(name)), dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: qtype, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	var rh dnsmessage.ResourceHeader
	if err := rh.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false); err != nil {
		return nil, err
	}
	if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// errMismatch marks a reply that does not answer our query (wrong ID,
// question or flags): it may be spoofed or stale, so it is not used.
var errMismatch = errors.New("reply does not match the query")

// record is one answer-section record parseReply cares about.
type record struct {
	owner  string // lower case, no trailing dot
	ttl    uint32
	target string     // CNAME
	addr   netip.Addr // A or AAAA
}

// parseReply checks that raw answers the query (id, name, qtype) and
// returns the addresses at the end of the CNAME chain that starts at name,
// with the smallest TTL along the way. Only the answer section is used;
// records off the chain are ignored. Comparison of names ignores ASCII
// case (so 0x20-randomizing upstreams and case-mangling middleboxes work).
func parseReply(raw []byte, id uint16, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
	var p dnsmessage.Parser
	h, err := p.Start(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("malformed reply: %w", err)
	}
	if !h.Response || h.ID != id || h.OpCode != 0 {
		return nil, 0, errMismatch
	}
	q, err := p.Question()
	if err != nil {
		return nil, 0, fmt.Errorf("malformed reply: %w", err)
	}
	if _, err := p.Question(); err != dnsmessage.ErrSectionDone {
		return nil, 0, errMismatch
	}
	if q.Type != qtype || q.Class != dnsmessage.ClassINET || ownerName(q.Name) != name {
		return nil, 0, errMismatch
	}
	switch h.RCode {
	case dnsmessage.RCodeSuccess:
	case dnsmessage.RCodeNameError:
		return nil, 0, fmt.Errorf("nxdomain: %w", ErrNotFound)
	default:
		return nil, 0, fmt.Errorf("upstream answered rcode %d", h.RCode)
	}
	var recs []record
	for {
		rh, err := p.AnswerHeader()
		if err == dnsmessage.ErrSectionDone {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("malformed reply: %w", err)
		}
		if rh.Class != dnsmessage.ClassINET {
			if err := p.SkipAnswer(); err != nil {
				return nil, 0, fmt.Errorf("malformed reply: %w", err)
			}
			continue
		}
		rec := record{owner: ownerName(rh.Name), ttl: rh.TTL}
		switch {
		case rh.Type == dnsmessage.TypeCNAME:
			r, err := p.CNAMEResource()
			if err != nil {
				return nil, 0, fmt.Errorf("malformed reply: %w", err)
			}
			rec.target = ownerName(r.CNAME)
		case rh.Type == dnsmessage.TypeA && qtype == dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return nil, 0, fmt.Errorf("malformed reply: %w", err)
			}
			rec.addr = netip.AddrFrom4(r.A)
		case rh.Type == dnsmessage.TypeAAAA && qtype == dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return nil, 0, fmt.Errorf("malformed reply: %w", err)
			}
			rec.addr = netip.AddrFrom16(r.AAAA)
		default:
			if err := p.SkipAnswer(); err != nil {
				return nil, 0, fmt.Errorf("malformed reply: %w", err)
			}
			continue
		}
		recs = append(recs, rec)
	}
	return followChain(recs, name)
}

// followChain walks CNAMEs from name and returns the addresses owned by the
// last name of the chain.
func followChain(recs []record, name string) ([]netip.Addr, uint32, error) {
	cur := name
	ttl := ^uint32(0)
	for hop := 0; ; hop++ {
		var addrs []netip.Addr
		for _, r := range recs {
			if r.owner == cur && r.addr.IsValid() {
				addrs = append(addrs, r.addr)
				ttl = min(ttl, r.ttl)
			}
		}
		if len(addrs) > 0 {
			return addrs, ttl, nil
		}
		next := ""
		for _, r := range recs {
			if r.owner == cur && r.target != "" {
				next = r.target
				ttl = min(ttl, r.ttl)
				break
			}
		}
		if next == "" {
			return nil, 0, fmt.Errorf("no address records: %w", ErrNotFound)
		}
		if hop >= maxCNAMEHops {
			return nil, 0, fmt.Errorf("cname chain longer than %d", maxCNAMEHops)
		}
		cur = next
	}
}

// ownerName returns a wire name in the form names are compared in: ASCII
// lower case, without the trailing dot. Only ASCII is folded, so no two
// distinct DNS names compare equal.
func ownerName(n dnsmessage.Name) string {
	b := n.Data[:n.Length]
	if len(b) > 0 && b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

// cache holds resolved answers by name, bounded in size, and joins
// concurrent lookups of the same name. It is safe for concurrent use.
type cache struct {
	max int
	now func() time.Time // replaced in tests

	// mu guards entries and flights.
	mu      sync.Mutex
	entries map[string]cacheEntry
	flights map[string]*flight
}

type cacheEntry struct {
	key     string // the upstream set that produced it
	ans     Answer
	expires time.Time
}

// flight is one lookup in progress; done is closed when its result is set.
type flight struct {
	done chan struct{}
	ans  Answer
	err  error
	// abandoned: the leader's own context ended, so waiters with a live
	// context should try again rather than take its error.
	abandoned bool
}

func newCache(size int) *cache {
	return &cache{
		max:     size,
		now:     time.Now,
		entries: make(map[string]cacheEntry),
		flights: make(map[string]*flight),
	}
}

// get returns the cached answer for name under upstream set key, or runs
// fetch (once, however many callers ask at the same time) and caches what
// it returns.
func (c *cache) get(ctx context.Context, name, key string, fetch func(context.Context) (Answer, time.Duration, error)) (Answer, error) {
	fkey := key + " " + name
	for {
		c.mu.Lock()
		if e, ok := c.entries[name]; ok && e.key == key && c.now().Before(e.expires) {
			ans := e.ans.clone()
			c.mu.Unlock()
			return ans, nil
		}
		if f, ok := c.flights[fkey]; ok {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return Answer{}, fmt.Errorf("resolve %s: %w", name, ctx.Err())
			}
			if f.abandoned && ctx.Err() == nil {
				continue
			}
			if f.err != nil {
				return Answer{}, f.err
			}
			return f.ans.clone(), nil
		}
		f := &flight{done: make(chan struct{})}
		c.flights[fkey] = f
		c.mu.Unlock()

		ans, ttl, err := fetch(ctx)
		f.ans, f.err, f.abandoned = ans, err, err != nil && ctx.Err() != nil

		c.mu.Lock()
		delete(c.flights, fkey)
		if err == nil {
			c.put(name, cacheEntry{key: key, ans: ans, expires: c.now().Add(min(max(ttl, minCacheTTL), maxCacheTTL))})
		}
		c.mu.Unlock()
		close(f.done)
		if err != nil {
			return Answer{}, err
		}
		return ans.clone(), nil
	}
}

// put stores e, making room first: expired entries go, and if the cache is
// still full, an arbitrary entry. c.mu must be held.
func (c *cache) put(name string, e cacheEntry) {
	if _, ok := c.entries[name]; !ok && len(c.entries) >= c.max {
		now := c.now()
		for n, old := range c.entries {
			if !now.Before(old.expires) {
				delete(c.entries, n)
			}
		}
		for n := range c.entries {
			if len(c.entries) < c.max {
				break
			}
			delete(c.entries, n)
		}
	}
	c.entries[name] = e
}
