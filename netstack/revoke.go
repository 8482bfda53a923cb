package netstack

import (
	"net/netip"
	"slices"

	"github.com/nsgate/nsgate/policy"
)

// Open flows and their revocation.
//
// A flow is decided once, when it opens, under the policy then in force
// (its snapshot, admission.pol). When the policy changes (a reload), the
// caller calls Revoke: every open flow is decided again, as it was
// admitted (the same name, the address actually dialled, the same port),
// under the new policy, and a flow the new policy refuses is cut: the
// worker's TCP connection is reset, the upstream connection closed, and
// the flow_end record says "revoked: " and the refusing decision. A flow
// still allowed goes on. Without this a narrowed policy, put in force to
// stop a worker reaching a destination, left every connection to it open
// until it ended by itself.

// track puts the admitted flow a, whose worker side now exists, in the
// gateway's set of open flows; cut must end it at once (reset the worker,
// close upstream) and may be called from any goroutine. release takes the
// flow out again. A flow that a Revoke may have missed (one ran between
// the flow's decision and now, before the flow was in the set) is decided
// again here, under the policy now in force; otherwise the flow keeps to
// its one snapshot.
func (g *Gateway) track(a *admission, cut func()) {
	a.cut = cut
	g.openMu.Lock()
	if g.open == nil {
		g.open = map[*admission]struct{}{}
	}
	g.open[a] = struct{}{}
	a.tracked = true
	missed := g.revokes.Load() != a.revokes
	g.openMu.Unlock()
	if missed {
		a.recheck(g.guardedPolicy())
	}
}

// untrack takes a out of the set of open flows, if it is there.
func (g *Gateway) untrack(a *admission) {
	if !a.tracked {
		return
	}
	g.openMu.Lock()
	delete(g.open, a)
	g.openMu.Unlock()
	a.tracked = false
}

// Revoke decides every open flow again under the policy now in force and
// cuts those it refuses (see above). It returns the number of flows it
// cut. Call it after the policy source returns the new policy.
func (g *Gateway) Revoke() int {
	pol := g.guardedPolicy()
	g.openMu.Lock()
	g.revokes.Add(1)
	flows := make([]*admission, 0, len(g.open))
	for a := range g.open {
		flows = append(flows, a)
	}
	g.openMu.Unlock()
	n := 0
	for _, a := range flows {
		if a.recheck(pol) {
			n++
		}
	}
	return n
}

// recheck decides the open flow a under pol and, when pol refuses it,
// cuts it. It reports whether it cut the flow (false when the flow was
// cut already).
func (a *admission) recheck(pol *policy.Policy) bool {
	if pol == a.pol {
		return false
	}
	d := decideWith(pol, a.admitted())
	if d.Verdict == policy.Allow {
		return false
	}
	why := "revoked: the policy now in force refuses the flow (rule=" + d.Rule + ": " + d.Reason + ")"
	if !a.revoked.CompareAndSwap(nil, &why) {
		return false
	}
	a.cut()
	return true
}

// admitted is the flow as its allowing decision saw it: for a flow to an
// address, the address dialled (the host side of the host alias); for a
// flow to a name, the name and the address dialled, or the name alone
// when that address stands for the name in an upstream nsgate gateway.
func (a *admission) admitted() policy.Flow {
	p := &a.p
	f := policy.Flow{Proto: p.proto, Port: p.dst.Port(), Addr: a.target.Addr()}
	if p.host != "" {
		f.Host = p.host
		if slices.Contains(p.viaGateway, a.target.Addr()) {
			f.Addr = netip.Addr{}
		}
	}
	return f
}
