package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// plan is the decision on one flow and what to dial for it.
type plan struct {
	proto policy.Proto
	src   netip.AddrPort // the worker's end
	dst   netip.AddrPort // what the worker connected to (a fake address for name flows)
	host  string         // the name, for a flow to a fake address
	// d is the decision to record: for an allowed flow the decision on
	// the address dialed, for a denied one the refusing decision.
	d policy.Decision
	// reason, when set, replaces d.Reason in the record: the flow was
	// allowed but failed later (resolution, dial, limit).
	reason string
	// upstreamFailed: the policy allowed the flow and resolving or
	// dialling it failed; it is recorded as "fail", not as a denial.
	upstreamFailed bool
	// targets are the addresses the policy allowed, in the order to try.
	targets []netip.AddrPort
	// refused lists resolved answers the policy refused.
	refused []string
	// viaGateway lists the targets that are an upstream nsgate gateway's
	// fake address for the name (decided as the name alone).
	viaGateway []netip.Addr
}

func (p *plan) allowed() bool { return p.d.Verdict == policy.Allow && p.reason == "" }

// fail turns an allowed plan into a refusal with reason.
func (p *plan) fail(format string, args ...any) {
	p.reason = fmt.Sprintf(format, args...)
}

// failUpstream is fail for an allowed flow that could not be resolved or
// dialled: nothing refused it, the destination did not answer.
func (p *plan) failUpstream(format string, args ...any) {
	p.fail(format, args...)
	p.upstreamFailed = true
}

// endpointAddrs returns the worker's and the destination's address and
// port of a transport endpoint ID from the stack's point of view.
func endpointAddrs(id stack.TransportEndpointID) (src, dst netip.AddrPort) {
	return netip.AddrPortFrom(addrOf(id.RemoteAddress), id.RemotePort),
		netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
}

func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// decideOne asks the current policy about f, for a packet that is decided
// as a flow but never becomes one (refuseMapped); a flow asks its own
// snapshot (admission.decide).
func (g *Gateway) decideOne(f policy.Flow) policy.Decision {
	return decideWith(g.guardedPolicy(), f)
}

// decideWith asks p about f; no policy denies.
func decideWith(p *policy.Policy, f policy.Flow) policy.Decision {
	if p == nil {
		return policy.Decision{Verdict: policy.Deny, Rule: "default", Reason: "no policy loaded"}
	}
	return p.Decide(f)
}

// decide asks the flow's policy snapshot about f.
func (a *admission) decide(f policy.Flow) policy.Decision { return decideWith(a.pol, f) }

// guardedPolicy pairs a policy from Config.Policy and a set of the host's
// own addresses with its guarded copy.
type guardedPolicy struct {
	src  *policy.Policy
	host *policy.HostAddrs
	p    *policy.Policy
}

// guardedPolicy returns the current policy with the gateway's own
// addresses guarded (Policy.WithLocal: its prefixes and the fake-IP
// pools), so that no policy, however it was built, can make the gateway
// dial them: a flow to a fake address is a flow to its name, and anything
// else there is the gateway itself. The host's own addresses are guarded
// too (Policy.WithHostAddrs, from Config.HostAddrs): a flow the gateway
// dials to one reaches the host's own services. The copy is made once per
// policy and host address set the sources return, not per flow. nil when
// there is no policy.
func (g *Gateway) guardedPolicy() *policy.Policy {
	src := g.policy()
	if src == nil {
		return nil
	}
	host := g.hostAddrs()
	if c := g.guarded.Load(); c != nil && c.src == src && c.host == host {
		return c.p
	}
	c := &guardedPolicy{src: src, host: host, p: src.WithLocal(g.own...).WithHostAddrs(host)}
	g.guarded.Store(c)
	return c.p
}

// classify takes the pure first step of the flow's decision, with its
// snapshot. For an IP flow it is complete. For a flow to a fake address it
// checks the name alone and sets needResolve when the name may be allowed:
// then resolve must run before anything is dialed.
func (a *admission) classify() {
	p := &a.p
	if a.g.auditRefusesNew(p) {
		return
	}
	proto, dst := p.proto, p.dst
	if names := a.g.names; names != nil {
		if name, ok := names.NameOf(dst.Addr()); ok {
			p.host = name
			p.d = a.decide(policy.Flow{Proto: proto, Host: name, Port: dst.Port()})
			a.needResolve = p.d.Verdict == policy.Allow
			return
		}
	}
	// The plan's host alias stands for the host itself: the flow is
	// decided and dialled as one to the host's loopback address.
	to, _ := a.g.net.HostSide(dst.Addr())
	p.d = a.decide(policy.Flow{Proto: proto, Addr: to, Port: dst.Port()})
	if p.d.Verdict == policy.Allow {
		p.targets = []netip.AddrPort{netip.AddrPortFrom(to, dst.Port())}
	}
}

