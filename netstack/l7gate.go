package netstack

import (
	"net"
	"strconv"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/relay"
)

// l7Hold bounds how long the worker's first bytes are held while they are
// classified; after it the bytes so far are judged as final.
const l7Hold = 3 * time.Second

// gateL7 returns the relay.Gate of a flow opened by name: the
// worker's first bytes, if a TLS ClientHello, must carry SNI equal to the
// name; if a plain HTTP request, Host must equal it. The gate runs on the
// relay's worker→upstream direction while upstream→worker already flows,
// so server-first protocols work. It holds the worker's bytes until they
// are classified (at most l7.MaxHold bytes, and l7Hold from the first
// byte); it takes its buffer only when the worker has sent something. On
// deny it resets the worker's connection and returns errL7Denied (an l7
// record says why); on allow the relay sends the held bytes upstream.
// The checks asked for are those of the flow's policy snapshot (a.pol),
// and the l7 record names the flow's record (a.seq).
//
// A plain HTTP flow whose first request passed, with the Host check on,
// gets an l7Filter (l7.HTTPStream) for the rest of the direction: every later request
// is checked too. A TLS flow, with the SNI check on, gets one with l7.TLSStream:
// every later ClientHello (one after a HelloRetryRequest) is checked as
// the first. Other flows are copied as they are.
//
// first keeps the server's first bytes on the flow: an HTTP flow's
// stream learns from them whether a WebSocket upgrade switched protocols
// (l7.HTTPStream.WatchUpgrade).
func (g *Gateway) gateL7(ep tcpip.Endpoint, a *admission, first *serverStart) relay.Gate {
	p, pol, flowSeq := &a.p, a.pol, a.seq
	return func(worker net.Conn) ([]byte, relay.Filter, error) {
		// Until the worker's first byte the relay's idle timeout applies
		// (it closes the worker's side, which ends this wait): a
		// server-first protocol may wait long for its client.
		if err := relay.WaitReadable(worker, time.Time{}); err != nil {
			return nil, nil, nil // the relay's Read sees the same end
		}
		bp := holdBufs.Get().(*[]byte)
		defer holdBufs.Put(bp)
		buf := *bp
		var r l7.Result
		for {
			if len(buf) == cap(buf) {
				nb := make([]byte, len(buf), min(2*cap(buf), l7.MaxHold))
				copy(nb, buf)
				buf = nb
			}
			n, err := worker.Read(buf[len(buf):cap(buf)])
			if n > 0 && len(buf) == 0 {
				worker.SetReadDeadline(time.Now().Add(l7Hold))
			}
			buf = buf[:len(buf)+n]
			if len(buf) > 0 {
				if r = l7.Classify(buf); !r.NeedMore {
					break
				}
				if len(buf) >= l7.MaxHold {
					r = l7.ClassifyFinal(buf)
					break
				}
			}
			if err != nil {
				if len(buf) == 0 {
					// The worker sent nothing and went away: nothing
					// was held, so nothing needs checking; the relay
					// sees the same end and records it.
					worker.SetReadDeadline(time.Time{})
					return nil, nil, nil
				}
				r = l7.ClassifyFinal(buf)
				break
			}
		}
		worker.SetReadDeadline(time.Time{})
		if g.leakedPlaceholder(flowSeq, p.host, buf) {
			ep.Abort()
			return nil, nil, errL7Denied
		}

		v := l7.Check(p.host, p.dst.Port(), r, pol.VerifySNI(), pol.VerifyHost())
		if r.Kind == l7.TLS || r.Kind == l7.HTTP || !v.Allow {
			ev := audit.L7{Action: "allow", FlowSeq: flowSeq, Host: p.host, SNI: v.SNI, HTTPHost: v.HTTPHost, Reason: v.Reason}
			if !v.Allow {
				ev.Action = "deny"
			}
			g.audit.Log(ev)
		}
		if !v.Allow {
			g.stats.l7Refused.Add(1)
			if !explainRefusal(worker, r.Kind, p.host, v.Reason, pol.RefusalAlert(), pol.RefusalPage()) {
				ep.Abort()
			}
			return nil, nil, errL7Denied
		}
		var f relay.Filter
		switch {
		case r.Kind == l7.HTTP && pol.VerifyHost():
			s := l7.NewHTTPStream(p.host, p.dst.Port())
			s.WatchUpgrade(first.answer)
			f = &l7Filter{g: g, ep: ep, s: s, flowSeq: flowSeq, host: p.host}
		case r.Kind == l7.TLS && pol.VerifySNI():
			f = &l7Filter{g: g, ep: ep, s: l7.NewTLSStream(p.host, p.dst.Port()), flowSeq: flowSeq, host: p.host}
		}
		// The relay writes the held bytes after this returns: copy them
		// out of the pooled buffer (one allocation, of their size).
		return append([]byte(nil), buf...), f, nil
	}
}

