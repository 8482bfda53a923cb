package learn

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/nsgate/nsgate/policy"
)

// WildcardMin is how many distinct names seen directly under one parent
// make a wildcard rule "*.parent" instead of one rule per name. A parent
// that is a public suffix (test, com, co.uk, github.io: the public suffix
// list compiled into golang.org/x/net/publicsuffix, whose default rule
// makes every unlisted top-level label one) never gets a wildcard, nor
// does one under which a name seen lies in a deeper suffix (holdsSuffix).
// A parent that hosts deeper suffixes none of the names seen is in still
// gets one (docs/policy.md says so).
const WildcardMin = 3

// Rule is one allow rule to write, with a comment saying what it stands
// for.
type Rule struct {
	Spec    policy.RuleSpec
	Comment string
}

// Exec is a program the worker was refused, with how often.
type Exec struct {
	Path  string
	Count uint64
}

// Result is what a Collector's events come to.
type Result struct {
	// Rules are the allow rules: host rules (wildcards next to their
	// siblings), then cidr rules (/32, /128).
	Rules []Rule
	// Hosts counts the names the rules cover, Addrs the addresses, and
	// Wildcards the wildcard rules among them.
	Hosts, Addrs, Wildcards int
	// NamesOnly are names DNS answered (Learned) or refused (Denied) that
	// had no flow and no rule covers.
	NamesOnly []string
	// Execs are the refused programs, by path.
	Execs []Exec
	Counts
	// Examples, for comments (Denied: builtin and deny-rule refusals;
	// both modes: allowed flows that failed).
	BuiltinSeen, DenyRuleSeen, FailedSeen []string
	// RedecidedSeen are the default denials the built-in sets refuse when
	// decided again (Denied): no rule is proposed for them.
	RedecidedSeen []string
	// HostsWarnings name proposed host rules whose name current's
	// dns.hosts maps into a special range or the metadata set: the rule
	// would open that address on its ports.
	HostsWarnings []string
}

// Result groups what c has seen into rules. When current is not nil, what
// it already allows is left out: a flow current.Decide allows, a name
// current.NameAllowed allows, a program under current's exec.allow.
func (c *Collector) Result(current *policy.Policy) Result {
	c.mu.Lock()
	res := Result{
		Counts:        c.counts,
		BuiltinSeen:   slices.Clone(c.builtin),
		DenyRuleSeen:  slices.Clone(c.denyRule),
		FailedSeen:    slices.Clone(c.failed),
		RedecidedSeen: slices.Clone(c.redecided),
	}
	hosts := make(map[string]use)
	addrs := make(map[netip.Addr]use)
	for d, u := range c.uses {
		u = filterUse(d, u, current)
		if u == nil {
			continue
		}
		if d.host != "" {
			hosts[d.host] = u
		} else {
			addrs[d.addr] = u
		}
	}
	var namesOnly []string
	for name := range c.names {
		if !c.flowed[name] && (current == nil || current.NameAllowed(name).Verdict != policy.Allow) {
			namesOnly = append(namesOnly, name)
		}
	}
	for p, n := range c.execs {
		if current == nil || !execCovered(current.ExecAllow(), p) {
			res.Execs = append(res.Execs, Exec{p, n})
		}
	}
	c.mu.Unlock()

	wild := wildcards(slices.Collect(maps.Keys(hosts)))
	type group struct {
		pattern string
		names   []string
		u       use
	}
	groups := make(map[string]*group)
	for name, u := range hosts {
		pattern := name
		for _, w := range wild {
			if strings.HasSuffix(name, "."+w) {
				pattern = "*." + w
				break
			}
		}
		g := groups[pattern]
		if g == nil {
			g = &group{pattern: pattern, u: make(use)}
			groups[pattern] = g
		}
		g.names = append(g.names, name)
		for k, n := range u {
			g.u[k] += n
		}
	}
	for _, g := range sortedGroups(groups) {
		slices.Sort(g.names)
		names := ""
		if strings.HasPrefix(g.pattern, "*.") {
			res.Wildcards++
			names = strconv.Itoa(len(g.names)) + " names seen: " + listSome(g.names, 6) + "; "
		}
		res.Hosts += len(g.names)
		res.Rules = append(res.Rules, rulesFor(policy.RuleSpec{Host: g.pattern}, g.u, names)...)
		if current != nil && c.builtins != nil {
			for _, name := range g.names {
				res.HostsWarnings = append(res.HostsWarnings, c.hostsWarnings(current, name)...)
			}
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
		res.Addrs++
		res.Rules = append(res.Rules, rulesFor(policy.RuleSpec{CIDR: netip.PrefixFrom(a, a.BitLen())}, addrs[a], "")...)
	}
	for _, name := range namesOnly {
		covered := false
		for _, w := range wild {
			covered = covered || strings.HasSuffix(name, "."+w)
		}
		if !covered {
			res.NamesOnly = append(res.NamesOnly, name)
		}
	}
	slices.SortFunc(res.NamesOnly, compareNames)
	slices.SortFunc(res.Execs, func(a, b Exec) int { return strings.Compare(a.Path, b.Path) })
	return res
}

// hostsWarnings names the addresses current's dns.hosts gives name that
// the built-in sets guard (a special range, the metadata set).
func (c *Collector) hostsWarnings(current *policy.Policy, name string) []string {
	addrs, ok := current.StaticHosts(name)
	if !ok {
		return nil
	}
	var out []string
	for _, a := range addrs {
		if d := c.builtins.Decide(policy.Flow{Proto: policy.TCP, Addr: a, Port: 1}); isBuiltin(d.Rule) {
			out = append(out, name+" is in dns.hosts as "+a.String()+" ("+d.Rule+"): a rule for it opens that address on its ports")
		}
	}
	return out
}

// filterUse returns u without the ports current already allows (u itself
// when current is nil), or nil when nothing is left.
func filterUse(d dest, u use, current *policy.Policy) use {
	if current == nil {
		return u
	}
	out := make(use)
	for k, n := range u {
		pr := policy.TCP
		if k.bit == useUDP {
			pr = policy.UDP
		}
		if current.Decide(policy.Flow{Proto: pr, Host: d.host, Addr: d.addr, Port: k.port}).Verdict != policy.Allow {
			out[k] = n
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// execCovered reports whether exec.allow entries allow (a file, or a
// directory's tree) cover path.
func execCovered(allow []string, path string) bool {
	for _, a := range allow {
		if a == path || strings.HasSuffix(a, "/") && strings.HasPrefix(path, a) || strings.HasPrefix(path, a+"/") {
			return true
		}
	}
	return false
}

// wildcards returns the parents that get a wildcard rule: WildcardMin or
// more distinct names directly under them, not a public suffix, and not
// under a shorter parent that gets one already. Shortest first.
func wildcards(names []string) []string {
	children := make(map[string]int)
	for _, n := range names {
		if p, ok := wildcardParent(n); ok {
			children[p]++
		}
	}
	var cands []string
	for p, k := range children {
		if k >= WildcardMin && !holdsSuffix(p, names) {
			cands = append(cands, p)
		}
	}
	slices.SortFunc(cands, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(a, "."), strings.Count(b, ".")), strings.Compare(a, b))
	})
	var out []string
	for _, p := range cands {
		if !slices.ContainsFunc(out, func(w string) bool { return strings.HasSuffix(p, "."+w) }) {
			out = append(out, p)
		}
	}
	return out
}

// holdsSuffix reports whether a name seen under parent lies in a public
// suffix deeper than parent's own: s3.amazonaws.com is one (the list's
// private section), so *.amazonaws.com would also allow every customer's
// bucket under it, names of other owners.
func holdsSuffix(parent string, names []string) bool {
	own, _ := publicsuffix.PublicSuffix(parent)
	for _, n := range names {
		if !strings.HasSuffix(n, "."+parent) {
			continue
		}
		if ps, _ := publicsuffix.PublicSuffix(n); ps != own {
			return true
		}
	}
	return false
}

// wildcardParent is name without its first label, when that may carry a
// wildcard (it is not a public suffix).
func wildcardParent(name string) (string, bool) {
	i := strings.IndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return "", false
	}
	parent := name[i+1:]
	if ps, _ := publicsuffix.PublicSuffix(parent); ps == parent {
		return "", false
	}
	return parent, true
}

