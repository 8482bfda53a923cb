// Package intercept ends the TLS of a flow that a tls: terminate rule
// allows, decides every HTTP request inside it and forwards the allowed
// ones over verified TLS to the flow's upstream, putting credentials in on
// the way (docs/credentials.md).
//
// The worker side is crypto/tls with a leaf of the run's CA (package
// tlsca) for the flow's name, ALPN h2 and http/1.1, served by net/http
// (HTTP/1.1: keep-alive, pipelining, upgrades) or golang.org/x/net/http2
// (each stream). The upstream side is an http.Transport over connections
// the gateway dials to the flow's allowed addresses, verifying the
// upstream's certificate against the host's roots and tls.upstream_ca.
package intercept

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/tlsca"
)

// Limits of the worker side.
const (
	handshakeTimeout = 10 * time.Second
	headerTimeout    = 30 * time.Second
	// maxHeldBody is how much of a request body is read and checked for
	// placeholders before anything of the request goes upstream; a longer
	// body is checked as it streams, and a placeholder in it cuts the
	// request off (docs/credentials.md).
	maxHeldBody = 1 << 20
)

// Engine is what a run needs to terminate flows. It is safe for concurrent
// use; Serve is called once per flow.
type Engine struct {
	CA    *tlsca.CA
	Roots *x509.CertPool // upstream roots: the host's and tls.upstream_ca
	Vault *Vault
	// NoSubstitute and NoPathCheck switch a layer off, for the lab's
	// --break only: placeholders are neither replaced nor refused, or the
	// request rules are not asked.
	NoSubstitute, NoPathCheck bool
}

// NewEngine builds the engine of a run from its start policy: a CA
// constrained to the policy's terminated hosts, the upstream roots (the
// host's, plus tls.upstream_ca) and the vault (secrets read now; getenv nil
// is os.Getenv). A policy that terminates nothing gives a nil Engine.
func NewEngine(p *policy.Policy, getenv func(string) string, readFile func(string) ([]byte, error)) (*Engine, error) {
	if readFile == nil {
		readFile = readBounded
	}
	hosts := p.TerminatedHosts()
	if len(hosts) == 0 {
		if len(p.Credentials()) > 0 {
			return nil, errors.New("credentials without a tls: terminate rule")
		}
		return nil, nil
	}
	ca, err := tlsca.New(tlsca.Options{Names: hosts})
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if f := p.UpstreamCA(); f != "" {
		b, err := readFile(f)
		if err != nil {
			return nil, fmt.Errorf("tls.upstream_ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls.upstream_ca: %s holds no PEM certificate", f)
		}
	}
	v, err := NewVault(p.Credentials(), getenv, readFile)
	if err != nil {
		return nil, err
	}
	return &Engine{CA: ca, Roots: roots, Vault: v}, nil
}

// Flow is one terminated flow, as the gateway admitted it.
type Flow struct {
	Policy *policy.Policy // the flow's snapshot
	Rule   string         // the allow rule that admitted it ("allow[0]")
	Host   string         // the flow's name (normalized)
	Port   uint16
	Seq    uint64 // the flow record's seq, for request records
	Audit  audit.Sink
	// First is the upstream connection the gateway dialled when it
	// admitted the flow; the first upstream request uses it. Dial opens
	// another, to one of the flow's allowed addresses.
	First net.Conn
	Dial  func(ctx context.Context) (net.Conn, error)
	// Idle closes a worker connection with no request for this long
	// (0: 2 minutes).
	Idle time.Duration
}

// Stats are what Serve moved, for the flow_end record.
type Stats struct {
	FromWorker, ToWorker int64 // raw bytes on the worker's connection
}

