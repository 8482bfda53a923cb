package netstack

import (
	"errors"
	"net"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/relay"
)

// verifyQUIC says the flow's datagrams are checked as QUIC Initials:
// a UDP flow opened by name, under a snapshot that verifies SNI,
// allowed by a rule without "l7: none". It is asked once, in handleUDP,
// while a.p.d is the decision on the name: the host rule that allowed the
// name, not a cidr rule that may come first for a resolved address.
func (a *admission) verifyQUIC() bool {
	return a.p.proto == policy.UDP && a.p.host != "" && a.pol != nil && a.pol.VerifySNI() && !a.pol.L7None(a.p.d.Rule)
}

// gateQUIC holds a name-opened UDP flow's datagrams until its QUIC
// Initial's ClientHello is whole (l7.QUICAssembler), within the
// assembler's bounds (l7.QUICMaxDatagrams, l7.QUICMaxHeldBytes) and
// l7Hold from the first datagram. It reads the worker's side itself: the
// flow's first datagram (which the endpoint holds), then the ones queued
// while the flow was set up (a.queued), then new ones. When the
// ClientHello's SNI is the flow's name it returns the datagrams, in order,
// for the caller to send upstream before the relay starts; nothing has
// gone upstream before. Otherwise (another name, garbage, a timeout) it
// answers the worker with ICMP "administratively prohibited" (quote is the
// first datagram's packet) and returns errL7Denied; either way an l7
// record says why. When the worker's side closes first (the gateway is
// closing) it returns that error and records nothing.
func (g *Gateway) gateQUIC(worker *gonet.UDPConn, a *admission, quote []byte) ([][]byte, error) {
	bp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bp)
	buf := *bp
	var q l7.QUICAssembler
	var held [][]byte
	r := l7.Result{NeedMore: true}
	take := func(d []byte) {
		held = append(held, append([]byte(nil), d...))
		r = q.Add(d)
	}
	worker.SetReadDeadline(time.Now().Add(l7Hold))
	queued := a.queued
	a.queued = nil
	first := true
	for r.NeedMore {
		if !first && len(queued) > 0 {
			take(queued[0])
			queued = queued[1:]
			continue
		}
		n, err := worker.Read(buf)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return nil, err
			}
			r = q.Final()
			break
		}
		first = false
		take(buf[:n])
	}
	worker.SetReadDeadline(time.Time{})

	p := &a.p
	v := l7.Check(p.host, p.dst.Port(), r, true, false)
	ev := audit.L7{Action: "allow", FlowSeq: a.seq, Host: p.host, SNI: v.SNI, Reason: v.Reason}
	if !v.Allow {
		ev.Action = "deny"
	}
	g.audit.Log(ev)
	if !v.Allow {
		g.stats.l7Refused.Add(1)
		g.sendProhibited(p.src.Addr().Is6(), p.src.Addr(), quote)
		return nil, errL7Denied
	}
	return held, nil
}

// sendHeld writes the datagrams a gate held to upstream, in order, and
// returns the bytes written.
func sendHeld(up net.Conn, held [][]byte) (int64, error) {
	var n int64
	for _, d := range held {
		k, err := up.Write(d)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
