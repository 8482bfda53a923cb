package netstack

import (
	"net"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// handleUDP is the stack's handler for UDP datagrams that match no
// endpoint: the first datagram of a new flow (per 5-tuple). It runs on the
// link's delivery goroutine, so it never blocks: it takes the admission's
// steps that do not block (admit.go) here; resolving a name, dialing and
// relaying happen on a goroutine of the flow's own, and datagrams for the
// same flow that arrive meanwhile are dropped (queued, for a flow whose
// QUIC Initial is checked). A refused flow gets ICMP "administratively
// prohibited". It always reports the datagram as handled, so gVisor never
// answers on its own.
func (g *Gateway) handleUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	if from := id.RemoteAddress; from == g.gw4 || from == g.gw6 {
		// The gateway's own broadcast (a DHCP answer, dhcp.go), which
		// gVisor also delivers locally. The filter passes no packet of
		// the worker's with this source, so it is never a flow.
		g.stats.dropped.Add(1)
		return true
	}
	if !g.udpValid(pkt) {
		g.stats.malformed.Add(1)
		return true
	}
	if !g.pend(id) {
		if !g.queueUDP(id, pkt) {
			g.stats.dropped.Add(1)
		}
		return true
	}
	src, dst := endpointAddrs(id)
	a, ok := g.admit(policy.UDP, src, dst)
	a.holdPending(id)
	if !ok {
		g.refuseUDP(a, quoteOf(pkt))
		a.release()
		return true
	}
	if a.checkQUIC = a.verifyQUIC(); a.checkQUIC {
		g.queueFor(id)
	}
	quote := quoteOf(pkt)
	go g.runUDP(a, id, pkt.Clone(), quote)
	return true
}

// runUDP connects and relays one admitted UDP flow. It owns pkt (the
// flow's first datagram) and a, which it releases when done.
func (g *Gateway) runUDP(a *admission, id stack.TransportEndpointID, pkt *stack.PacketBuffer, quote []byte) {
	defer a.release()
	defer pkt.DecRef()
	up, ok := a.connect("udp")
	if !ok {
		g.refuseUDP(a, quote)
		return
	}
	var wq waiter.Queue
	ep, terr := udp.NewForwarderRequest(g.stack, id, pkt).CreateEndpoint(&wq)
	a.unpend()
	if terr != nil {
		up.Close()
		a.abort("worker endpoint: " + tcpipError(terr).Error())
		return
	}
	wc := gonet.NewUDPConn(&wq, ep)
	// A reload that refuses the flow closes both sides (revoke.go): the
	// worker's next datagram is a new flow, decided anew.
	g.track(a, func() { wc.Close(); up.Close() })
	var worker net.Conn = wc
	var heldBytes int64
	if a.checkQUIC {
		res := relay.Result{}
		held, watch, err := g.gateQUIC(wc, a, quote)
		if err != nil {
			res.Err = err
		} else if heldBytes, err = sendHeld(up, held); err != nil {
			res = relay.Result{ToUpstream: heldBytes, Err: err, Failed: relay.SideUpstream}
		}
		if res.Err != nil {
			worker.Close()
			up.Close()
			a.end(res)
			return
		}
		worker = &quicFollow{Conn: worker, g: g, a: a, w: watch, quote: quote}
	}
	res := relay.Packets(g.ctx, worker, up, g.lim.UDPIdle)
	res.ToUpstream += heldBytes
	a.end(res)
}

// pendingUDP is a UDP flow being set up. For a flow whose QUIC Initial is
// checked, queue holds the datagrams that arrive meanwhile (a ClientHello
// often spans two), within the gate's bounds.
type pendingUDP struct {
	queueing bool
	queue    [][]byte
	bytes    int
}

// pend notes that the flow id is being set up; false when it already is.
func (g *Gateway) pend(id stack.TransportEndpointID) bool {
	g.udpMu.Lock()
	defer g.udpMu.Unlock()
	if _, pending := g.udpPending[id]; pending {
		return false
	}
	g.udpPending[id] = &pendingUDP{}
	return true
}

// queueFor makes the pending flow id queue the datagrams that arrive
// until its endpoint exists.
func (g *Gateway) queueFor(id stack.TransportEndpointID) {
	g.udpMu.Lock()
	if p := g.udpPending[id]; p != nil {
		p.queueing = true
	}
	g.udpMu.Unlock()
}

// queueUDP queues a copy of pkt's payload for the pending flow id, if it
// queues and has room (l7.QUICMaxDatagrams, l7.QUICMaxHeldBytes); false
// means the datagram is dropped.
func (g *Gateway) queueUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	g.udpMu.Lock()
	defer g.udpMu.Unlock()
	p := g.udpPending[id]
	n := pkt.Data().Size()
	if p == nil || !p.queueing || len(p.queue)+1 >= l7.QUICMaxDatagrams || p.bytes+n > l7.QUICMaxHeldBytes {
		return false
	}
	p.queue = append(p.queue, pkt.Data().AsRange().ToSlice())
	p.bytes += n
	return true
}

// unpend forgets that the flow id is being set up and returns the
// datagrams queued for it.
func (g *Gateway) unpend(id stack.TransportEndpointID) [][]byte {
	g.udpMu.Lock()
	defer g.udpMu.Unlock()
	p := g.udpPending[id]
	delete(g.udpPending, id)
	if p == nil {
		return nil
	}
	return p.queue
}

// refuseUDP records a refused flow and answers its datagram with ICMP
// administratively prohibited (neither once the gateway is closing).
func (g *Gateway) refuseUDP(a *admission, quote []byte) {
	if a.refuse() {
		g.sendProhibited(a.p.src.Addr().Is6(), a.p.src.Addr(), quote)
	}
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
