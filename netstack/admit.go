package netstack

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// admission carries one new TCP or UDP flow from its first packet to the
// end of its relay. TCP and UDP take the same steps; only how the worker
// is refused (a RST, an ICMP error) and how its side is set up differ:
//
//	g.admit     never blocks: one policy snapshot, the decision, a flow
//	            slot, a dial slot, the gateway's wait group
//	a.connect   may block: resolve a name flow, dial, give the dial slot
//	            back, check the audit log, write the flow record
//	a.refuse    the record of a flow refused at either step
//	a.end       the flow_end record of an admitted flow
//	a.release   gives back whatever is still held, once, however the
//	            flow ended
//
// Config.Policy is read once per flow, in admit. The decision, the checks
// of a name's resolved addresses, the L7 check and the records all use
// that snapshot, so a reload while the flow is being set up cannot mix two
// policies in one flow.
//
// An admission is used by one goroutine at a time: the one that admitted
// it, then the one it is handed to (the relay's, or a UDP flow's own).
type admission struct {
	g *Gateway
	// pol is the flow's policy snapshot with the gateway's own addresses
	// guarded (guardedPolicy); nil when no policy was loaded.
	pol *policy.Policy
	p   plan
	// needResolve says the flow is to an allowed name: connect resolves
	// it before dialing.
	needResolve bool
	// seq is the flow record's seq and start the time it was written,
	// once connect admitted the flow.
	seq   uint64
	start time.Time

	// What the admission holds; release gives back what is still held.
	entered bool          // registered with g.wg (the gateway was open)
	flows   *atomic.Int64 // the flow slot: &g.tcpFlows or &g.udpFlows; nil: none
	dialing bool          // a slot of g.pendingDials
	pending bool          // udpID is in g.udpPending
	udpID   stack.TransportEndpointID
	// checkQUIC says the UDP flow's QUIC Initial is checked (verifyQUIC,
	// decided once, on the name's decision, before it is resolved).
	checkQUIC bool
	// queued are the datagrams that arrived while a QUIC-checked UDP
	// flow was being set up (see Gateway.queueUDP), taken by unpend.
	queued [][]byte

	// target is the address dialled, once connect admitted the flow.
	target netip.AddrPort
	// Revocation (revoke.go): tracked says the flow is in the gateway's
	// set of open flows, cut ends it, revoked is why it was cut.
	tracked bool
	revokes uint64 // Gateway.revokes when the snapshot was taken
	cut     func()
	revoked atomic.Pointer[string]
}

// admit takes a new flow's steps that never block. It registers the flow
// with the gateway's wait group, takes the flow's policy snapshot,
// classifies the flow and takes a flow slot and a dial slot. ok says the
// flow may go on to connect; otherwise a.p says why not (a.refuse records
// it), or the gateway is closing (a.refuse records nothing). Either way
// the caller calls a.release once it is done with the flow.
func (g *Gateway) admit(proto policy.Proto, src, dst netip.AddrPort) (a *admission, ok bool) {
	a = &admission{g: g, p: plan{proto: proto, src: src, dst: dst}}
	if !g.enter() {
		return a, false
	}
	a.entered = true
	// Revoke's count before the snapshot: track compares it to see
	// whether a Revoke may have missed the flow.
	a.revokes = g.revokes.Load()
	a.pol = g.guardedPolicy()
	a.classify()
	if !a.p.allowed() {
		return a, false
	}
	flows, max, what := &g.tcpFlows, g.lim.MaxFlows, "concurrent tcp flows"
	if proto == policy.UDP {
		flows, max, what = &g.udpFlows, g.lim.MaxUDPFlows, "concurrent udp flows"
	}
	if !tryAcquire(flows, max) {
		a.limited(what, max)
		return a, false
	}
	a.flows = flows
	if !tryAcquire(&g.pendingDials, g.lim.MaxPendingDials) {
		a.limited("pending dials", g.lim.MaxPendingDials)
		return a, false
	}
	a.dialing = true
	return a, true
}

