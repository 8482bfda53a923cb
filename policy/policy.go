package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Rule names outside the file's own rules.
const (
	RuleHosts        = "hosts"
	RuleMetadata     = "builtin:metadata"
	RuleSpecialRange = "builtin:special-range"
	RuleDefault      = "default"
	// RuleLearn allows what no allow rule covers in a Learning policy.
	RuleLearn = "learn"
)

// Policy is a parsed policy file. It is immutable: every method is safe for
// concurrent use, and slices it returns are copies the caller may keep.
// Build one with Parse or DenyAll; derive one with WithLocal.
type Policy struct {
	sha  string
	file string // the file name given to Parse, for warnings
	// noMetadata skips decision step 1 (WithoutMetadataStep): only the
	// lab's --break metadata sets it, to show the lab can fail.
	noMetadata bool
	// learn allows, as decision step 4b, whatever steps 1 to 4 left
	// undecided (Learning).
	learn      bool
	allow      ruleSet
	deny       ruleSet
	hosts      map[string][]netip.Addr // canonical name → static answers (unmapped, no zone)
	upstreams  []string                // "ip:port"; nil = host resolv.conf
	verifySNI  bool
	verifyHost bool
	// noRefusalAlert and noRefusalPage turn off what the worker is told
	// when an L7 check refuses (tls.refusal_alert, http.refusal_page).
	noRefusalAlert, noRefusalPage bool
	// blockPage: a refused name is answered with a fake address whose
	// flows get nsgate's block page (dns.block_page).
	blockPage    bool
	execAllow    []string
	fsWrite      []string       // filesystem.write, cleaned: "/abs", "~" or "~/rel"
	fsHide       []string       // filesystem.hide, the same forms
	warnings     []Error        // in file order
	local        []netip.Prefix // WithLocal prefixes, masked
	hostAddrs    *HostAddrs     // WithHostAddrs: the host's own addresses
	upstreamCA   string         // tls.upstream_ca
	hasTerminate bool           // some allow rule has tls: terminate
	credentials  []Credential   // credentials, in file order
}

// protoMask is a set of protocols a rule applies to.
type protoMask uint8

const (
	maskTCP protoMask = 1 << iota
	maskUDP
	maskAny = maskTCP | maskUDP
)

func protoBit(p Proto) protoMask {
	switch p {
	case TCP:
		return maskTCP
	case UDP:
		return maskUDP
	}
	return 0
}

func (m protoMask) String() string {
	switch m {
	case maskTCP:
		return "tcp"
	case maskUDP:
		return "udp"
	}
	return "any"
}

// portRange is an inclusive range of ports.
type portRange struct{ lo, hi uint16 }

// rule is one allow or deny entry. Exactly one of host and prefix is set.
type rule struct {
	id     string       // "allow[0]"
	host   string       // canonical name, without "*." for a wildcard
	wild   bool         // host is "*." + host
	prefix netip.Prefix // cidr rules
	protos protoMask
	ports  []portRange // sorted, merged; nil = every port
	// l7None is the rule's "l7: none": its UDP flows by name are relayed
	// without the QUIC Initial check (allow host rules with UDP only).
	l7None bool
	// terminate is the rule's "tls: terminate": its TLS flows end in
	// nsgate, which decides each request (requests; nil = every one).
	terminate bool
	requests  []reqRule
	reason    string // precomputed "matches allow[0]: host app.test (tcp 80,443)"
	// line and col locate the rule's host or cidr value, for warnings.
	line, col int32
}

func (r *rule) isHost() bool { return r.host != "" }

// pattern is the rule's destination as written in a normalized file.
func (r *rule) pattern() string {
	switch {
	case r.wild:
		return "*." + r.host
	case r.host != "":
		return r.host
	}
	return r.prefix.String()
}

