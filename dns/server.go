// Package dns is nsgate's DNS: the fake-IP server that answers the worker
// at the gateway's resolver address, the table that maps fake addresses
// back to names, and the host-side resolver used when a flow to a fake
// address is dialled.
//
// The worker never learns a real address. A query for a name the policy
// allows gets a fake address from a private pool (198.18.0.0/15 and a ULA
// /64 by default), stable per name; a query for any other name gets
// NXDOMAIN. Nothing is sent upstream while answering the worker: the real
// lookup happens on the host side, through [Server.Resolve], when the
// worker opens a flow to a fake address.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/policy"
)

// Defaults for [Config]: the fake-IP pools of nsgate's address plan
// (netplan.Plan.FakePool4 and FakePool6).
var (
	DefaultV4Pool = netplan.Default().FakePool4()
	DefaultV6Pool = netplan.Default().FakePool6()
)

const (
	// DefaultMaxNames bounds the fake-address table.
	DefaultMaxNames = 1 << 16
	// DefaultTTL is the TTL of fake answers. The mapping is stable, so a
	// short TTL only costs the worker a cheap re-query.
	DefaultTTL = 5 * time.Second
	// DefaultCacheSize bounds the host-side resolver's cache.
	DefaultCacheSize = 4096
	// DefaultTimeout bounds one upstream attempt (one server, one type).
	DefaultTimeout = 2 * time.Second
	// DefaultResolvConf is read for nameservers when no upstream is
	// configured.
	DefaultResolvConf = "/etc/resolv.conf"
)

// Config configures a [Server]. Only Policy is required.
type Config struct {
	// Policy returns the current policy; it is called once per query or
	// resolution, so the holder may swap policies atomically at any time.
	// A nil result denies every name.
	Policy func() *policy.Policy
	// Audit receives one dns event per message, refused ones included
	// (RuleMalformed, RuleOpcode). Nil: no audit. When it can
	// fail (audit.Failer) and has failed, or is full (audit.Filler), every
	// query is refused (REFUSED)
	// from then on: the audit fails closed.
	Audit audit.Sink
	// Upstream overrides the resolvers used by Resolve ("ip:port", tried
	// in order). Empty: the policy's dns.upstream, else the nameservers
	// of ResolvConfPath (read on each cache miss, so edits are seen).
	Upstream []string
	// ResolvConfPath is the host resolv.conf; default /etc/resolv.conf.
	ResolvConfPath string
	// Exchange sends one query to server ("ip:port") and returns the raw
	// reply. Default: UDP, retried over TCP when the reply is truncated.
	// Tests inject a fake upstream here.
	Exchange func(ctx context.Context, server string, msg []byte) ([]byte, error)
	// IPv6 turns on fake AAAA answers and AAAA lookups upstream.
	IPv6 bool
	// V4Pool and V6Pool are the fake-address pools; defaults
	// DefaultV4Pool and DefaultV6Pool.
	V4Pool netip.Prefix
	V6Pool netip.Prefix
	// MaxNames bounds the number of names holding a fake address
	// (default DefaultMaxNames, and never more than a pool holds).
	MaxNames int
	// TTL of fake answers; default DefaultTTL.
	TTL time.Duration
	// CacheSize bounds the resolver cache (names); default
	// DefaultCacheSize.
	CacheSize int
	// Timeout bounds one upstream attempt; default DefaultTimeout.
	Timeout time.Duration
	// Leak, when set, names the credential whose placeholder a query name
	// holds: such a query is refused (REFUSED) and recorded as a
	// credential deny, without the name, before the policy is asked.
	Leak func(name string) (credential string, found bool)
	// BlockPage answers a refused name as the policy's dns.block_page
	// does (whatever the policy says): see [Server.ServeDNS].
	BlockPage bool
}

// Server answers the worker's DNS queries with fake addresses and resolves
// names on the host side. All methods are safe for concurrent use; none
// blocks except Resolve, which waits for upstream replies.
type Server struct {
	policy   func() *policy.Policy
	audit    audit.Sink
	failed   <-chan struct{} // closed when the audit has failed
	full     <-chan struct{} // closed when the audit log is full (its reserve)
	upstream []string
	resolv   string
	exchange func(ctx context.Context, server string, msg []byte) ([]byte, error)
	ipv6     bool
	block    bool // Config.BlockPage
	ttl      uint32
	timeout  time.Duration
	table    *table
	cache    *cache
	leak     func(string) (string, bool)

	stats struct {
		queries, allowed, denied, malformed, dropped atomic.Uint64
	}
}