// limited refuses an allowed flow because a limit was reached.
func (a *admission) limited(what string, max int) {
	a.p.fail("%s", limitReason(what, max))
	a.g.stats.limitRefused.Add(1)
}

// holdPending makes a UDP flow's admission responsible for id's entry in
// g.udpPending (see Gateway.pend): release removes it, if unpend has not.
func (a *admission) holdPending(id stack.TransportEndpointID) {
	a.udpID, a.pending = id, true
}

// unpend removes the flow's g.udpPending entry, once its endpoint exists,
// and keeps the datagrams queued meanwhile in a.queued.
func (a *admission) unpend() {
	if a.pending {
		a.pending = false
		a.queued = a.g.unpend(a.udpID)
	}
}

// connect takes the steps of an admitted flow that may block, within
// Limits.DialTimeout: it resolves a name flow (every answer put through
// the flow's snapshot), dials the allowed addresses, gives the dial slot
// back, checks the audit log once more and writes the flow's record. It
// returns the upstream connection; false means the flow is refused and
// a.p says why (a.refuse records it).
func (a *admission) connect(network string) (up net.Conn, ok bool) {
	g := a.g
	ctx, cancel := context.WithTimeout(g.ctx, g.lim.DialTimeout)
	if a.needResolve {
		a.resolve(ctx)
	}
	var target netip.AddrPort
	if a.p.allowed() {
		var err error
		if up, target, err = g.dialAny(ctx, network, &a.p); err != nil {
			a.p.failUpstream("dial: %v", err)
		}
	}
	cancel()
	a.releaseDial()
	if !a.p.allowed() {
		if a.p.reason != "" {
			g.stats.dialFailed.Add(1) // resolution or dial failed
		}
		return nil, false
	}
	if g.auditRefuses(&a.p) {
		up.Close()
		return nil, false
	}
	g.countDecision(&a.p)
	a.target = target
	a.seq = g.record(&a.p, target)
	a.start = time.Now()
	return up, true
}

// refuse counts and records a flow that admit or connect refused. It
// reports false, recording nothing, when the gateway was closing: then the
// worker needs no ICMP error either (a TCP request is still reset).
func (a *admission) refuse() bool {
	if !a.entered {
		return false
	}
	a.g.countDecision(&a.p)
	a.g.record(&a.p, a.p.dst)
	return true
}

// verifyL7 says the flow's first bytes are checked: a flow
// opened by name, under a snapshot that verifies SNI or Host.
func (a *admission) verifyL7() bool {
	return a.p.host != "" && a.pol != nil && (a.pol.VerifySNI() || a.pol.VerifyHost())
}

// end writes the flow_end record of an admitted flow whose relay ended
// with res.
func (a *admission) end(res relay.Result) {
	why := endError(res, a.g.closing.Load())
	if r := a.revoked.Load(); r != nil {
		why = *r
	}
	a.g.endRecord(a.seq, res, time.Since(a.start).Milliseconds(), why)
}

// abort writes the flow_end record of an admitted flow whose worker side
// could not be set up.
func (a *admission) abort(why string) {
	a.g.audit.Log(audit.FlowEnd{FlowSeq: a.seq, Error: why})
}

// releaseDial gives the dial slot back, if held.
func (a *admission) releaseDial() {
	if a.dialing {
		a.dialing = false
		a.g.pendingDials.Add(-1)
	}
}

// release gives back everything the admission still holds: the dial slot,
// the flow slot, the UDP pending entry and, last, the gateway's wait
// group. It is the only place that does; calling it again does nothing.
func (a *admission) release() {
	a.g.untrack(a)
	a.releaseDial()
	if a.flows != nil {
		a.flows.Add(-1)
		a.flows = nil
	}
	a.unpend()
	if a.entered {
		a.entered = false
		a.g.wg.Done()
	}
}