// portsString formats the ports as "80,443,8000-8100" or "all ports".
func (r *rule) portsString() string {
	if r.ports == nil {
		return "all ports"
	}
	var b strings.Builder
	for i, pr := range r.ports {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(pr.lo)))
		if pr.hi != pr.lo {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(pr.hi)))
		}
	}
	return b.String()
}

func (r *rule) describe() string {
	kind := "cidr "
	if r.isHost() {
		kind = "host "
	}
	proto := r.protos.String()
	if r.protos == maskAny {
		proto = "any proto"
	}
	ports := r.portsString()
	l7 := ""
	if r.l7None {
		l7 = ", l7 none"
	}
	if r.terminate {
		l7 += ", tls terminate"
		if r.requests != nil {
			l7 += ", " + strconv.Itoa(len(r.requests)) + " request rules"
		}
	}
	if r.ports != nil {
		return kind + r.pattern() + " (" + proto + " " + ports + l7 + ")"
	}
	return kind + r.pattern() + " (" + proto + ", " + ports + l7 + ")"
}

func (r *rule) hasPort(port uint16) bool {
	if r.ports == nil {
		return true
	}
	for _, pr := range r.ports {
		if port < pr.lo {
			return false
		}
		if port <= pr.hi {
			return true
		}
	}
	return false
}

// want is what a rule must also satisfy once its destination matched.
type want struct {
	kind wantKind
	pm   protoMask
	port uint16
}

type wantKind uint8

const (
	wantFlow wantKind = iota // the rule covers this proto and port
	wantSome                 // any proto, any port: the rule mentions the name
	wantAll                  // the rule covers every proto and every port
)

func (r *rule) fits(w want) bool {
	switch w.kind {
	case wantSome:
		return true
	case wantAll:
		return r.protos == maskAny && r.ports == nil
	}
	return r.protos&w.pm != 0 && r.hasPort(w.port)
}

// ruleSet indexes the allow or the deny rules so that a decision costs a few
// map lookups, not a scan. Every index list is in ascending rule order.
type ruleSet struct {
	rules []rule
	exact map[string][]int32       // canonical name → host rules
	wild  map[string][]int32       // suffix (after "*.") → wildcard rules
	cidr  map[netip.Prefix][]int32 // prefix → cidr rules
	bits4 []int                    // distinct IPv4 prefix lengths, longest first
	bits6 []int                    // distinct IPv6 prefix lengths, longest first
}

func newRuleSet(rules []rule) ruleSet {
	s := ruleSet{rules: rules}
	if len(rules) == 0 {
		return s
	}
	s.exact = make(map[string][]int32)
	s.wild = make(map[string][]int32)
	s.cidr = make(map[netip.Prefix][]int32)
	for i := range rules {
		r := &rules[i]
		switch {
		case r.wild:
			s.wild[r.host] = append(s.wild[r.host], int32(i))
		case r.host != "":
			s.exact[r.host] = append(s.exact[r.host], int32(i))
		default:
			if len(s.cidr[r.prefix]) == 0 {
				if r.prefix.Addr().Is4() {
					s.bits4 = append(s.bits4, r.prefix.Bits())
				} else {
					s.bits6 = append(s.bits6, r.prefix.Bits())
				}
			}
			s.cidr[r.prefix] = append(s.cidr[r.prefix], int32(i))
		}
	}
	for _, b := range []*[]int{&s.bits4, &s.bits6} {
		slices.Sort(*b)
		*b = slices.Compact(*b)
		slices.Reverse(*b)
	}
	return s
}

// hit collects the lowest-numbered rule that matched fully (best) and the
// lowest-numbered rule whose destination matched (near); -1 for none.
type hit struct{ best, near int32 }

func noHit() hit { return hit{-1, -1} }

func (s *ruleSet) scan(idx []int32, w want, h *hit) {
	for _, i := range idx {
		if h.best >= 0 && i >= h.best {
			return
		}
		if h.near < 0 || i < h.near {
			h.near = i
		}
		if s.rules[i].fits(w) {
			h.best = i
			return
		}
	}
}

