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
// closing) it returns that error and records nothing. With the
// datagrams it returns the watch that checks the flow's later QUIC
// connections (quicFollow).
func (g *Gateway) gateQUIC(worker *gonet.UDPConn, a *admission, quote []byte) ([][]byte, *l7.QUICWatch, error) {
	bp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bp)
	buf := *bp
	q := &l7.QUICAssembler{}
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
				return nil, nil, err
			}
			r = q.Final()
			break
		}
		first = false
		take(buf[:n])
	}
	worker.SetReadDeadline(time.Time{})

	if !g.judgeQUIC(a, r, quote) {
		return nil, nil, errL7Denied
	}
	return held, l7.NewQUICWatch(q), nil
}

// judgeQUIC checks a ClientHello read from a flow's Initials against the
// flow's name and records the decision; a refusal answers the worker
// with ICMP "administratively prohibited" (quote is a datagram's packet
// of the flow).
func (g *Gateway) judgeQUIC(a *admission, r l7.Result, quote []byte) bool {
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
	}
	return v.Allow
}

// quicFollow is the worker's side of a relayed QUIC flow after its first
// connection passed: every datagram read goes through the flow's
// l7.QUICWatch, so that a later connection on the same 5-tuple is held
// until its ClientHello is whole and checked like the first (judgeQUIC),
// and a datagram that must not reach the server is dropped, with a
// record when it is a refusal; the server's datagrams written to the
// worker teach the watch the server's connection IDs. Only the relay's
// one reading goroutine calls Read, and its one writing goroutine Write.
type quicFollow struct {
	net.Conn
	g     *Gateway
	a     *admission
	w     *l7.QUICWatch
	quote []byte
	out   [][]byte // datagrams of a connection that passed, to return first
}

// Write sends the server's datagram to the worker; the watch learns the
// server's connection IDs from it first.
func (f *quicFollow) Write(b []byte) (int, error) {
	f.w.Server(b)
	return f.Conn.Write(b)
}

func (f *quicFollow) Read(b []byte) (int, error) {
	for {
		if len(f.out) > 0 {
			d := f.out[0]
			f.out = f.out[1:]
			return copy(b, d), nil
		}
		n, err := f.Conn.Read(b)
		if err != nil {
			return n, err
		}
		s := f.w.Datagram(b[:n])
		switch s.Action {
		case l7.WatchPass:
			return n, nil
		case l7.WatchDrop:
			if s.Err != nil {
				f.g.audit.Log(audit.L7{Action: "deny", FlowSeq: f.a.seq, Host: f.a.p.host, Reason: s.Err.Error()})
				f.g.stats.l7Refused.Add(1)
				f.g.sendProhibited(f.a.p.src.Addr().Is6(), f.a.p.src.Addr(), f.quote)
			}
		case l7.WatchDecide:
			if f.g.judgeQUIC(f.a, s.Result, f.quote) {
				f.out = f.w.Allow(s)
			} else {
				f.w.Refuse(s)
			}
		}
	}
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