// resolve completes a name flow's plan: it resolves the name on the host
// side, puts every answer through the flow's snapshot and keeps those
// allowed as targets. With none allowed the plan is a denial listing the
// refused answers. It blocks on Names.ResolveName until ctx is done.
//
// An answer that an upstream nsgate gateway gave for the name (it lies in
// nsgate's fake-IP pools and its resolver answered the gateway handshake:
// dns/gateway.go) is that gateway's name for the name, not an address of
// its own: it is decided as the name alone, as classify did, and the
// outer gateway decides it again, under its policy, when it is dialled.
// Any other answer in the pools is an address, which the special-range
// guard refuses.
func (a *admission) resolve(ctx context.Context) {
	p := &a.p
	ans, err := a.g.names.ResolveName(ctx, p.host)
	if err != nil {
		p.failUpstream("resolve: %v", err)
		return
	}
	addrs := ans.Addrs
	if len(addrs) == 0 {
		p.failUpstream("resolve: no addresses")
		return
	}
	var first policy.Decision
	var allowed *policy.Decision
	for _, addr := range addrs {
		var d policy.Decision
		if ans.ViaGateway(addr) && a.g.net.InFakePool(addr) {
			d = a.decide(policy.Flow{Proto: p.proto, Host: p.host, Port: p.dst.Port()})
			if d.Verdict == policy.Allow {
				d.Reason += "; " + addr.String() + " is the upstream nsgate gateway's address for the name"
				p.viaGateway = append(p.viaGateway, addr)
			}
		} else {
			d = a.decide(policy.Flow{Proto: p.proto, Host: p.host, Addr: addr, Port: p.dst.Port()})
			if d.Verdict != policy.Allow && a.g.net.InFakePool(addr) {
				d.Reason += " (the resolver did not answer as an nsgate gateway)"
			}
		}
		if d.Verdict == policy.Allow {
			p.targets = append(p.targets, netip.AddrPortFrom(addr, p.dst.Port()))
			if allowed == nil {
				allowed = &d
			}
			continue
		}
		if len(p.refused) == 0 {
			first = d
		}
		p.refused = append(p.refused, addr.String())
	}
	if allowed != nil {
		p.d = *allowed
		return
	}
	p.d = first
	p.d.Reason = fmt.Sprintf("all %d resolved addresses refused: %s", len(addrs), first.Reason)
}

// dialAny dials the plan's targets in order until one connects, within
// ctx. Every target was checked by the policy; nothing else is dialed.
func (g *Gateway) dialAny(ctx context.Context, network string, p *plan) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for _, t := range p.targets {
		c, err := g.dial(ctx, network, t.String())
		if err == nil {
			return c, t, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, netip.AddrPort{}, errors.New("no address to dial")
	}
	return nil, netip.AddrPort{}, errors.Join(errs...)
}

// record writes the plan's flow record and returns its seq. upstream is
// the address dialed (valid only for an allowed flow).
func (g *Gateway) record(p *plan, upstream netip.AddrPort) uint64 {
	ev := audit.Flow{
		Action:  "deny",
		Proto:   p.proto.String(),
		Src:     p.src.String(),
		Dst:     p.dst.String(),
		Host:    p.host,
		Rule:    p.d.Rule,
		Reason:  p.d.Reason,
		Refused: p.refused,
	}
	switch {
	case p.allowed():
		ev.Action = "allow"
		ev.Upstream = upstream.String()
	case p.upstreamFailed && p.d.Verdict == policy.Allow:
		ev.Action = "fail"
	}
	if p.reason != "" {
		ev.Reason = p.reason
	}
	return g.audit.Log(ev)
}

// countDecision updates the allow/deny counters of p's protocol.
func (g *Gateway) countDecision(p *plan) {
	switch {
	case p.proto == policy.TCP && p.allowed():
		g.stats.tcpAllowed.Add(1)
	case p.proto == policy.TCP:
		g.stats.tcpDenied.Add(1)
	case p.allowed():
		g.stats.udpAllowed.Add(1)
	default:
		g.stats.udpDenied.Add(1)
	}
}

// endRecord writes the flow_end record of a relayed flow.
func (g *Gateway) endRecord(seq uint64, res relay.Result, ms int64, why string) {
	g.stats.bytesOut.Add(uint64(res.ToUpstream))
	g.stats.bytesIn.Add(uint64(res.ToWorker))
	g.audit.Log(audit.FlowEnd{
		FlowSeq:    seq,
		BytesOut:   res.ToUpstream,
		BytesIn:    res.ToWorker,
		DurationMS: ms,
		Error:      why,
	})
}

// endError describes why a relay ended, for flow_end records. closing says
// the gateway is shutting down, which aborts the stack's endpoints too.
func endError(res relay.Result, closing bool) string {
	switch {
	case res.Err == nil:
		return ""
	case errors.Is(res.Err, relay.ErrIdle):
		return "idle timeout"
	case closing || errors.Is(res.Err, context.Canceled):
		return "gateway shut down"
	}
	msg := res.Err.Error()
	switch res.Failed {
	case relay.SideWorker:
		return "worker: " + msg
	case relay.SideUpstream:
		return "upstream: " + msg
	}
	return msg
}

// limitReason formats the reason for a flow refused by a limit.
func limitReason(what string, max int) string {
	return "limit: " + strings.TrimSpace(fmt.Sprintf("%d %s", max, what))
}