// Serve terminates the worker's TLS connection (held are the bytes the
// gateway read from it already, the ClientHello) and serves its requests
// until the connection ends or ctx is done. It closes worker and f.First.
func (e *Engine) Serve(ctx context.Context, worker net.Conn, held []byte, f Flow) (Stats, error) {
	cc := &countConn{Conn: worker, held: held}
	defer cc.Close()
	var first atomic.Pointer[net.Conn]
	if f.First != nil {
		first.Store(&f.First)
		defer func() {
			if c := first.Swap(nil); c != nil {
				(*c).Close()
			}
		}()
	}
	tc := tls.Server(cc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if !strings.EqualFold(strings.TrimSuffix(h.ServerName, "."), f.Host) {
				return nil, fmt.Errorf("SNI %q is not the flow's name %s", clipName(h.ServerName), f.Host)
			}
			return e.CA.Leaf(f.Host)
		},
	})
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		f.Audit.Log(audit.L7{Action: "deny", FlowSeq: f.Seq, Host: f.Host,
			Reason: "terminated TLS: the worker's handshake failed (a client that pins certificates or does not trust the run's CA fails closed): " + err.Error()})
		return cc.stats(), err
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if c := first.Swap(nil); c != nil {
				return *c, nil
			}
			if f.Dial == nil {
				return nil, errors.New("no upstream dialer")
			}
			return f.Dial(ctx)
		},
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			RootCAs:    e.Roots,
			ServerName: f.Host,
			NextProtos: []string{"h2", "http/1.1"},
		},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: handshakeTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	h := e.handler(f, tr)
	idle := f.Idle
	if idle <= 0 {
		idle = 2 * time.Minute
	}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		srv := &http2.Server{IdleTimeout: idle, MaxConcurrentStreams: 100}
		srv.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, Handler: h,
			BaseConfig: &http.Server{ErrorLog: quietLog, ReadHeaderTimeout: headerTimeout}})
		tc.Close()
		return cc.stats(), nil
	}
	ln := newOneConn(tc)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: headerTimeout, IdleTimeout: idle, ErrorLog: quietLog,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				ln.done()
			}
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	srv.Serve(ln)
	return cc.stats(), nil
}

var quietLog = log.New(io.Discard, "", 0)

func clipName(s string) string {
	if len(s) > 80 {
		return s[:80]
	}
	return s
}

// handler decides and forwards each request of one flow.
type handler struct {
	e     *Engine
	f     Flow
	proxy *httputil.ReverseProxy
	creds bool // some credential may go to f.Host
}

func (e *Engine) handler(f Flow, tr http.RoundTripper) *handler {
	h := &handler{e: e, f: f, creds: e.Vault.forHost(f.Host)}
	target := f.Host
	if f.Port != 443 {
		target = net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port)))
	}
	h.proxy = &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      quietLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = target
			pr.Out.Host = target
			if h.creds {
				// The transport then asks for gzip itself and
				// decompresses, so an echoed secret is seen in clear.
				pr.Out.Header.Del("Accept-Encoding")
			}
		},
		ModifyResponse: e.scrubResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if rw, ok := w.(*recorder); ok {
				rw.upstreamErr = err
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Nsgate-Refusal", "upstream")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "nsgate: the upstream "+f.Host+" failed: "+e.scrubString(err.Error())+"\n")
		},
	}
	return h
}

