package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Decide decides one flow, taking the steps of docs/policy.md in order:
//
//  1. f.Host is a cloud metadata name, or f.Addr or an address Unwrap finds
//     in it is a metadata address: deny, rule builtin:metadata.
//  2. A deny rule matches (a host rule f.Host, a cidr rule f.Addr or any
//     address embedded in it; and the proto and port): deny, rule deny[i].
//  3. f.Addr or an embedded address is in a WithLocal prefix (the
//     gateway's own addresses): deny, rule builtin:special-range; nothing
//     lifts this. Else, f.Addr or an embedded address is in a special
//     range: deny, rule builtin:special-range, unless an allow cidr rule
//     with matching proto and port covers that address from inside the
//     range (its prefix is the range or narrower: 10.1.2.0/24 opens
//     10.1.2.x, while 0.0.0.0/0, ::/0 or 8.0.0.0/6 never open 10/8), or
//     f.Host has a dns.hosts entry holding f.Addr. The range is the
//     narrowest special range holding the address; each of the host's own
//     addresses (WithHostAddrs) is a range of its own, the address alone,
//     so only a rule naming exactly it (/32, /128) or dns.hosts opens it.
//  4. The first allow rule matching proto, port and (host rule) f.Host or
//     (cidr rule) f.Addr: allow, rule allow[i]. A cidr rule broader than
//     the special range holding f.Addr does not match it.
//  5. Otherwise deny, rule default; but in a Learning policy, allow with
//     rule learn (step 4b), unless the guard of step 3 was lifted only by
//     f.Host's dns.hosts entry: then deny, rule builtin:special-range
//     (dns.hosts opens a special range for the allow rules, never for
//     learning).
//
// A zero f.Addr skips every address part; an empty f.Host every name part.
// f.Host should be normalized (see NormalizeName); a name that is not is
// normalized here, and a name that does not normalize is denied.
//
// Decide does no I/O and is safe for concurrent use. It does not allocate
// when it allows, nor when it denies by a deny rule or a metadata address
// given as is; a denial whose reason names the flow's own address or port
// allocates that one reason string.
func (p *Policy) Decide(f Flow) Decision {
	host := f.Host
	if host != "" {
		h, err := canonHost(host)
		if err != nil {
			return Decision{Deny, RuleDefault, err.Error()}
		}
		host = h
	}
	var buf [maxUnwrap]netip.Addr
	n := unwrapInto(f.Addr, &buf)
	addrs := buf[:n]
	if host == "" && n == 0 {
		return Decision{Deny, RuleDefault, "flow has neither a name nor an address"}
	}

	// 1. Cloud metadata.
	if host != "" && !p.noMetadata {
		if r := metadataNameReason(host); r != "" {
			return Decision{Deny, RuleMetadata, r}
		}
	}
	for i, a := range addrs {
		if p.noMetadata {
			break
		}
		if r := metadataReason(a); r != "" {
			if i > 0 {
				var rb reasonBuf
				r = rb.addr(addrs[0]).str(" embeds ").addr(a).str(", a cloud metadata address").String()
			}
			return Decision{Deny, RuleMetadata, r}
		}
	}

	// 2. Deny rules.
	w := want{kind: wantFlow, pm: protoBit(f.Proto), port: f.Port}
	h := noHit()
	p.deny.matchHost(host, w, &h)
	via := -1 // which address matched the best deny rule
	for i, a := range addrs {
		before := h.best
		p.deny.matchAddr(a, w, &h)
		if h.best != before {
			via = i
		}
	}
	if h.best >= 0 {
		r := &p.deny.rules[h.best]
		reason := r.reason
		if !r.isHost() && via > 0 {
			var rb reasonBuf
			reason = rb.addr(addrs[0]).str(" embeds ").addr(addrs[via]).str("; ").str(reason).String()
		}
		return Decision{Deny, r.id, reason}
	}

	// 3. The gateway's own addresses, then the special ranges.
	for i, a := range addrs {
		if pr := p.localOf(a); pr.IsValid() {
			var rb reasonBuf
			if i > 0 {
				rb.addr(addrs[0]).str(" embeds ")
			}
			rb.addr(a).str(" is in ").prefix(pr).str(" (the gateway's own addresses); never dialled, whatever the policy says")
			return Decision{Deny, RuleSpecialRange, rb.String()}
		}
	}
	var sr0 specialRange // the guarded range holding addrs[0], for step 4
	var in0 bool
	if n > 0 {
		sr0, in0 = p.guardRangeOf(addrs[0])
	}
	// byHosts: a dns.hosts entry lifted the guard of a special range (the
	// name's own address, or one embedded in it, is guarded). It lifts the
	// guard only for the allow rules of step 4, not for learning (4b).
	byHosts := false
	if n > 0 && host != "" && p.hostsHas(host, addrs[0]) {
		for i, a := range addrs {
			if i == 0 && in0 || i > 0 && p.guarded(a) {
				byHosts = true
				break
			}
		}
	}
	if n > 0 && !(host != "" && p.hostsHas(host, addrs[0])) {
		for i, a := range addrs {
			sr, in := sr0, in0
			if i > 0 {
				sr, in = p.guardRangeOf(a)
			}
			if !in {
				continue
			}
			lift := noHit()
			p.allow.matchAddrBits(a, sr.prefix.Bits(), 129, w, &lift)
			if lift.best >= 0 {
				continue
			}
			broad := noHit()
			p.allow.matchAddrBits(a, 0, sr.prefix.Bits(), w, &broad)
			return Decision{Deny, RuleSpecialRange, p.specialReason(addrs[0], a, i > 0, &sr, broad.best)}
		}
	}

	// 3b. QUIC to a terminated host: refused at once, so that the
	// client falls back to TCP, where its requests are decided.
	if f.Proto == UDP && host != "" && p.hasTerminate {
		if id := p.terminatingRule(host); id != "" {
			return Decision{Deny, id, "UDP (QUIC) to a host whose TLS nsgate terminates is refused; clients fall back to TCP"}
		}
	}

	// 4. Allow rules.
	h = noHit()
	p.allow.matchHost(host, w, &h)
	if n > 0 {
		minBits := 0
		if in0 {
			minBits = sr0.prefix.Bits()
		}
		p.allow.matchAddrBits(addrs[0], minBits, 129, w, &h)
	}
	if h.best >= 0 {
		r := &p.allow.rules[h.best]
		return Decision{Allow, r.id, r.reason}
	}

	// 4b. Learning: what no step above decided is allowed, and recorded;
	// but a special range that only dns.hosts opened stays refused on
	// every port no allow rule names.
	if p.learn && byHosts {
		var rb reasonBuf
		rb.str("learning: ").flow(f.Proto, host, addrs, f.Port).str(" is in a special range that only dns.hosts opened, and no allow rule matches this proto and port; learning never opens it")
		return Decision{Deny, RuleSpecialRange, rb.String()}
	}
	if p.learn {
		return Decision{Allow, RuleLearn, learnReason}
	}

	// 5. Default, naming the first rule that covered the destination.
	var rb reasonBuf
	rb.str("no allow rule matches ").flow(f.Proto, host, addrs, f.Port)
	if h.near >= 0 {
		r := &p.allow.rules[h.near]
		if r.protos&w.pm == 0 {
			rb.str(" (").str(r.id).str(" is ").str(r.protos.String()).str(" only)")
		} else {
			rb.str(" (port ").num(f.Port).str(" not in ").str(r.id).str(" ports)")
		}
	}
	return Decision{Deny, RuleDefault, rb.String()}
}

