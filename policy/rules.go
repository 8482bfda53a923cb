package policy

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// RuleSpec is one allow or deny rule in the form a policy file writes it,
// for programs that read a policy's rules or write new ones (nsgate's
// learner). Exactly one of Host and CIDR is set.
type RuleSpec struct {
	// Host is a normalized name, or "*." and a normalized name for a
	// wildcard; "" for a cidr rule.
	Host string
	// CIDR is a cidr rule's prefix (the zero Prefix for a host rule).
	CIDR netip.Prefix
	// Proto is "tcp", "udp" or "any".
	Proto string
	// Ports are sorted, non-overlapping ranges; nil means every port.
	Ports []PortRange
	// L7None is a host rule's "l7: none": its UDP flows skip the QUIC
	// Initial check.
	L7None bool
	// Terminate is a host rule's "tls: terminate". Requests are its
	// request rules (nil: every request), in YAML flow form.
	Terminate bool
	Requests  []string
}

// PortRange is an inclusive range of ports (Lo == Hi for one port).
type PortRange struct{ Lo, Hi uint16 }

// YAML returns r as a one-line YAML flow mapping, the form `nsgate check`
// prints: {host: "app.test", proto: tcp, ports: [80, "8000-8100"]}.
// Parse reads it back as the same rule.
func (r RuleSpec) YAML() string {
	var b strings.Builder
	if r.Host != "" {
		b.WriteString("{host: " + strconv.Quote(r.Host))
	} else {
		b.WriteString("{cidr: " + strconv.Quote(r.CIDR.String()))
	}
	b.WriteString(", proto: " + r.Proto)
	if r.Ports != nil {
		b.WriteString(", ports: [")
		for i, pr := range r.Ports {
			if i > 0 {
				b.WriteString(", ")
			}
			if pr.Lo == pr.Hi {
				b.WriteString(strconv.Itoa(int(pr.Lo)))
			} else {
				b.WriteString(`"` + strconv.Itoa(int(pr.Lo)) + "-" + strconv.Itoa(int(pr.Hi)) + `"`)
			}
		}
		b.WriteString("]")
	}
	if r.L7None {
		b.WriteString(", l7: none")
	}
	if r.Terminate {
		b.WriteString(", tls: terminate")
	}
	if r.Requests != nil {
		b.WriteString(", requests: [" + strings.Join(r.Requests, ", ") + "]")
	}
	b.WriteString("}")
	return b.String()
}

func (r *rule) spec() RuleSpec {
	s := RuleSpec{Proto: r.protos.String()}
	if r.isHost() {
		s.Host = r.pattern()
	} else {
		s.CIDR = r.prefix
	}
	if r.ports != nil {
		s.Ports = make([]PortRange, len(r.ports))
		for i, pr := range r.ports {
			s.Ports[i] = PortRange{pr.lo, pr.hi}
		}
	}
	s.L7None = r.l7None
	s.Terminate = r.terminate
	if r.requests != nil {
		s.Requests = make([]string, len(r.requests))
		for i := range r.requests {
			s.Requests[i] = r.requests[i].yaml()
		}
	}
	return s
}

func specs(rules []rule) []RuleSpec {
	out := make([]RuleSpec, len(rules))
	for i := range rules {
		out[i] = rules[i].spec()
	}
	return out
}

// AllowRules returns the allow rules in file order (allow[i] is the i-th).
func (p *Policy) AllowRules() []RuleSpec { return specs(p.allow.rules) }

// DenyRules returns the deny rules in file order (deny[i] is the i-th).
func (p *Policy) DenyRules() []RuleSpec { return specs(p.deny.rules) }

// HostNames returns the names that have a dns.hosts entry, sorted.
func (p *Policy) HostNames() []string {
	return slices.Sorted(maps.Keys(p.hosts))
}

// FilesystemPaths returns filesystem.write and filesystem.hide as written
// (cleaned; "~" forms not expanded), or nil.
func (p *Policy) FilesystemPaths() (write, hide []string) {
	return slices.Clone(p.fsWrite), slices.Clone(p.fsHide)
}