// ServeHTTP decides one request: the authority, the request rules, the
// placeholders; then it forwards an allowed one and records it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := &h.f
	rec := &recorder{ResponseWriter: w}
	ev := audit.Request{Action: "deny", FlowSeq: f.Seq, Method: r.Method, Host: f.Host, Rule: f.Rule}
	defer func() { f.Audit.Log(ev) }()

	if host, ok := h.authority(r.Host); !ok {
		ev.Reason = "fronting: Host/:authority " + strconv.Quote(clipName(host)) + " is not the flow's name " + f.Host + " (its SNI)"
		ev.Status = refuse(rec, f.Rule, ev.Reason)
		return
	}
	var overrides []string
	for _, name := range policy.MethodOverrideHeaders {
		overrides = append(overrides, r.Header.Values(name)...)
	}
	var d policy.RequestDecision
	if h.e.NoPathCheck {
		d = policy.RequestDecision{Verdict: policy.Allow, Rule: f.Rule, Reason: "request rules switched off (--break)", Path: r.URL.Path}
	} else {
		d = f.Policy.DecideRequest(f.Rule, policy.Request{Method: r.Method, Target: r.RequestURI, Overrides: overrides})
	}
	ev.Path, ev.Rule = d.Path, d.Rule
	if ev.Path == "" {
		ev.Path = clipName(r.URL.EscapedPath())
	}
	if d.Verdict != policy.Allow {
		ev.Reason = d.Reason
		ev.Status = refuse(rec, d.Rule, d.Reason)
		return
	}
	if !h.e.NoSubstitute {
		if where, name, ok := h.placeholders(r, d.Rule); !ok {
			ev.Reason = "credential " + name + ": placeholder in " + where + ", where it may not go"
			f.Audit.Log(audit.Credential{Action: "deny", FlowSeq: f.Seq, Credential: name, Host: f.Host, Where: where, Reason: ev.Reason})
			ev.Status = refuse(rec, "credential", ev.Reason)
			return
		}
	}
	body, err := h.checkBody(r)
	if err != nil {
		var le *leakError
		if errors.As(err, &le) {
			ev.Reason = "credential " + le.name + ": placeholder in the body, where it may not go"
			f.Audit.Log(audit.Credential{Action: "deny", FlowSeq: f.Seq, Credential: le.name, Host: f.Host, Where: "body", Reason: ev.Reason})
			ev.Status = refuse(rec, "credential", ev.Reason)
			return
		}
		ev.Reason = "reading the request body: " + err.Error()
		ev.Status = refuse(rec, f.Rule, ev.Reason)
		return
	}
	if body != nil {
		r.Body = body
	}
	var pw http.ResponseWriter = rec
	var ws *wsUpgrade
	if h.wsWanted(r) {
		r, pw, ws = h.prepareWS(r, rec)
	}
	h.proxy.ServeHTTP(pw, r)
	ev.Action, ev.Status, ev.BytesIn = "allow", rec.status, rec.n
	if body != nil {
		ev.BytesOut = body.n
	}
	ev.Reason = d.Reason
	if rec.upstreamErr != nil {
		ev.Reason = "upstream failed: " + h.e.scrubString(rec.upstreamErr.Error())
	}
	if ws != nil && ws.relay != nil {
		if err := ws.relay.why(); err != nil {
			ev.Reason = "WebSocket closed by nsgate: " + err.Error()
		}
	}
}

// authority checks Host (HTTP/1.1) or :authority (h2) against the flow's
// name; a port, if given, must be the flow's.
func (h *handler) authority(hostport string) (string, bool) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	if port != "" && port != strconv.Itoa(int(h.f.Port)) {
		return hostport, false
	}
	return host, strings.EqualFold(strings.TrimSuffix(host, "."), h.f.Host)
}

// placeholders finds each placeholder in the request's target and
// headers. One in the credential's own header, on a request to a host and
// rule the credential may go to, is replaced: the header becomes the
// credential's format with the secret. One anywhere else refuses the
// request; placeholders reports where and which credential.
func (h *handler) placeholders(r *http.Request, rule string) (where, name string, ok bool) {
	v := h.e.Vault
	if v.Empty() {
		return "", "", true
	}
	if n, found := v.FindString(r.RequestURI); found {
		return "the URL", n, false
	}
	for k, vals := range r.Header {
		if n, found := v.FindString(k); found {
			return "a header name", n, false
		}
		for _, val := range vals {
			n, found := v.FindString(val)
			if !found {
				continue
			}
			c := v.byName(n)
			if !strings.EqualFold(k, c.spec.Header) {
				return "header " + k, n, false
			}
			if !c.allowed(h.f.Host, rule) {
				return "a request to " + h.f.Host + " (rule " + rule + ")", n, false
			}
		}
	}
	for i := range v.creds {
		c := &v.creds[i]
		vals := r.Header.Values(c.spec.Header)
		for _, val := range vals {
			if indexFold([]byte(val), c.placeholder) >= 0 {
				r.Header.Set(c.spec.Header, strings.Replace(c.spec.Format, "{}", c.secret, 1))
				break
			}
		}
	}
	for _, t := range r.Trailer {
		for _, val := range t {
			if n, found := v.FindString(val); found {
				return "a trailer", n, false
			}
		}
	}
	return "", "", true
}

func (v *Vault) byName(name string) *cred {
	for i := range v.creds {
		if v.creds[i].spec.Name == name {
			return &v.creds[i]
		}
	}
	return nil
}

// leakError is a placeholder found in a body.
type leakError struct{ name string }

func (e *leakError) Error() string { return "credential " + e.name + ": placeholder in the body" }

// countBody is a request body that counts what it gives and, past the
// held part, scans the stream for placeholders.
type countBody struct {
	r    io.Reader
	c    io.Closer
	n    int64
	scan *scanner
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.scan != nil && n > 0 {
		if name, found := b.scan.feed(p[:n]); found {
			return 0, &leakError{name}
		}
	}
	return n, err
}

