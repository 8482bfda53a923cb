package netstack

import (
	"errors"
	"io"
	"net"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/policy"
)

// l7Hold bounds how long the worker's first bytes are held while they are
// classified; after it the bytes so far are judged as final.
const l7Hold = 3 * time.Second

// gateResult is what the L7 gate moved before the relay took over.
type gateResult struct {
	allow          bool
	held, serverIn int64 // client bytes forwarded after the check, server bytes pumped meanwhile
}

// gateL7 checks a flow opened by name (SPEC §7): the worker's first bytes,
// if a TLS ClientHello, must carry SNI equal to the name; if a plain HTTP
// request, Host must equal it. Client bytes are held until classified
// (at most l7.MaxHold bytes and l7Hold); server bytes are never held back:
// a pump copies them to the worker meanwhile, so server-first protocols
// work. On deny the worker's connection is reset, upstream is closed, and
// an l7 record says why. On allow the held bytes are sent upstream and the
// caller relays the rest. flowSeq is the seq of the flow's record.
func (g *Gateway) gateL7(worker net.Conn, ep tcpip.Endpoint, up net.Conn, p *plan, pol *policy.Policy, flowSeq uint64) gateResult {
	var res gateResult
	pumpDone := make(chan int64, 1)
	go func() {
		buf := make([]byte, 16<<10)
		var n64 int64
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if _, werr := worker.Write(buf[:n]); werr != nil {
					break
				}
				n64 += int64(n)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					// The server finished first: pass the half-close on.
					if cw, ok := worker.(interface{ CloseWrite() error }); ok {
						cw.CloseWrite()
					}
				}
				break
			}
		}
		pumpDone <- n64
	}()
	stopPump := func() {
		up.SetReadDeadline(time.Unix(1, 0))
		res.serverIn = <-pumpDone
		up.SetReadDeadline(time.Time{})
	}

	buf := make([]byte, 0, 4<<10)
	var r l7.Result
	// Until the worker's first byte only the idle timeout applies (a
	// server-first protocol may wait long for its client); from then on
	// the hold bound does.
	worker.SetReadDeadline(time.Now().Add(g.lim.TCPIdle))
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
				// The worker sent nothing and went away or idled out:
				// nothing was held, so nothing needs checking; the relay
				// sees the same end and records it.
				worker.SetReadDeadline(time.Time{})
				stopPump()
				res.allow = true
				return res
			}
			r = l7.ClassifyFinal(buf)
			break
		}
	}
	worker.SetReadDeadline(time.Time{})
	stopPump()

	v := l7.Check(p.host, p.dst.Port(), r, pol.VerifySNI(), pol.VerifyHost())
	if r.Kind == l7.TLS || r.Kind == l7.HTTP || !v.Allow {
		ev := audit.L7{Action: "allow", FlowSeq: flowSeq, Host: p.host, SNI: v.SNI, HTTPHost: v.HTTPHost, Reason: v.Reason}
		if !v.Allow {
			ev.Action = "deny"
		}
		g.audit.Log(ev)
	}
	if !v.Allow {
		ep.Abort()
		up.Close()
		return res
	}
	if _, err := up.Write(buf); err != nil {
		res.allow = true // the relay will see the same failure and record it
		return res
	}
	res.held = int64(len(buf))
	res.allow = true
	return res
}