// learnReason is the reason of every decision taken by step 4b.
const learnReason = "learning: no allow rule covers it; allowed and recorded for the learned policy"

// specialReason explains a special-range denial of a (embedded in outer
// when embedded); broad is the allow rule that covers a from outside the
// range, or -1.
func (p *Policy) specialReason(outer, a netip.Addr, embedded bool, sr *specialRange, broad int32) string {
	var rb reasonBuf
	if embedded {
		rb.addr(outer).str(" embeds ")
	}
	hostOwn := sr.what == hostAddrWhat || strings.HasPrefix(sr.what, hostAddrUnknown)
	switch {
	case sr.what == hostAddrWhat:
		rb.addr(a).str(" is the host's own address; allow it with a cidr rule naming exactly ").prefix(sr.prefix).str(" or dns.hosts")
	case hostOwn:
		rb.addr(a).str(" is ").str(sr.what).str("; allow it with a cidr rule naming exactly ").prefix(sr.prefix).str(" or dns.hosts")
	default:
		rb.addr(a).str(" is in ").prefix(sr.prefix).str(" (").str(sr.what).str("); allow it with a cidr rule inside that range or dns.hosts")
	}
	if broad >= 0 {
		r := &p.allow.rules[broad]
		what := " is broader than the range and does not open it)"
		if hostOwn {
			what = " is broader than the address and does not open it)"
		}
		rb.str(" (").str(r.id).str(" ").prefix(r.prefix).str(what)
	}
	return rb.String()
}

