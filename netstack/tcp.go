package netstack

import (
	"context"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// handleTCP serves one connection request from the worker (the forwarder
// calls it on its own goroutine for each new SYN). It decides, dials
// upstream, and only then completes the worker's handshake; any failure
// on the way resets the connection, and nothing is dialed for a denied
// flow.
func (g *Gateway) handleTCP(r *tcp.ForwarderRequest) {
	if !g.enter() {
		r.Complete(true)
		return
	}
	run, ok := g.openTCP(r)
	if !ok {
		g.wg.Done()
		return
	}
	// The relay runs on a new goroutine: this one's stack grew deep in
	// the stack's handshake code, and an idle flow would keep it (a
	// parked goroutine keeps its stack until a GC shrinks it), as it
	// would a kept goroutine's. A new goroutine that waits starts, and
	// stays, small.
	go func() {
		defer g.wg.Done()
		defer g.tcpFlows.Add(-1)
		run()
	}()
}

// openTCP takes handleTCP's steps up to the completed handshake. With ok
// it holds one of the flow slots (g.tcpFlows) and returns the relay to
// run, which records the flow's end; the caller releases the slot after
// it. Without ok the request was refused and recorded.
func (g *Gateway) openTCP(r *tcp.ForwarderRequest) (run func(), ok bool) {
	src, dst := endpointAddrs(r.ID())
	p, needResolve := g.classify(policy.TCP, src, dst)
	if p.d.Verdict != policy.Allow {
		g.refuseTCP(r, &p)
		return nil, false
	}
	if !tryAcquire(&g.tcpFlows, g.lim.MaxFlows) {
		p.fail("%s", limitReason("concurrent tcp flows", g.lim.MaxFlows))
		g.stats.limitRefused.Add(1)
		g.refuseTCP(r, &p)
		return nil, false
	}
	defer func() {
		if !ok {
			g.tcpFlows.Add(-1)
		}
	}()
	if !tryAcquire(&g.pendingDials, g.lim.MaxPendingDials) {
		p.fail("%s", limitReason("pending dials", g.lim.MaxPendingDials))
		g.stats.limitRefused.Add(1)
		g.refuseTCP(r, &p)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.lim.DialTimeout)
	if needResolve {
		g.resolve(ctx, &p)
	}
	if !p.allowed() {
		cancel()
		g.pendingDials.Add(-1)
		if p.reason != "" {
			g.stats.dialFailed.Add(1)
		}
		g.refuseTCP(r, &p)
		return nil, false
	}
	up, target, err := g.dialAny(ctx, "tcp", &p)
	cancel()
	g.pendingDials.Add(-1)
	if err != nil {
		p.fail("dial: %v", err)
		g.stats.dialFailed.Add(1)
		g.refuseTCP(r, &p)
		return nil, false
	}

	if g.auditRefuses(&p) {
		up.Close()
		g.refuseTCP(r, &p)
		return nil, false
	}
	g.countDecision(&p)
	seq := g.record(&p, target)
	start := time.Now()
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		up.Close()
		g.audit.Log(audit.FlowEnd{FlowSeq: seq, Error: "worker handshake: " + tcpipError(terr).Error()})
		return nil, false
	}
	r.Complete(false)
	worker := newWorkerConn(&wq, ep, g.pool.Go)
	var gate relay.Gate
	if pol := g.policy(); p.host != "" && pol != nil && (pol.VerifySNI() || pol.VerifyHost()) {
		gate = g.gateL7(ep, &p, pol, seq)
	}
	return func() {
		res := relay.CopyWith(g.ctx, worker, up, relay.Options{Idle: g.lim.TCPIdle, Gate: gate, Go: g.pool.Go})
		g.endRecord(seq, res, time.Since(start).Milliseconds())
	}, true
}

// refuseTCP resets the worker's connection attempt and records why.
func (g *Gateway) refuseTCP(r *tcp.ForwarderRequest, p *plan) {
	r.Complete(true)
	g.countDecision(p)
	g.record(p, p.dst)
}