// New checks cfg, fills in defaults and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Policy == nil {
		return nil, errors.New("dns: no policy source")
	}
	if !cfg.V4Pool.IsValid() {
		cfg.V4Pool = DefaultV4Pool
	}
	if !cfg.V6Pool.IsValid() {
		cfg.V6Pool = DefaultV6Pool
	}
	if !cfg.V4Pool.Addr().Is4() || cfg.V4Pool.Bits() > 30 {
		return nil, fmt.Errorf("dns: v4 pool %s: need an IPv4 prefix of /30 or larger", cfg.V4Pool)
	}
	if !cfg.V6Pool.Addr().Is6() || cfg.V6Pool.Addr().Is4In6() || cfg.V6Pool.Bits() > 126 {
		return nil, fmt.Errorf("dns: v6 pool %s: need an IPv6 prefix of /126 or larger", cfg.V6Pool)
	}
	v4, v6 := cfg.V4Pool.Masked(), cfg.V6Pool.Masked()
	if cfg.MaxNames <= 0 {
		cfg.MaxNames = DefaultMaxNames
	}
	size := min(cfg.MaxNames, poolSlots(v4))
	if cfg.IPv6 {
		size = min(size, poolSlots(v6))
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ResolvConfPath == "" {
		cfg.ResolvConfPath = DefaultResolvConf
	}
	for _, u := range cfg.Upstream {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return nil, fmt.Errorf("dns: upstream %q: want ip:port: %w", u, err)
		}
	}
	s := &Server{
		policy:   cfg.Policy,
		audit:    cfg.Audit,
		failed:   audit.FailedOf(cfg.Audit),
		full:     audit.FullOf(cfg.Audit),
		upstream: append([]string(nil), cfg.Upstream...),
		resolv:   cfg.ResolvConfPath,
		exchange: cfg.Exchange,
		ipv6:     cfg.IPv6,
		block:    cfg.BlockPage,
		ttl:      uint32(max(cfg.TTL/time.Second, 1)),
		timeout:  cfg.Timeout,
		table:    newTable(v4, v6, size),
		cache:    newCache(cfg.CacheSize),
		leak:     cfg.Leak,
	}
	if s.exchange == nil {
		s.exchange = Exchange
	}
	return s, nil
}

// Stats counts what ServeDNS did since the server started.
type Stats struct {
	Queries   uint64 // messages handed to ServeDNS
	Allowed   uint64 // answered for an allowed name (fake address or empty NOERROR)
	Denied    uint64 // NXDOMAIN or REFUSED for a name
	Malformed uint64 // answered FORMERR or NOTIMP
	Dropped   uint64 // not answered at all (shorter than a header, or a response)
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Queries:   s.stats.queries.Load(),
		Allowed:   s.stats.allowed.Load(),
		Denied:    s.stats.denied.Load(),
		Malformed: s.stats.malformed.Load(),
		Dropped:   s.stats.dropped.Load(),
	}
}

// NameOf returns the name a fake address stands for and marks the mapping
// used. It reports false for addresses outside the pools and for pool
// addresses not handed out. IPv4-mapped IPv6 forms of a fake IPv4 address
// are recognised.
func (s *Server) NameOf(a netip.Addr) (string, bool) {
	return s.table.nameOf(s.table.slotOf(a))
}

// IsFake reports whether a lies in one of the fake pools, handed out or
// not. Such an address is never a real destination: a flow to one that
// NameOf does not know must be refused, not dialled.
func (s *Server) IsFake(a netip.Addr) bool {
	return s.table.contains(a)
}

// ServeDNS answers one DNS message from the worker and returns the reply,
// or nil when the message must be dropped (shorter than a DNS header, or
// itself a response). msg and the reply are bare DNS messages: over TCP the
// caller strips and adds the two-byte length prefix. tcp only lifts the
// UDP size limit (512 bytes, or the query's EDNS0 size up to 1232); a
// longer UDP reply is cut to its question with TC set. ServeDNS never
// sends anything upstream and never panics on any input; it does not
// retain msg, and the returned slice is the caller's.
func (s *Server) ServeDNS(msg []byte, tcp bool) []byte {
	s.stats.queries.Add(1)
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		s.stats.dropped.Add(1)
		s.logRefused(RuleMalformed, nil)
		return nil
	}
	q, qerr := p.Question()
	if qerr == nil {
		if _, err := p.Question(); err != dnsmessage.ErrSectionDone {
			qerr = errors.New("more than one question")
		}
	}
	if h.OpCode != 0 {
		s.stats.malformed.Add(1)
		var qp *dnsmessage.Question
		if qerr == nil {
			qp = &q
		}
		s.logRefused(RuleOpcode, qp)
		r := newReply(h, dnsmessage.RCodeNotImplemented, qp)
		return r.finish(0)
	}
	if qerr != nil {
		s.stats.malformed.Add(1)
		s.logRefused(RuleMalformed, nil)
		r := newReply(h, dnsmessage.RCodeFormatError, nil)
		return r.finish(0)
	}
	limit := 0
	edns, size := readEDNS(&p)
	if !tcp {
		limit = maxUDP
		if edns {
			limit = min(max(int(size), maxUDP), ednsSize)
		}
	}
	r := s.answer(h, &q)
	if edns {
		r.opt()
	}
	return r.finish(limit)
}