// reasonBuf builds a reason in a fixed array on the stack, so that a reason
// naming the flow costs only the final string. Text past the array's end is
// cut short.
type reasonBuf struct {
	b [256]byte
	n int
}

func (rb *reasonBuf) str(s string) *reasonBuf {
	rb.n += copy(rb.b[rb.n:], s)
	return rb
}

func (rb *reasonBuf) addr(a netip.Addr) *reasonBuf {
	// The longest address text is 39 bytes (zones are stripped before).
	if len(rb.b)-rb.n >= 48 {
		out := a.AppendTo(rb.b[rb.n:rb.n])
		rb.n += len(out)
	}
	return rb
}

func (rb *reasonBuf) prefix(p netip.Prefix) *reasonBuf {
	if len(rb.b)-rb.n >= 48 {
		out := p.AppendTo(rb.b[rb.n:rb.n])
		rb.n += len(out)
	}
	return rb
}

func (rb *reasonBuf) num(v uint16) *reasonBuf {
	if len(rb.b)-rb.n >= 5 {
		out := strconv.AppendUint(rb.b[rb.n:rb.n], uint64(v), 10)
		rb.n += len(out)
	}
	return rb
}

// flow writes "tcp app.test:443", "tcp 203.0.113.9:81",
// "tcp [2001:db8::1]:81" or "tcp app.test (203.0.113.9):443"; addrs is the
// flow's Unwrap (the first entry is the address itself).
func (rb *reasonBuf) flow(proto Proto, host string, addrs []netip.Addr, port uint16) *reasonBuf {
	rb.str(proto.String()).str(" ")
	switch {
	case host != "" && len(addrs) > 0:
		rb.str(host).str(" (").addr(addrs[0]).str("):")
	case host != "" || len(addrs) == 0:
		rb.str(host).str(":")
	case addrs[0].Is6():
		rb.str("[").addr(addrs[0]).str("]:")
	default:
		rb.addr(addrs[0]).str(":")
	}
	return rb.num(port)
}

func (rb *reasonBuf) String() string { return string(rb.b[:rb.n]) }

