// Package policy parses nsgate policy files and decides flows.
//
// It is pure: it imports nothing of nsgate's, does no I/O except in Load
// (which reads a policy file, bounded), and a *Policy is immutable once
// built, so one value may be shared by any number of goroutines and swapped
// atomically by its holder.
package policy

import "net/netip"

// Verdict is the outcome of a decision.
type Verdict uint8

const (
	Deny Verdict = iota
	Allow
)

// String returns "allow" or "deny".
func (v Verdict) String() string {
	if v == Allow {
		return "allow"
	}
	return "deny"
}

// Proto is a transport protocol a rule applies to.
type Proto uint8

const (
	TCP Proto = iota + 1
	UDP
)

// String returns "tcp" or "udp".
func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return "unknown"
}

// Flow is one destination to decide.
//
// Host is the normalized name the flow was opened by (a flow to a fake DNS
// address), or "" for a flow to an IP literal. Addr is the address that
// would be dialed; it is the zero Addr when a name flow has not been
// resolved yet, in which case only the name-based steps are taken.
type Flow struct {
	Proto Proto
	Host  string
	Addr  netip.Addr
	Port  uint16
}

// Decision is a verdict with the rule that produced it and a short reason a
// person can read. Rule is one of "allow[i]", "deny[i]", "hosts",
// "builtin:metadata", "builtin:special-range" or "default". A flow to the
// gateway's own addresses (Policy.WithLocal) is denied with rule
// "builtin:special-range" too; its reason says "the gateway's own
// addresses". So is a flow to one of the host's own addresses
// (Policy.WithHostAddrs); its reason says "the host's own address".
type Decision struct {
	Verdict Verdict
	Rule    string
	Reason  string
}

// String formats d as "allow rule=allow[0] reason=...".
func (d Decision) String() string {
	return d.Verdict.String() + " rule=" + d.Rule + " reason=" + d.Reason
}
