package netstack

import (
	"context"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// handleUDP is the stack's handler for UDP datagrams that match no
// endpoint: the first datagram of a new flow (per 5-tuple). It runs on the
// link's delivery goroutine, so it never blocks: IP flows are decided
// here; dialing, and resolving for name flows, happen on a goroutine of
// their own, and datagrams for the same flow that arrive meanwhile are
// dropped. A refused flow gets ICMP "administratively prohibited". It
// always reports the datagram as handled, so gVisor never answers on its
// own.
func (g *Gateway) handleUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	if !g.udpValid(pkt) {
		g.stats.malformed.Add(1)
		return true
	}
	g.udpMu.Lock()
	if _, pending := g.udpPending[id]; pending {
		g.udpMu.Unlock()
		g.stats.dropped.Add(1)
		return true
	}
	g.udpPending[id] = struct{}{}
	g.udpMu.Unlock()
	started := false
	defer func() {
		if !started {
			g.unpend(id)
		}
	}()

	src, dst := endpointAddrs(id)
	p, needResolve := g.classify(policy.UDP, src, dst)
	if p.d.Verdict != policy.Allow {
		g.refuseUDP(&p, quoteOf(pkt))
		return true
	}
	if !tryAcquire(&g.udpFlows, g.lim.MaxUDPFlows) {
		p.fail("%s", limitReason("concurrent udp flows", g.lim.MaxUDPFlows))
		g.stats.limitRefused.Add(1)
		g.refuseUDP(&p, quoteOf(pkt))
		return true
	}
	if !tryAcquire(&g.pendingDials, g.lim.MaxPendingDials) {
		g.udpFlows.Add(-1)
		p.fail("%s", limitReason("pending dials", g.lim.MaxPendingDials))
		g.stats.limitRefused.Add(1)
		g.refuseUDP(&p, quoteOf(pkt))
		return true
	}
	if !g.enter() {
		g.udpFlows.Add(-1)
		g.pendingDials.Add(-1)
		return true
	}
	started = true
	quote := quoteOf(pkt)
	clone := pkt.Clone()
	go g.runUDP(id, clone, &p, needResolve, quote)
	return true
}

// runUDP dials and relays one allowed UDP flow. It owns pkt (the flow's
// first datagram) and releases the flow's slots when done.
func (g *Gateway) runUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer, p *plan, needResolve bool, quote []byte) {
	defer g.wg.Done()
	defer g.udpFlows.Add(-1)
	defer pkt.DecRef()
	defer g.unpend(id)

	ctx, cancel := context.WithTimeout(g.ctx, g.lim.DialTimeout)
	if needResolve {
		g.resolve(ctx, p)
	}
	if !p.allowed() {
		cancel()
		g.pendingDials.Add(-1)
		if p.reason != "" {
			g.stats.dialFailed.Add(1)
		}
		g.refuseUDP(p, quote)
		return
	}
	up, target, err := g.dialAny(ctx, "udp", p)
	cancel()
	g.pendingDials.Add(-1)
	if err != nil {
		p.fail("dial: %v", err)
		g.stats.dialFailed.Add(1)
		g.refuseUDP(p, quote)
		return
	}

	if g.auditRefuses(p) {
		up.Close()
		g.refuseUDP(p, quote)
		return
	}
	g.countDecision(p)
	seq := g.record(p, target)
	start := time.Now()
	var wq waiter.Queue
	ep, terr := udp.NewForwarderRequest(g.stack, id, pkt).CreateEndpoint(&wq)
	g.unpend(id)
	if terr != nil {
		up.Close()
		g.audit.Log(audit.FlowEnd{FlowSeq: seq, Error: "worker endpoint: " + tcpipError(terr).Error()})
		return
	}
	worker := gonet.NewUDPConn(&wq, ep)
	res := relay.Packets(g.ctx, worker, up, g.lim.UDPIdle)
	g.endRecord(seq, res, time.Since(start).Milliseconds())
}

// unpend forgets that the flow id is being set up.
func (g *Gateway) unpend(id stack.TransportEndpointID) {
	g.udpMu.Lock()
	delete(g.udpPending, id)
	g.udpMu.Unlock()
}

// refuseUDP answers a refused flow's datagram with ICMP administratively
// prohibited and records the refusal.
func (g *Gateway) refuseUDP(p *plan, quote []byte) {
	g.countDecision(p)
	g.record(p, p.dst)
	g.sendProhibited(p.src.Addr().Is6(), p.src.Addr(), quote)
}

// udpValid checks a datagram's length and checksum before it can start a
// flow (the stack checks them only once an endpoint exists).
func (g *Gateway) udpValid(pkt *stack.PacketBuffer) bool {
	hdr := header.UDP(pkt.TransportHeader().Slice())
	if len(hdr) < header.UDPMinimumSize {
		return false
	}
	net := pkt.Network()
	lengthValid, csumValid := header.UDPValid(
		hdr,
		func() uint16 { return pkt.Data().Checksum() },
		uint16(pkt.Data().Size()),
		pkt.NetworkProtocolNumber,
		net.SourceAddress(),
		net.DestinationAddress(),
		pkt.RXChecksumValidated)
	return lengthValid && csumValid
}

// quoteOf rebuilds the start of a datagram's packet for an ICMP error:
// network header, UDP header and as much payload as fits. For IPv6 the
// extension headers are left out and the next-header field says UDP, so
// the worker's stack can match the quote to its socket.
func quoteOf(pkt *stack.PacketBuffer) []byte {
	nh := pkt.NetworkHeader().Slice()
	th := pkt.TransportHeader().Slice()
	max := maxQuote4
	if pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber {
		max = maxQuote6
	}
	q := make([]byte, 0, max)
	q = append(q, nh...)
	if pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber && len(q) >= header.IPv6MinimumSize {
		q[6] = protoUDP
	}
	q = append(q, th...)
	if room := max - len(q); room > 0 {
		q = append(q, pkt.Data().AsRange().Capped(room).ToSlice()...)
	}
	if len(q) > max {
		q = q[:max]
	}
	return q
}