// rulesFor writes one destination's ports as rules: ports seen over both
// TCP and UDP in one rule with proto any, the rest in one tcp and one udp
// rule. Consecutive ports make a range; no port that was not seen is
// added. Each rule's comment is names (for a wildcard) and its flows.
func rulesFor(base policy.RuleSpec, u use, names string) []Rule {
	ports := make(map[uint16]uint8)
	for k := range u {
		ports[k.port] |= k.bit
	}
	var out []Rule
	for _, c := range []struct {
		proto string
		bits  uint8
	}{{"tcp", useTCP}, {"udp", useUDP}, {"any", useTCP | useUDP}} {
		var ps []uint16
		var flows uint64
		for p, b := range ports {
			if b == c.bits {
				ps = append(ps, p)
				flows += u[portUse{p, useTCP}] + u[portUse{p, useUDP}]
			}
		}
		if len(ps) == 0 {
			continue
		}
		slices.Sort(ps)
		r := base
		r.Proto = c.proto
		r.Ports = nil
		for _, p := range ps {
			if n := len(r.Ports); n > 0 && r.Ports[n-1].Hi+1 == p {
				r.Ports[n-1].Hi = p
				continue
			}
			r.Ports = append(r.Ports, policy.PortRange{Lo: p, Hi: p})
		}
		out = append(out, Rule{Spec: r, Comment: names + plural(flows, "flow")})
	}
	return out
}

// sortedGroups orders host groups by name read from the top label down
// (cdn.test's names together, the wildcard before its siblings' parent).
func sortedGroups[G any](groups map[string]*G) []*G {
	keys := slices.SortedFunc(maps.Keys(groups), compareNames)
	out := make([]*G, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
	}
	return out
}

// compareNames compares names label by label from the right; "*" sorts
// before any label.
func compareNames(a, b string) int {
	la, lb := strings.Split(a, "."), strings.Split(b, ".")
	slices.Reverse(la)
	slices.Reverse(lb)
	return slices.Compare(la, lb)
}

// plural is "1 flow", "2 flows" ("addresses", "entries").
func plural[N int | uint64](n N, word string) string {
	s := strconv.FormatUint(uint64(n), 10) + " "
	switch {
	case n == 1:
		return s + word
	case strings.HasSuffix(word, "s"):
		return s + word + "es"
	case strings.HasSuffix(word, "y"):
		return s + strings.TrimSuffix(word, "y") + "ies"
	}
	return s + word + "s"
}

// listSome joins up to max items, then says how many more.
func listSome(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + " and " + strconv.Itoa(len(items)-max) + " more"
}
