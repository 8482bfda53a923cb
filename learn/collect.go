// Package learn turns what a worker did into policy rules: `nsgate run
// --learn OUT` (the flows and names a learning policy allowed, seen in
// process through an audit tee, written as a minimal policy file) and
// `nsgate policy suggest` (the denials of an audit log, read back with
// audit.ReadRecords, printed as the rules that would have allowed them).
//
// Both go through a Collector: it takes audit events, keeps what the rules
// need (destinations with their ports and protocols, names, refused
// programs) and counts what it must not turn into rules (refusals by the
// built-in sets and by deny rules, SNI/Host refusals, flows that failed
// upstream). Rules then groups them (see Rules for the wildcard rule).
// The decision itself stays in package policy: a Collector never decides,
// it reads the rule each decision names.
package learn

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// Mode says which events a Collector turns into rules.
type Mode int

const (
	// Learned takes the flows and names a learning policy allowed with
	// rule learn (policy.Learning): what the starting policy lacked.
	Learned Mode = iota
	// Denied takes the flows and names denied by default (no allow rule
	// covered them): what `nsgate policy suggest` proposes.
	Denied
)

// maxDests bounds the destinations and names a Collector keeps; past it,
// further ones are only counted (Counts.Dropped). A policy holds at most
// policy.MaxRules rules anyway.
const maxDests = 2 * policy.MaxRules

// maxNotes bounds the example lines kept for each kind of comment.
const maxNotes = 20

// proto bits of a port's use.
const (
	useTCP uint8 = 1 << iota
	useUDP
)

// dest is a destination: a normalized name, or an address (host "").
type dest struct {
	host string
	addr netip.Addr
}

// portUse is one port over one protocol (useTCP or useUDP).
type portUse struct {
	port uint16
	bit  uint8
}

// use is what was seen of one destination: flows by port and protocol.
type use map[portUse]uint64

func (u use) flows() uint64 {
	var n uint64
	for _, k := range u {
		n += k
	}
	return n
}

// Counts are what a Collector saw but did not turn into rules, and the
// totals it did.
type Counts struct {
	Flows        uint64 // flows turned into rules
	Kept         uint64 // flows and names the starting policy's own rules allowed (Learned)
	Builtin      uint64 // refused by the cloud-metadata set, a special range or the gateway's own addresses
	DenyRule     uint64 // refused by a deny rule
	L7           uint64 // refused by the TLS SNI or HTTP Host check
	Failed       uint64 // allowed by the policy, then failed (upstream DNS, dial, a flow limit)
	Invalid      uint64 // names that do not normalize, execs of relative paths
	Dropped      uint64 // destinations past the Collector's bound
	ExecRefusals uint64 // exec refusals (of files that exist)
	// Redecided: recorded as denied by default, but the built-in sets
	// refuse them when decided again (Denied; a forged or edited log).
	Redecided uint64
}

// Collector gathers audit events for one Mode. Its methods are safe for
// concurrent use; Observe does not block beyond a short mutex.
type Collector struct {
	mode Mode

	mu      sync.Mutex
	uses    map[dest]use
	names   map[string]uint64 // names answered (Learned) or refused (Denied) by DNS
	flowed  map[string]bool   // names that had a flow, whatever its outcome
	execs   map[string]uint64 // refused exec paths
	counts  Counts
	builtin []string // Denied: examples of built-in refusals, for a comment
	// Denied: builtins decides each default denial again (a policy with
	// no rules: only the built-in sets refuse); redecided names those it
	// refused, which a log of nsgate's own never records as rule default.
	builtins  *policy.Policy
	redecided []string
	denyRule  []string // Denied: examples of deny-rule refusals
	failed    []string // examples of allowed flows that failed
}

// NewCollector returns an empty Collector for mode.
func NewCollector(mode Mode) *Collector {
	c := &Collector{
		mode:   mode,
		uses:   make(map[dest]use),
		names:  make(map[string]uint64),
		flowed: make(map[string]bool),
		execs:  make(map[string]uint64),
	}
	if mode == Denied {
		p, err := policy.Parse("built-in sets", []byte("version: 1\n"))
		if err != nil {
			panic("learn: the empty policy does not parse: " + err.Error())
		}
		c.builtins = p
	}
	return c
}

// Observe takes one event as it is logged (the shape of
// session.Config.Observe).
func (c *Collector) Observe(ev audit.Event) { c.Add(ev, 1) }

// AddRecord takes one record read back from a log: an aggregate stands
// for count events (the first of its key was written on its own).
func (c *Collector) AddRecord(r audit.Record) { c.Add(r.Event, max(1, r.Count())) }

// Add takes one event standing for n events. Events other than flow, dns,
// exec and l7 are ignored.
func (c *Collector) Add(ev audit.Event, n uint64) {
	switch e := ev.(type) {
	case *audit.Flow:
		c.flow(*e, n)
	case audit.Flow:
		c.flow(e, n)
	case *audit.DNS:
		c.dns(*e, n)
	case audit.DNS:
		c.dns(e, n)
	case *audit.Exec:
		c.exec(*e, n)
	case audit.Exec:
		c.exec(e, n)
	case *audit.L7:
		c.l7(*e, n)
	case audit.L7:
		c.l7(e, n)
	}
}

// wanted reports whether a decision with this rule and action is one the
// mode turns into rules.
func (c *Collector) wanted(rule, action string) bool {
	if c.mode == Learned {
		return rule == policy.RuleLearn && action == "allow"
	}
	return rule == policy.RuleDefault && action == "deny"
}

func isBuiltin(rule string) bool { return strings.HasPrefix(rule, "builtin:") }
func isDenyRule(rule string) bool {
	return strings.HasPrefix(rule, "deny[")
}