// NameAllowed decides whether a name may resolve (nsgate's DNS answers it):
//
//  1. a cloud metadata name: deny, rule builtin:metadata;
//  2. a deny host rule covering the name for every proto and port: deny,
//     rule deny[i] (a deny rule limited to some ports or one proto leaves
//     the name resolvable, since other flows to it may be allowed);
//  3. a dns.hosts entry: allow, rule hosts;
//  4. an allow host rule covering the name (any proto or port): allow,
//     rule allow[i];
//  5. otherwise deny, rule default (in a Learning policy: allow, rule
//     learn).
//
// name should be normalized; one that does not normalize is denied. An
// allowed name still needs Decide for each flow. NameAllowed does no I/O and
// is safe for concurrent use.
func (p *Policy) NameAllowed(name string) Decision {
	host, err := canonHost(name)
	if err != nil {
		return Decision{Deny, RuleDefault, err.Error()}
	}
	if r := metadataNameReason(host); r != "" && !p.noMetadata {
		return Decision{Deny, RuleMetadata, r}
	}
	h := noHit()
	p.deny.matchHost(host, want{kind: wantAll}, &h)
	if h.best >= 0 {
		r := &p.deny.rules[h.best]
		return Decision{Deny, r.id, r.reason}
	}
	if _, ok := p.hosts[host]; ok {
		return Decision{Allow, RuleHosts, host + " is in dns.hosts"}
	}
	h = noHit()
	p.allow.matchHost(host, want{kind: wantSome}, &h)
	if h.best >= 0 {
		r := &p.allow.rules[h.best]
		return Decision{Allow, r.id, r.reason}
	}
	if p.learn {
		return Decision{Allow, RuleLearn, learnReason}
	}
	return Decision{Deny, RuleDefault, "no allow host rule or dns.hosts entry covers " + host}
}

// L7None reports whether rule (a Decision's Rule, such as "allow[2]") is
// an allow host rule with "l7: none": its UDP flows by name are relayed
// without the QUIC Initial check. Any other rule, or "", is false. It does
// no I/O, does not allocate and is safe for concurrent use.
func (p *Policy) L7None(rule string) bool {
	const prefix = "allow["
	if len(rule) < len(prefix)+2 || rule[:len(prefix)] != prefix || rule[len(rule)-1] != ']' {
		return false
	}
	i, err := strconv.Atoi(rule[len(prefix) : len(rule)-1])
	if err != nil || i < 0 || i >= len(p.allow.rules) {
		return false
	}
	r := &p.allow.rules[i]
	return r.l7None && r.id == rule
}

// Explain decides a destination the way a flow to it would be decided,
// without any network I/O, for `nsgate explain`. dest is an IP literal (an
// IPv6 one may be in brackets) or a name. For an address it returns Decide
// of that IP flow. For a name it returns the first denial among NameAllowed
// and Decide of the unresolved name flow; then, if dns.hosts has the name,
// the decision for its first static address that is allowed, else for the
// first one. A name without static answers is decided by name alone: the
// answers upstream DNS would give are checked only when a flow is made.
// It returns an error for an unknown proto or an unparsable dest.
func (p *Policy) Explain(proto Proto, dest string, port uint16) (Decision, error) {
	if proto != TCP && proto != UDP {
		return Decision{}, fmt.Errorf("explain: unknown protocol %d", proto)
	}
	if dest == "" {
		return Decision{}, errors.New("explain: empty destination")
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(dest, "["), "]")); err == nil {
		return p.Decide(Flow{Proto: proto, Addr: a, Port: port}), nil
	}
	if strings.ContainsAny(dest, "[]") {
		return Decision{}, fmt.Errorf("explain: %q is not an IP address", dest)
	}
	name, err := NormalizeName(dest)
	if err != nil {
		return Decision{}, fmt.Errorf("explain: %w", err)
	}
	if d := p.NameAllowed(name); d.Verdict == Deny {
		return d, nil
	}
	d := p.Decide(Flow{Proto: proto, Host: name, Port: port})
	if d.Verdict == Deny {
		return d, nil
	}
	addrs := p.hosts[name]
	if len(addrs) == 0 {
		return d, nil
	}
	var first Decision
	for i, a := range addrs {
		ad := p.Decide(Flow{Proto: proto, Host: name, Addr: a, Port: port})
		ad.Reason += " (dns.hosts " + a.String() + ")"
		if ad.Verdict == Allow {
			return ad, nil
		}
		if i == 0 {
			first = ad
		}
	}
	return first, nil
}