// readEDNS looks for an OPT record in the additional section and returns
// its UDP payload size. A malformed tail is ignored: the question has been
// read, and that is all a fake answer needs.
func readEDNS(p *dnsmessage.Parser) (bool, uint16) {
	if err := p.SkipAllAnswers(); err != nil {
		return false, 0
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return false, 0
	}
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			return false, 0
		}
		if rh.Type == dnsmessage.TypeOPT {
			return true, uint16(rh.Class)
		}
		if err := p.SkipAdditional(); err != nil {
			return false, 0
		}
	}
}

// answer decides one well-formed query and builds the reply.
func (s *Server) answer(h dnsmessage.Header, q *dnsmessage.Question) reply {
	if audit.IsFailed(s.failed) || audit.IsFailed(s.full) {
		// The audit log cannot record an answer (or only into the
		// reserve it keeps for the closing records): refuse them all.
		s.stats.denied.Add(1)
		return newReply(h, dnsmessage.RCodeRefused, q)
	}
	qtype := TypeString(q.Type)
	raw := q.Name.String()
	if q.Class != dnsmessage.ClassINET {
		s.log(presentName(raw), qtype, policy.Decision{Rule: "default"}, nil)
		s.stats.denied.Add(1)
		return newReply(h, dnsmessage.RCodeRefused, q)
	}
	name, err := policy.NormalizeName(strings.TrimSuffix(raw, "."))
	if err != nil {
		s.log(presentName(raw), qtype, policy.Decision{Rule: "default"}, nil)
		s.stats.denied.Add(1)
		return newReply(h, dnsmessage.RCodeNameError, q)
	}
	if s.leak != nil {
		if c, found := s.leak(name); found {
			if s.audit != nil {
				s.audit.Log(audit.Credential{Action: "deny", Credential: c, Where: "a DNS name",
					Reason: "credential " + c + ": placeholder in a DNS query name, where it may not go"})
			}
			s.stats.denied.Add(1)
			return newReply(h, dnsmessage.RCodeRefused, q)
		}
	}
	if q.Type == dnsmessage.TypeTXT && isGatewayProbe(name) {
		// Another nsgate, our worker, asks whether we are a gateway
		// (gateway.go): whatever the policy, since it reveals nothing
		// and is sent nowhere.
		return s.answerGateway(h, q, name)
	}
	pol := s.policy()

	if q.Type == dnsmessage.TypePTR {
		if a, ok := reverseAddr(name); ok {
			return s.answerPTR(h, q, name, a, pol)
		}
	}

	d := decideName(pol, name)
	if d.Verdict != policy.Allow {
		s.stats.denied.Add(1)
		if s.blockPage(pol, d) {
			return s.answerBlocked(h, q, name, qtype, d)
		}
		s.log(name, qtype, d, nil)
		r := newReply(h, dnsmessage.RCodeNameError, q)
		r.ede = blockedText(d)
		return r
	}
	s.stats.allowed.Add(1)
	r := newReply(h, dnsmessage.RCodeSuccess, q)
	switch {
	case q.Type == dnsmessage.TypeA:
		a := s.table.addr4(s.table.lookup(name))
		b := a.As4()
		r.answer(dnsmessage.TypeA, s.ttl, b[:])
		s.log(name, qtype, d, []string{a.String()})
	case q.Type == dnsmessage.TypeAAAA && s.ipv6:
		a := s.table.addr6(s.table.lookup(name))
		b := a.As16()
		r.answer(dnsmessage.TypeAAAA, s.ttl, b[:])
		s.log(name, qtype, d, []string{a.String()})
	default:
		s.log(name, qtype, d, nil)
	}
	return r
}

// blockPage says a refused name is answered for the block page: the
// session asked for it (Config.BlockPage) or the policy does
// (dns.block_page). A cloud-metadata name never is: it keeps its
// NXDOMAIN, so that no metadata client is told a server is there.
func (s *Server) blockPage(pol *policy.Policy, d policy.Decision) bool {
	if d.Rule == policy.RuleMetadata {
		return false
	}
	return s.block || (pol != nil && pol.BlockPage())
}