func note(list *[]string, s string) {
	if len(*list) < maxNotes && !containsString(*list, s) {
		*list = append(*list, s)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (c *Collector) flow(e audit.Flow, n uint64) {
	dst, derr := netip.ParseAddrPort(e.Dst)
	var bit uint8
	switch e.Proto {
	case "tcp":
		bit = useTCP
	case "udp":
		bit = useUDP
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	host := ""
	if e.Host != "" {
		h, err := normalName(e.Host)
		if err != nil {
			c.counts.Invalid += n
			return
		}
		host = h
		c.flowed[host] = true
	}
	switch {
	case c.wanted(e.Rule, e.Action):
	case isBuiltin(e.Rule):
		c.counts.Builtin += n
		if c.mode == Denied {
			note(&c.builtin, describe(e.Proto, host, e.Dst)+" ("+e.Rule+")")
		}
		return
	case isDenyRule(e.Rule):
		c.counts.DenyRule += n
		if c.mode == Denied {
			note(&c.denyRule, describe(e.Proto, host, e.Dst)+" ("+e.Rule+")")
		}
		return
	case e.Action == "deny" && (e.Rule == policy.RuleLearn || strings.HasPrefix(e.Rule, "allow[") || e.Rule == policy.RuleHosts):
		// The policy allowed it; resolving, dialling or a limit failed.
		c.counts.Failed += n
		note(&c.failed, describe(e.Proto, host, e.Dst)+": "+e.Reason)
		return
	default:
		if e.Action == "allow" {
			c.counts.Kept += n
		}
		return
	}
	if derr != nil || bit == 0 || dst.Port() == 0 {
		c.counts.Invalid += n
		return
	}
	d := dest{host: host}
	if host == "" {
		d.addr = dst.Addr().WithZone("").Unmap()
	}
	if c.builtins != nil {
		// A host flow's address is a fake one (or the name's): only the
		// name is decided again; an address flow's address is.
		f := policy.Flow{Proto: policy.TCP, Host: host, Addr: d.addr, Port: dst.Port()}
		if bit == useUDP {
			f.Proto = policy.UDP
		}
		if dd := c.builtins.Decide(f); isBuiltin(dd.Rule) {
			c.counts.Redecided += n
			note(&c.redecided, describe(e.Proto, host, e.Dst)+" ("+dd.Rule+": "+dd.Reason+")")
			return
		}
	}
	u := c.uses[d]
	if u == nil {
		if len(c.uses) >= maxDests {
			c.counts.Dropped += n
			return
		}
		u = make(use)
		c.uses[d] = u
	}
	u[portUse{dst.Port(), bit}] += n
	c.counts.Flows += n
}

// normalName is policy.NormalizeName, refusing a name whose normal form
// does not normalize to itself: a rule written with it would not parse.
func normalName(s string) (string, error) {
	n, err := policy.NormalizeName(s)
	if err != nil {
		return "", err
	}
	if again, err := policy.NormalizeName(n); err != nil || again != n {
		return "", fmt.Errorf("%q does not normalize to itself", s)
	}
	return n, nil
}

// describe names a flow's destination for a comment: "tcp app.test:443"
// or "tcp 203.0.113.9:81".
func describe(proto, host, dst string) string {
	if host != "" {
		if ap, err := netip.ParseAddrPort(dst); err == nil {
			return proto + " " + host + ":" + strconv.Itoa(int(ap.Port()))
		}
		return proto + " " + host
	}
	return proto + " " + dst
}

func (c *Collector) dns(e audit.DNS, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.wanted(e.Rule, e.Action):
		name, err := normalName(e.QName)
		if err != nil {
			c.counts.Invalid += n
			return
		}
		if c.builtins != nil {
			if dd := c.builtins.NameAllowed(name); isBuiltin(dd.Rule) {
				c.counts.Redecided += n
				note(&c.redecided, "name "+name+" ("+dd.Rule+": "+dd.Reason+")")
				return
			}
		}
		if _, ok := c.names[name]; !ok && len(c.names) >= maxDests {
			c.counts.Dropped += n
			return
		}
		c.names[name] += n
	case e.Action != "deny":
	case isBuiltin(e.Rule):
		c.counts.Builtin += n
		if c.mode == Denied {
			what := "name " + e.QName
			if e.QName == "" {
				what = "a DNS message without a readable question"
			}
			note(&c.builtin, what+" ("+e.Rule+")")
		}
	case isDenyRule(e.Rule):
		c.counts.DenyRule += n
		if c.mode == Denied {
			note(&c.denyRule, "name "+e.QName+" ("+e.Rule+")")
		}
	}
}

func (c *Collector) exec(e audit.Exec, n uint64) {
	if e.Action != "deny" || e.Missing {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := listable(e.Reason)
	if !ok {
		c.counts.Invalid += n
		return
	}
	if _, ok := c.execs[p]; !ok && len(c.execs) >= maxDests {
		c.counts.Dropped += n
		return
	}
	c.execs[p] += n
	c.counts.ExecRefusals += n
}

// listable returns the file an exec refusal's reason names when the
// refusal is one an exec.allow entry for that file lifts, and for nothing
// else (audit.ExecNotListed): the canonical path of a regular file. The
// path the worker asked for is not used: it may name a directory ("/",
// which exec.allow reads as its whole tree), a symbolic link the worker
// can point elsewhere before the next run, or a loader the guard refuses
// whatever the list says unless it is listed itself.
func listable(reason string) (string, bool) {
	p, ok := strings.CutSuffix(reason, audit.ExecNotListed)
	if !ok || p == "/" || !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
		return "", false
	}
	return p, true
}

func (c *Collector) l7(e audit.L7, n uint64) {
	if e.Action != "deny" {
		return
	}
	c.mu.Lock()
	c.counts.L7 += n
	c.mu.Unlock()
}