func (b *countBody) Close() error { return b.c.Close() }

// checkBody reads up to maxHeldBody of the body and refuses it if it holds
// a placeholder; the rest streams through a scanner that cuts the request
// off at one. nil for a request without a body.
func (h *handler) checkBody(r *http.Request) (*countBody, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if h.e.Vault.Empty() || h.e.NoSubstitute {
		return &countBody{r: r.Body, c: r.Body}, nil
	}
	held, err := io.ReadAll(io.LimitReader(r.Body, maxHeldBody+1))
	if err != nil {
		return nil, err
	}
	if name, found := h.e.Vault.Find(held); found {
		return nil, &leakError{name}
	}
	if len(held) <= maxHeldBody {
		r.ContentLength = int64(len(held))
		return &countBody{r: bytes.NewReader(held), c: r.Body}, nil
	}
	sc := newScanner(h.e.Vault)
	sc.feed(held[len(held)-min(len(held), sc.keep):])
	return &countBody{r: io.MultiReader(bytes.NewReader(held), &scanReader{r: r.Body, s: sc}), c: r.Body}, nil
}

// scanReader reads r through a scanner.
type scanReader struct {
	r io.Reader
	s *scanner
}

func (s *scanReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		if name, found := s.s.feed(p[:n]); found {
			return 0, &leakError{name}
		}
	}
	return n, err
}

// scanner finds placeholders across the chunks of a stream: it keeps the
// last bytes of what it saw, one placeholder long less one.
type scanner struct {
	v    *Vault
	keep int
	tail []byte
}

func newScanner(v *Vault) *scanner {
	return &scanner{v: v, keep: len(placeholderPrefix) + 40 - 1}
}

func (s *scanner) feed(b []byte) (string, bool) {
	buf := append(s.tail, b...)
	name, found := s.v.Find(buf)
	if len(buf) > s.keep {
		buf = buf[len(buf)-s.keep:]
	}
	s.tail = append(s.tail[:0], buf...)
	return name, found
}

// refuse writes the 403 that names the rule and the reason; it returns
// the status written.
func refuse(w http.ResponseWriter, rule, reason string) int {
	body := "nsgate refused this request (rule " + rule + "): " + printable(reason) + ".\n" +
		"This is a policy decision, not a network fault: retrying will not help. Ask the operator to allow what you need.\n"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Nsgate-Refusal", "request")
	w.Header().Set("X-Nsgate-Rule", rule)
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusForbidden)
	io.WriteString(w, body)
	return http.StatusForbidden
}

func printable(s string) string {
	b := make([]byte, 0, min(len(s), 300))
	for i := 0; i < len(s) && len(b) < 300; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		}
	}
	return string(b)
}

// recorder is the worker's ResponseWriter, counting the status and body
// bytes. Unwrap lets http.ResponseController reach the connection (for
// upgrades and flushes).
type recorder struct {
	http.ResponseWriter
	status      int
	n           int64
	upstreamErr error
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 || r.status < 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.n += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// countConn is the worker's connection: it reads the held bytes first and
// counts raw bytes each way.
type countConn struct {
	net.Conn
	held     []byte
	in, out  atomic.Int64
	closeOne sync.Once
}

func (c *countConn) Read(b []byte) (int, error) {
	if len(c.held) > 0 {
		n := copy(b, c.held)
		c.held = c.held[n:]
		c.in.Add(int64(n))
		return n, nil
	}
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

func (c *countConn) Close() error {
	var err error
	c.closeOne.Do(func() { err = c.Conn.Close() })
	return err
}

func (c *countConn) stats() Stats { return Stats{FromWorker: c.in.Load(), ToWorker: c.out.Load()} }

// oneConn is a net.Listener that hands out one connection, then blocks
// until that connection is closed (or hijacked and closed).
type oneConn struct {
	c      net.Conn
	given  atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func newOneConn(c net.Conn) *oneConn {
	l := &oneConn{closed: make(chan struct{})}
	l.c = &notifyConn{Conn: c, l: l}
	return l
}

func (l *oneConn) done() { l.once.Do(func() { close(l.closed) }) }

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.given.Swap(true) {
		return l.c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error   { l.done(); return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// notifyConn tells its listener when it is closed, also after a hijack.
type notifyConn struct {
	net.Conn
	l *oneConn
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.l.done()
	return err
}