// l7Filter is the relay.Filter of an HTTP or TLS flow opened by name: its
// stream (l7.HTTPStream: every request head, the first one again, and the
// framing of the bodies; l7.TLSStream: every ClientHello, the first one
// again) decides on everything the worker sends. On a refusal it writes
// an l7 deny record, resets the worker's connection and ends the relay
// with errL7Denied; nothing of the refused request or ClientHello has
// reached upstream.
type l7Filter struct {
	g       *Gateway
	ep      tcpip.Endpoint
	s       l7Stream
	flowSeq uint64
	host    string
}

// l7Stream is what an l7Filter asks: l7.HTTPStream or l7.TLSStream.
type l7Stream interface {
	Next(b []byte) (n int, v l7.Verdict)
}

func (f *l7Filter) Next(b []byte) (int, error) {
	if f.g.leakedPlaceholder(f.flowSeq, f.host, b) {
		f.ep.Abort()
		return 0, errL7Denied
	}
	n, v := f.s.Next(b)
	if !v.Allow {
		return 0, f.refuse(v)
	}
	return n, nil
}

// End judges what the worker left unforwarded when it ended its stream:
// an HTTP request cut short; a TLS stream has nothing to add.
func (f *l7Filter) End(kept []byte) error {
	if e, ok := f.s.(interface{ End([]byte) l7.Verdict }); ok {
		if v := e.End(kept); !v.Allow {
			return f.refuse(v)
		}
	}
	return nil
}

func (f *l7Filter) refuse(v l7.Verdict) error {
	f.g.audit.Log(audit.L7{Action: "deny", FlowSeq: f.flowSeq, Host: f.host, SNI: v.SNI, HTTPHost: v.HTTPHost, Reason: v.Reason})
	f.g.stats.l7Refused.Add(1)
	f.ep.Abort()
	return errL7Denied
}

// tlsAccessDenied is a fatal TLS alert record: access_denied (49).
var tlsAccessDenied = []byte{21, 3, 3, 0, 2, 2, 49}

// explainRefusal tells the worker why its first bytes were refused, where
// the protocol has a way to say it: a TLS access_denied alert for a
// ClientHello, a short 403 response naming the reason and the flow's name
// for an HTTP request. It then half-closes the connection, so the worker
// reads the answer and an end instead of a reset; an agent reading the
// answer can tell a policy refusal from a network fault. It reports false
// when it said nothing (another protocol, the policy turned it off, or the
// write failed): the caller resets the connection.
func explainRefusal(worker net.Conn, kind l7.Kind, host, reason string, alert, page bool) bool {
	var msg []byte
	switch {
	case kind == l7.TLS && alert:
		msg = tlsAccessDenied
	case kind == l7.HTTP && page:
		msg = refusalPage(host, reason)
	default:
		return false
	}
	worker.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := worker.Write(msg)
	worker.SetWriteDeadline(time.Time{})
	if err != nil {
		return false
	}
	if cw, ok := worker.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	return true
}

// refusalPage is the 403 response to an HTTP request the L7 checks refused.
// host is the name the flow was opened by (normalized by the policy);
// reason may quote what the worker sent, so only printable ASCII of it is
// kept.
func refusalPage(host, reason string) []byte {
	clean := make([]byte, 0, len(reason))
	for i := 0; i < len(reason) && len(clean) < 200; i++ {
		if c := reason[i]; c >= 0x20 && c < 0x7f {
			clean = append(clean, c)
		}
	}
	body := "nsgate refused this request: " + string(clean) + ".\n" +
		"This connection was opened to " + host + "; the egress policy lets each connection speak only to the name it was opened to.\n" +
		"This is a policy decision, not a network fault: retrying will not help. Ask the operator to allow what you need.\n"
	return []byte("HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: close\r\nX-Nsgate-Refusal: l7\r\n\r\n" + body)
}

// holdBufs are the gate's initial hold buffers (grown up to l7.MaxHold
// for a long first message).
var holdBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}