// matchHost looks up the host rules covering the canonical name host.
func (s *ruleSet) matchHost(host string, w want, h *hit) {
	if len(s.rules) == 0 || host == "" {
		return
	}
	if idx, ok := s.exact[host]; ok {
		s.scan(idx, w, h)
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			if idx, ok := s.wild[host[i+1:]]; ok {
				s.scan(idx, w, h)
			}
		}
	}
}

// matchAddr looks up the cidr rules containing a (zone-free, unmapped).
func (s *ruleSet) matchAddr(a netip.Addr, w want, h *hit) {
	s.matchAddrBits(a, 0, 129, w, h)
}

// matchAddrBits is matchAddr limited to rules whose prefix length is at
// least lo and below hi. Given a range of length n holding a, lo = n finds
// the rules inside the range and hi = n those broader than it.
func (s *ruleSet) matchAddrBits(a netip.Addr, lo, hi int, w want, h *hit) {
	if len(s.cidr) == 0 {
		return
	}
	bits := s.bits6
	if a.Is4() {
		bits = s.bits4
	}
	for _, b := range bits {
		if b >= hi {
			continue
		}
		if b < lo {
			return // longest first: the rest are broader still
		}
		p, err := a.Prefix(b)
		if err != nil {
			continue
		}
		if idx, ok := s.cidr[p]; ok {
			s.scan(idx, w, h)
		}
	}
}