// answerBlocked answers a refused name for the block page: A and AAAA
// get the name's fake address (stable per name, like an allowed name's),
// every other type an empty NOERROR, all with the refusal's Extended DNS
// Error. The record is a denial (the answer it names is the block page's
// address): nothing is resolved or sent upstream, and the gateway
// refuses every flow to that address (netstack serves the page itself).
func (s *Server) answerBlocked(h dnsmessage.Header, q *dnsmessage.Question, name, qtype string, d policy.Decision) reply {
	r := newReply(h, dnsmessage.RCodeSuccess, q)
	r.ede = blockedText(d)
	var answer []string
	switch {
	case q.Type == dnsmessage.TypeA:
		a := s.table.addr4(s.table.lookup(name))
		b := a.As4()
		r.answer(dnsmessage.TypeA, s.ttl, b[:])
		answer = []string{a.String()}
	case q.Type == dnsmessage.TypeAAAA && s.ipv6:
		a := s.table.addr6(s.table.lookup(name))
		b := a.As16()
		r.answer(dnsmessage.TypeAAAA, s.ttl, b[:])
		answer = []string{a.String()}
	}
	s.log(name, qtype, d, answer)
	return r
}

// answerPTR answers a reverse lookup: a fake address that is handed out,
// whose name the current policy still allows, maps back to that name;
// anything else is NXDOMAIN.
func (s *Server) answerPTR(h dnsmessage.Header, q *dnsmessage.Question, qname string, a netip.Addr, pol *policy.Policy) reply {
	target, ok := s.NameOf(a)
	if !ok {
		s.log(qname, "PTR", policy.Decision{Rule: "default"}, nil)
		s.stats.denied.Add(1)
		return newReply(h, dnsmessage.RCodeNameError, q)
	}
	d := decideName(pol, target)
	if d.Verdict != policy.Allow {
		s.log(qname, "PTR", d, nil)
		s.stats.denied.Add(1)
		return newReply(h, dnsmessage.RCodeNameError, q)
	}
	s.stats.allowed.Add(1)
	r := newReply(h, dnsmessage.RCodeSuccess, q)
	r.answer(dnsmessage.TypePTR, s.ttl, appendTextName(nil, target))
	s.log(qname, "PTR", d, []string{target})
	return r
}

// blockedText is the Extended DNS Error text of a name the policy refused:
// that nsgate refused it, the rule and the reason, so that a program (an
// AI agent reading `dig` or its resolver's error) can tell a policy
// refusal from a missing name. The text is ASCII: names are normalized
// (punycode) before they are decided.
func blockedText(d policy.Decision) string {
	return "nsgate policy: denied by rule " + d.Rule + ": " + d.Reason + " (ask the operator to allow the name)"
}

// decideName asks the policy about a name; no policy denies everything.
func decideName(pol *policy.Policy, name string) policy.Decision {
	if pol == nil {
		return policy.Decision{Verdict: policy.Deny, Rule: "default", Reason: "no policy"}
	}
	return pol.NameAllowed(name)
}

// Rules of the dns records of messages nsgate refuses before any name is
// decided. Every message the worker sends leaves a record, so that a
// message nsgate will not read (and so never decides) is in the log too;
// the log folds repeats (audit.Logger), which bounds their volume.
const (
	// RuleMalformed: a message that is not one readable query (FORMERR:
	// no question, several, a name cut short or looping), or one dropped
	// unanswered (shorter than a header, or a response).
	RuleMalformed = "builtin:dns-malformed"
	// RuleOpcode: a message with an opcode other than QUERY (NOTIFY,
	// UPDATE, ...), answered NOTIMP. Its question, when readable, is
	// recorded: an UPDATE naming a zone is a refusal of that name.
	RuleOpcode = "builtin:dns-opcode"
)

// logRefused records a message refused under rule; q is its question
// when one was read.
func (s *Server) logRefused(rule string, q *dnsmessage.Question) {
	var qname, qtype string
	if q != nil {
		raw := q.Name.String()
		qtype = TypeString(q.Type)
		if n, err := policy.NormalizeName(strings.TrimSuffix(raw, ".")); err == nil {
			qname = n
		} else {
			qname = presentName(raw)
		}
	}
	s.log(qname, qtype, policy.Decision{Verdict: policy.Deny, Rule: rule}, nil)
}

func (s *Server) log(qname, qtype string, d policy.Decision, answer []string) {
	if s.audit == nil {
		return
	}
	s.audit.Log(audit.DNS{
		QName:  qname,
		QType:  qtype,
		Action: d.Verdict.String(),
		Answer: answer,
		Rule:   d.Rule,
	})
}
