package netstack

import (
	"context"
	"net"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/intercept"
	"github.com/nsgate/nsgate/relay"
)

// terminates reports whether the flow's TLS ends here: a flow opened by
// name that a tls: terminate rule of its snapshot allowed, with an engine.
func (g *Gateway) terminates(a *admission) bool {
	return g.icpt != nil && a.pol != nil && a.p.host != "" && a.pol.Terminates(a.p.d.Rule)
}

// serveTerminated serves a terminated flow: the first bytes are checked as
// on any flow by name (gateL7: SNI equal to the name), must be a TLS
// handshake (plain HTTP to a terminated host is refused: its requests
// would bypass the rules' guarantees over TLS, and a credential must never
// travel in clear), and then the engine ends TLS and decides each request.
// up is the connection dialled at admission; the engine uses it for its
// first upstream request and dials more through the flow's plan.
func (g *Gateway) serveTerminated(ep tcpip.Endpoint, a *admission, worker net.Conn, up net.Conn) relay.Result {
	var held []byte
	if a.verifyL7() {
		h, _, err := g.gateL7(ep, a, &serverStart{})(worker)
		if err != nil {
			up.Close()
			worker.Close()
			return relay.Result{Err: err, Failed: relay.SideWorker}
		}
		held = h
	}
	if len(held) == 0 {
		// Either the worker went away before sending anything, or
		// the gate is off: read the first byte here.
		var b [1]byte
		n, err := worker.Read(b[:])
		if n == 0 {
			up.Close()
			worker.Close()
			return relay.Result{Err: err, Failed: relay.SideWorker}
		}
		held = b[:n]
	}
	if held[0] != 0x16 { // a TLS handshake record
		g.audit.Log(audit.L7{Action: "deny", FlowSeq: a.seq, Host: a.p.host,
			Reason: "tls: terminate rule " + a.p.d.Rule + ": only TLS is served to this host; plain text is refused"})
		g.stats.l7Refused.Add(1)
		ep.Abort()
		up.Close()
		return relay.Result{Err: errL7Denied, Failed: relay.SideWorker}
	}
	st, err := g.icpt.Serve(g.ctx, worker, held, intercept.Flow{
		Policy: a.pol, Rule: a.p.d.Rule, Host: a.p.host, Port: a.p.dst.Port(), Seq: a.seq, Audit: g.audit,
		First: up,
		Dial: func(ctx context.Context) (net.Conn, error) {
			c, _, err := g.dialAny(ctx, "tcp", &a.p)
			return c, err
		},
		Idle: g.lim.TCPIdle,
	})
	return relay.Result{ToUpstream: st.FromWorker, ToWorker: st.ToWorker, Err: err, Failed: relay.SideWorker}
}

// leakedPlaceholder checks a passthrough flow's first bytes (and each later
// chunk an l7 stream sees) for a credential placeholder: one there is
// refused, since a placeholder goes only to a terminated host, in its
// header. It writes the credential record and reports whether it refused.
func (g *Gateway) leakedPlaceholder(seq uint64, host string, b []byte) bool {
	if g.icpt == nil || g.icpt.NoSubstitute {
		return false
	}
	name, found := g.icpt.Vault.Find(b)
	if !found {
		return false
	}
	where := "a passthrough flow's first bytes"
	if host == "" {
		where = "a flow to an address"
	}
	g.audit.Log(audit.Credential{Action: "deny", FlowSeq: seq, Credential: name, Host: host, Where: where,
		Reason: "credential " + name + ": placeholder in " + where + " (only a terminated host's named header may carry it)"})
	g.stats.l7Refused.Add(1)
	return true
}
