package netstack

import (
	"bufio"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/nsgate/nsgate/policy"
)

// The block page (Config.BlockPage, the policy's dns.block_page). The DNS
// server answers a refused name with the name's fake address instead of
// NXDOMAIN; a TCP flow to that address is refused as before (the flow
// record is the same denial, nothing is dialled), but instead of a reset
// the gateway completes the handshake itself and answers:
//
//   - a plain HTTP request with a 403 page naming the name, the port, the
//     rule and the reason: HTML when the client accepts it (a browser's
//     navigation), JSON when it asks for application/json, text
//     otherwise; X-Nsgate-Refused, X-Nsgate-Rule and X-Nsgate-Reason
//     headers carry the same for a program;
//   - a TLS ClientHello with a TLS access_denied alert: nsgate draws no
//     page over TLS, because a certificate for a refused name would need
//     a CA the worker trusts for every name (the run's CA is
//     name-constrained to the terminated hosts; docs/chromium.md);
//   - anything else (or nothing within blockPageWait) with a close.
//
// One request per connection (Connection: close). The page quotes only
// what the gateway decided (the flow's name, from its address, and the
// policy's rule and reason), never what the worker sent.

const (
	// maxBlockConns bounds the block page's connections at once; over it
	// a refused flow is reset, as without the page.
	maxBlockConns = 64
	// blockPageWait bounds one block-page connection from its handshake
	// to its close.
	blockPageWait = 10 * time.Second
	// blockPageRead bounds what the gateway reads of one connection.
	blockPageRead = 64 << 10
)

// blockInfo is what a block page says.
type blockInfo struct {
	host   string
	port   uint16
	rule   string
	reason string
}

// blockable says a refused TCP flow gets the block page instead of a
// reset: a flow to a fake address whose name the snapshot refused (not a
// metadata name, not a flow refused after resolution, by a limit or
// because the audit failed), with the block page on.
func (a *admission) blockable() bool {
	p := &a.p
	if !a.entered || p.host == "" || a.needResolve || p.reason != "" || p.d.Verdict == policy.Allow {
		return false
	}
	if p.d.Rule == policy.RuleMetadata || a.g.auditRefuses(p) {
		return false
	}
	return a.g.blockPage || (a.pol != nil && a.pol.BlockPage())
}

// serveBlockPage refuses the flow (its record says the block page
// answered) and serves the block page on it, on a goroutine of its own.
// Over maxBlockConns it resets the flow instead. It releases a when done.
func (g *Gateway) serveBlockPage(r *tcp.ForwarderRequest, a *admission) {
	if !tryAcquire(&g.blockConns, maxBlockConns) {
		a.p.d.Reason += " (block page busy: reset)"
		a.refuse()
		r.Complete(true)
		a.release()
		return
	}
	info := blockInfo{host: a.p.host, port: a.p.dst.Port(), rule: a.p.d.Rule, reason: a.p.d.Reason}
	a.p.d.Reason += " (answered by nsgate's block page)"
	a.refuse()
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		g.blockConns.Add(-1)
		a.release()
		return
	}
	r.Complete(false)
	conn := newWorkerConn(&wq, ep, g.pool.Go)
	go func() {
		defer a.release()
		defer g.blockConns.Add(-1)
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(blockPageWait))
		serveBlock(conn, info)
	}()
}

// serveBlock answers one connection to the block page (see the top of
// this file). It does not close conn.
func serveBlock(conn net.Conn, info blockInfo) {
	br := bufio.NewReader(io.LimitReader(conn, blockPageRead))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 0x16 { // a TLS handshake record
		conn.Write(tlsAccessDenied)
		closeWrite(conn)
		return
	}
	if answerBlock(conn, br, info) {
		closeWrite(conn)
		// Read what the worker still sends until its end, so that the
		// close does not turn into a reset that could cut the page.
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, br)
	}
}

// answerBlock reads one HTTP request from r and writes the block page to
// w. It reports false when what came was not an HTTP request (nothing is
// written then).
func answerBlock(w io.Writer, r *bufio.Reader, info blockInfo) bool {
	req, err := http.ReadRequest(r)
	if err != nil {
		return false
	}
	req.Body.Close()
	w.Write(BlockPageResponse(info.host, info.port, info.rule, info.reason, req.Header.Get("Accept"), req.Method == http.MethodHead))
	return true
}

// BlockPageResponse is the whole HTTP/1.1 response of the block page for
// a refused host:port, in the form accept asks for (HTML, JSON or text;
// see the top of this file); head leaves the body out.
func BlockPageResponse(host string, port uint16, rule, reason, accept string, head bool) []byte {
	host, rule, reason = headerSafe(host), headerSafe(rule), headerSafe(reason)
	target := host + ":" + strconv.Itoa(int(port))
	advice := "This is a policy decision, not a network fault: retrying, another address or another spelling of the name will be refused as well. Ask the operator to allow " + host + " if the task needs it."
	var ctype, body string
	switch a := strings.ToLower(accept); {
	case strings.Contains(a, "text/html") || strings.Contains(a, "application/xhtml"):
		ctype = "text/html; charset=utf-8"
		h := html.EscapeString
		body = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Refused by nsgate: " + h(host) + "</title>\n" +
			"<style>body{font:16px/1.5 sans-serif;max-width:40em;margin:3em auto;padding:0 1em}h1{color:#a00}dt{font-weight:bold}</style></head>\n" +
			"<body><h1>Refused by policy: " + h(host) + "</h1>\n" +
			"<p id=\"nsgate-refused\">nsgate, the egress gateway of this sandbox, refused the connection to <b>" + h(target) + "</b>. Nothing was sent to it.</p>\n" +
			"<dl><dt>name</dt><dd>" + h(host) + "</dd><dt>port</dt><dd>" + strconv.Itoa(int(port)) + "</dd><dt>rule</dt><dd>" + h(rule) + "</dd><dt>reason</dt><dd>" + h(reason) + "</dd></dl>\n" +
			"<p>" + h(advice) + "</p>\n</body></html>\n"
	case strings.Contains(a, "application/json"):
		ctype = "application/json"
		b, _ := json.Marshal(struct {
			Refused bool   `json:"refused"`
			By      string `json:"by"`
			Host    string `json:"host"`
			Port    uint16 `json:"port"`
			Rule    string `json:"rule"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}{true, "nsgate", host, port, rule, reason, advice})
		body = string(b) + "\n"
	default:
		ctype = "text/plain; charset=utf-8"
		body = "nsgate refused by policy: " + target + " (rule " + rule + ": " + reason + ").\n" +
			"nsgate, the egress gateway of this sandbox, sent nothing to " + host + ".\n" + advice + "\n"
	}
	var b strings.Builder
	b.WriteString("HTTP/1.1 403 Forbidden\r\nContent-Type: " + ctype + "\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nCache-Control: no-store\r\nConnection: close\r\nX-Nsgate-Refused: " + host + "\r\nX-Nsgate-Rule: " + rule +
		"\r\nX-Nsgate-Reason: " + reason + "\r\n\r\n")
	if !head {
		b.WriteString(body)
	}
	return []byte(b.String())
}

// headerSafe keeps the printable ASCII of s, at most 300 bytes: the
// page's fields go into headers too.
func headerSafe(s string) string {
	out := make([]byte, 0, min(len(s), 300))
	for i := 0; i < len(s) && len(out) < 300; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			out = append(out, c)
		}
	}
	return string(out)
}

// closeWrite half-closes conn where it can, so the worker reads an end
// after the answer rather than a reset.
func closeWrite(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
