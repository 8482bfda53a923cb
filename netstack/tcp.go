package netstack

import (
	"net"

	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/nsgate/nsgate/internal/diag/hoptrace"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// handleTCP serves one connection request from the worker (the forwarder
// hands each new SYN to a kept goroutine that calls it). It admits the
// flow (admit.go): decides, dials upstream, and only then completes the
// worker's handshake; any failure on the way resets the connection, and
// nothing is dialed for a denied flow.
func (g *Gateway) handleTCP(r *tcp.ForwarderRequest) {
	hoptrace.Mark(hoptrace.Admitting)
	src, dst := endpointAddrs(r.ID())
	a, ok := g.admit(policy.TCP, src, dst)
	var up net.Conn
	if ok {
		up, ok = a.connect("tcp")
		hoptrace.Mark(hoptrace.Dialed)
	}
	if !ok && a.blockable() {
		g.serveBlockPage(r, a)
		return
	}
	if !ok {
		a.refuse()
		r.Complete(true)
		a.release()
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		up.Close()
		a.abort("worker handshake: " + tcpipError(terr).Error())
		a.release()
		return
	}
	r.Complete(false)
	hoptrace.Mark(hoptrace.Accepted)
	buffered := g.sizeBuffers(ep)
	worker := newWorkerConn(&wq, ep, g.pool.Go)
	// A reload that refuses the flow resets the worker's side and closes
	// upstream; the relay then ends (revoke.go).
	g.track(a, func() { ep.Abort(); up.Close() })
	if g.terminates(a) {
		go func() {
			defer a.release()
			a.end(g.serveTerminated(ep, a, worker, up))
		}()
		return
	}
	opts := relay.Options{Idle: g.lim.TCPIdle, Go: g.pool.Go}
	if a.verifyL7() {
		worker.first = &serverStart{}
		opts.Gate = g.gateL7(ep, a, worker.first)
	}
	// The relay runs on a new goroutine: this one's stack grew deep in
	// the stack's handshake code, and an idle flow would keep it (a
	// parked goroutine keeps its stack until a GC shrinks it), as it
	// would a kept goroutine's. A new goroutine that waits starts, and
	// stays, small.
	go func() {
		defer a.release()
		if buffered {
			defer g.bufferedFlows.Add(-1)
		}
		a.end(relay.CopyWith(g.ctx, worker, up, opts))
	}()
}