// DenyAll returns the policy used when none is given: no rules, so every
// flow and name is denied; defaults elsewhere. Its SHA256 is that of empty
// input.
func DenyAll() *Policy {
	return &Policy{
		sha:        hashOf(nil),
		verifySNI:  true,
		verifyHost: true,
	}
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SHA256 returns the hex SHA-256 of the source bytes.
func (p *Policy) SHA256() string { return p.sha }

// StaticHosts returns the dns.hosts answers for name, which is normalized
// first, and whether the name has an entry. The slice is a copy.
func (p *Policy) StaticHosts(name string) ([]netip.Addr, bool) {
	n, err := canonHost(name)
	if err != nil {
		return nil, false
	}
	addrs, ok := p.hosts[n]
	if !ok {
		return nil, false
	}
	return slices.Clone(addrs), true
}

// hostsHas reports whether canonical name has a dns.hosts entry holding a
// (zone-free, unmapped).
func (p *Policy) hostsHas(name string, a netip.Addr) bool {
	for _, x := range p.hosts[name] {
		if x == a {
			return true
		}
	}
	return false
}

// Upstreams returns dns.upstream as "ip:port" strings (port 53 added where
// the file gave none; IPv6 in brackets), or nil when the file has none and
// the caller should use the host's resolv.conf.
func (p *Policy) Upstreams() []string { return slices.Clone(p.upstreams) }

// VerifySNI reports tls.verify_sni (default true).
func (p *Policy) VerifySNI() bool { return p.verifySNI }

// VerifyHost reports http.verify_host (default true).
func (p *Policy) VerifyHost() bool { return p.verifyHost }

// RefusalAlert reports whether a ClientHello refused by the SNI check gets
// a TLS access_denied alert before the connection closes
// (tls.refusal_alert, default true); otherwise it is reset.
func (p *Policy) RefusalAlert() bool { return !p.noRefusalAlert }

// BlockPage reports whether dns.block_page is on: a name the policy
// refuses (other than a cloud-metadata name) is answered with a fake
// address, and a TCP flow to it is answered by the gateway itself with a
// page saying that the policy refused the name, and why, instead of a
// reset. Nothing is dialled for such a flow either way.
func (p *Policy) BlockPage() bool { return p.blockPage }

// RefusalPage reports whether a plain HTTP request refused by the L7
// checks gets a short 403 response naming the reason
// (http.refusal_page, default true); otherwise it is reset.
func (p *Policy) RefusalPage() bool { return !p.noRefusalPage }

// ExecAllow returns exec.allow as written (absolute paths; a trailing slash
// marks a directory), or nil.
func (p *Policy) ExecAllow() []string { return slices.Clone(p.execAllow) }

// Warnings returns "FILE:LINE:COL: message" lines, in file order, for things
// that parse but deserve a second look, such as omitted ports or an allow
// cidr rule that overlaps a WithLocal prefix. nil when there are none.
func (p *Policy) Warnings() []string {
	if len(p.warnings) == 0 {
		return nil
	}
	out := make([]string, len(p.warnings))
	for i, w := range p.warnings {
		out[i] = w.Error()
	}
	return out
}

// WithLocal returns a copy of p that also guards the given prefixes: the
// gateway's own addresses (its subnets and its fake-IP pools). Unlike the
// special ranges, no rule and no dns.hosts entry opens them: a flow to an
// address in one, or embedding one, is denied at step 3 of Decide with rule
// builtin:special-range, whatever the allow rules say. p is not changed.
// Invalid prefixes are ignored; IPv4-mapped prefixes are read as IPv4. The
// copy's Warnings add one for each allow cidr rule overlapping a new prefix.
func (p *Policy) WithLocal(prefixes ...netip.Prefix) *Policy {
	q := *p
	q.local = slices.Clone(p.local)
	q.warnings = slices.Clone(p.warnings)
	for _, pr := range prefixes {
		if !pr.IsValid() {
			continue
		}
		pr = unmapPrefix(pr.Masked())
		if slices.Contains(q.local, pr) {
			continue
		}
		q.local = append(q.local, pr)
		for i := range p.allow.rules {
			r := &p.allow.rules[i]
			if r.isHost() || !r.prefix.IsValid() || !r.prefix.Overlaps(pr) {
				continue
			}
			q.warnings = append(q.warnings, Error{
				File: p.file, Line: int(r.line), Col: int(r.col),
				Msg: r.id + ".cidr: " + r.prefix.String() + " overlaps " + pr.String() +
					", the gateway's own addresses: flows there stay denied (no rule opens them)",
			})
		}
	}
	slices.SortStableFunc(q.warnings, compareErrors)
	return &q
}

// WithoutMetadataStep returns a copy that skips the built-in cloud-metadata
// step of Decide and NameAllowed. It exists only so that `nsgate lab
// --break metadata` can show the lab detecting a missing layer; nothing
// else may use it.
func (p *Policy) WithoutMetadataStep() *Policy {
	q := *p
	q.noMetadata = true
	return &q
}

// Learning returns a copy of base (DenyAll when nil) for learning a
// policy (`nsgate run --learn`): every name resolves and every flow that
// steps 1 to 4 of Decide leave undecided is allowed with rule "learn"
// instead of being denied by default. The cloud-metadata set, base's deny
// rules, the special ranges and the gateway's own prefixes (WithLocal)
// refuse exactly as they do in base, and base's allow rules still decide
// first, under their own ids; so the flows allowed with rule "learn" are
// exactly what base lacks. base is not changed.
func Learning(base *Policy) *Policy {
	if base == nil {
		base = DenyAll()
	}
	q := *base
	q.learn = true
	return &q
}

// IsLearning reports whether p was made by Learning.
func (p *Policy) IsLearning() bool { return p.learn }

// unmapPrefix turns an IPv4-mapped IPv6 prefix of length 96 or more into the
// IPv4 prefix it means; other prefixes are returned unchanged.
func unmapPrefix(pr netip.Prefix) netip.Prefix {
	a := pr.Addr()
	if a.Is4In6() && pr.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), pr.Bits()-96)
	}
	return pr
}

// localOf returns the WithLocal prefix holding a, or an invalid Prefix.
func (p *Policy) localOf(a netip.Addr) netip.Prefix {
	for _, pr := range p.local {
		if pr.Contains(a) {
			return pr
		}
	}
	return netip.Prefix{}
}
