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
	"slices"
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
	// maxHeldTotal bounds the request bodies held at once in a run, over
	// every flow and stream; past it a request that would hold one gets a
	// 503 (docs/credentials.md).
	maxHeldTotal = 32 << 20
	// bodyTimeout bounds reading the held part of a request body.
	bodyTimeout = 30 * time.Second
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
	// NoScrub, for the lab's --break only, leaves what comes back as it
	// is: no scrub of the secret, no refused encoding, Range passed on.
	NoScrub bool

	held atomic.Int64 // request body bytes held now (maxHeldTotal)
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
		ForceAttemptHTTP2: true,
		// Where a credential may go, nsgate asks for gzip and inflates
		// it itself (scrubResponse), reading every Content-Encoding the
		// upstream sends; the transport's own handling reads the first.
		DisableCompression:  e.Vault.forHost(f.Host),
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
				// nsgate asks for gzip itself and inflates it
				// (scrubResponse), so an echoed secret is seen in clear.
				pr.Out.Header.Set("Accept-Encoding", "gzip")
				// A range of the response could hold part of an
				// echoed secret, which no scrub recognises: the
				// worker gets the whole response.
				if !e.NoScrub {
					pr.Out.Header.Del("Range")
					pr.Out.Header.Del("If-Range")
				}
			}
		},
		ModifyResponse: h.scrubResponse,
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
	if h.e.scrubs() {
		rec.scrub = h.e.Vault
	}
	ev := audit.Request{Action: "deny", FlowSeq: f.Seq, Method: r.Method, Host: f.Host, Rule: f.Rule}
	defer func() { f.Audit.Log(ev) }()

	if host, ok := h.authority(r.Host); !ok {
		ev.Reason = "fronting: Host/:authority " + strconv.Quote(clipName(host)) + " is not the flow's name " + f.Host + " (its SNI)"
		ev.Status = refuse(rec, f.Rule, ev.Reason)
		return
	}
	if why := h.checkHeaders(r); why != "" {
		ev.Reason = why
		ev.Status = refuse(rec, f.Rule, ev.Reason)
		return
	}
	var overrides []string
	var names []string // in order, for a reason that does not change run to run
	for name := range r.Header {
		if policy.MethodOverrideHeader(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		overrides = append(overrides, r.Header[name]...)
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
	body, err := h.checkBody(rec, r)
	if body != nil {
		defer body.release()
	}
	if err != nil {
		var le *leakError
		switch {
		case errors.As(err, &le) && le.name == "":
			ev.Reason = le.where
			ev.Status = refuse(rec, f.Rule, ev.Reason)
		case errors.As(err, &le):
			ev.Reason = "credential " + le.name + ": placeholder in " + le.where + ", where it may not go"
			f.Audit.Log(audit.Credential{Action: "deny", FlowSeq: f.Seq, Credential: le.name, Host: f.Host, Where: le.where, Reason: ev.Reason})
			ev.Status = refuse(rec, "credential", ev.Reason)
		case errors.Is(err, errHeldBudget):
			ev.Reason = err.Error()
			ev.Status = refuseBusy(rec, f.Rule, ev.Reason)
		default:
			ev.Reason = "reading the request body: " + err.Error()
			ev.Status = refuse(rec, f.Rule, ev.Reason)
		}
		return
	}
	if body != nil && len(body.overrides) > 0 && !h.e.NoPathCheck {
		d = f.Policy.DecideRequest(f.Rule, policy.Request{Method: r.Method, Target: r.RequestURI, Overrides: append(overrides, body.overrides...)})
		ev.Rule = d.Rule
		if d.Verdict != policy.Allow {
			ev.Reason = d.Reason + " (a _method field in the form body)"
			ev.Status = refuse(rec, d.Rule, ev.Reason)
			return
		}
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
	if ws == nil || ws.relay == nil {
		// The response's trailers are in rec's header now, sent after
		// this returns: scrub them too, also when a WebSocket was asked
		// for and the upstream answered without switching (an Upgrade
		// header alone must not turn the trailers' scrub off).
		rec.scrubHeader()
	}
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
	if le := body.leakFound(); le != nil {
		// The scan of the streamed part of the body cut the request
		// off before it reached the upstream whole.
		ev.Action = "deny"
		if le.name == "" {
			ev.Reason = le.where + " (the request was cut off)"
			return
		}
		ev.Reason = "credential " + le.name + ": placeholder in " + le.where + ", where it may not go (the request was cut off)"
		f.Audit.Log(audit.Credential{Action: "deny", FlowSeq: f.Seq, Credential: le.name, Host: f.Host, Where: le.where, Reason: ev.Reason})
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
	if n, found := v.Find(unpct([]byte(r.RequestURI))); found {
		return "the URL (percent-encoded)", n, false
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
			if c.phPat.index([]byte(val)) >= 0 {
				r.Header.Set(c.spec.Header, strings.Replace(c.spec.Format, "{}", c.secret, 1))
				break
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

// leakError is a placeholder found in a request's body or trailers.
type leakError struct{ name, where string }

func (e *leakError) Error() string { return "credential " + e.name + ": placeholder in " + e.where }

// errHeldBudget refuses a request whose body would take the run past
// maxHeldTotal held bytes.
var errHeldBudget = errors.New("nsgate holds too many request bodies at once (" + strconv.Itoa(maxHeldTotal>>20) + " MiB in the run): retry shortly")

// countBody is a request body that counts what it gives and, past the
// held part, scans the stream for placeholders. leak is set when the scan
// cut it off; overrides are the _method fields of a held form body.
type countBody struct {
	r         io.Reader
	c         io.Closer
	n         int64
	leak      *leakError
	overrides []string
	e         *Engine
	charged   int64
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	var le *leakError
	if errors.As(err, &le) && b.leak == nil {
		b.leak = le
	}
	return n, err
}

func (b *countBody) Close() error { return b.c.Close() }

// leakFound is what cut the body off, or nil (also for a nil body).
func (b *countBody) leakFound() *leakError {
	if b == nil {
		return nil
	}
	return b.leak
}

// release gives the held bytes back to the run's budget.
func (b *countBody) release() {
	if b.charged > 0 {
		b.e.held.Add(-b.charged)
		b.charged = 0
	}
}

// checkBody reads up to maxHeldBody of the body, within bodyTimeout and
// the run's budget of held bytes, when there is something to check in it:
// placeholders (any case, also percent-encoded) refuse it, and a form's
// _method fields are returned for the request rules. A body read whole has
// its trailers checked for placeholders too. The rest streams through a
// scanner that holds back what could be the start of a placeholder and
// cuts the request off at one (and checks the trailers at its end). nil
// for a request without a body.
func (h *handler) checkBody(w http.ResponseWriter, r *http.Request) (*countBody, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	scan := !h.e.Vault.Empty() && !h.e.NoSubstitute
	var forms []bodyForm
	if !h.e.NoPathCheck {
		var err error
		if forms, err = formsOf(r.Method, r.Header.Values("Content-Type")); err != nil {
			return nil, err
		}
	}
	form := len(forms) > 0
	if !scan && !form {
		return &countBody{r: r.Body, c: r.Body}, nil
	}
	// A compressed body: neither the placeholder scan nor the _method
	// reading sees into it, and a server may inflate it. Refused where it
	// matters: on a host a credential may go to, and where methods are
	// judged and the body is one a server reads _method from. Elsewhere it
	// goes on unread (OpenTelemetry, Sentry and Elasticsearch clients
	// compress their uploads): a placeholder in it is not seen there.
	if codings := contentCodings(r.Header); len(codings) > 0 {
		if h.creds || form && h.f.Policy.HasRequests(h.f.Rule) {
			return nil, errors.New("a request body in Content-Encoding " + strconv.Quote(clipName(strings.Join(codings, ", "))) + " is not forwarded where nsgate checks bodies: it cannot read into it")
		}
		return &countBody{r: r.Body, c: r.Body}, nil
	}
	want := int64(maxHeldBody + 1)
	if r.ContentLength >= 0 && r.ContentLength < want {
		want = r.ContentLength + 1
	}
	cb := &countBody{c: r.Body, e: h.e}
	if h.e.held.Add(want) > maxHeldTotal {
		h.e.held.Add(-want)
		return nil, errHeldBudget
	}
	cb.charged = want
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	held, err := io.ReadAll(io.LimitReader(r.Body, want))
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		return cb, err
	}
	whole := int64(len(held)) < want
	if scan {
		if name, found := h.e.Vault.Find(held); found {
			return cb, &leakError{name, "body"}
		}
		if name, found := h.e.Vault.Find(unpct(held)); found {
			return cb, &leakError{name, "body (percent-encoded)"}
		}
		if whole {
			if le := trailerLeak(h.e.Vault, r.Trailer); le != nil {
				return cb, le
			}
		}
	}
	for _, f := range forms {
		// A form's _method fields in the held part (all of it, or the
		// first MiB, parsed leniently) go to the request rules.
		cb.overrides = append(cb.overrides, f.overrides(held, whole)...)
	}
	if whole {
		r.ContentLength = int64(len(held))
		cb.r = bytes.NewReader(held)
		return cb, nil
	}
	if slices.ContainsFunc(forms, func(f bodyForm) bool { return f.kind == formURLEncoded }) {
		// A form of fields over a MiB is refused rather than judged in
		// part: a field past the held part could override the method.
		return cb, errors.New("a form body over " + strconv.Itoa(maxHeldBody>>20) + " MiB (application/x-www-form-urlencoded) is not forwarded: its _method fields cannot all be judged")
	}
	sr := &scanReader{r: r.Body, trailer: r.Trailer}
	if scan {
		sr.v = h.e.Vault
		sr.scans = append(sr.scans, newScanner(h.e.Vault))
	}
	for _, f := range forms {
		// A multipart or JSON body past the held part may not name a
		// _method field: it is cut off if it does.
		switch f.kind {
		case formMultipart:
			sr.scans = append(sr.scans, methodFieldScanner())
		case formJSON:
			sr.scans = append(sr.scans, jsonFieldScanner())
		}
	}
	for _, sc := range sr.scans {
		sc.feed(held[len(held)-min(len(held), sc.keep):])
	}
	cb.r = io.MultiReader(bytes.NewReader(held), sr)
	return cb, nil
}

// trailerLeak finds a placeholder in a request's trailers.
func trailerLeak(v *Vault, tr http.Header) *leakError {
	for k, vals := range tr {
		if n, found := v.FindString(k); found {
			return &leakError{n, "a trailer name"}
		}
		for _, val := range vals {
			if n, found := v.FindString(val); found {
				return &leakError{n, "trailer " + k}
			}
		}
	}
	return nil
}

// scanReader reads r through its scanners. It holds back the last bytes
// of what it read, which could be the start of what a scanner looks for,
// until more comes or r ends; at the end it checks the request's trailers
// for placeholders (v; nil: no placeholder check).
type scanReader struct {
	r       io.Reader
	scans   []*scanner
	trailer http.Header
	v       *Vault
	pend    []byte // read and scanned, held back
	out     []byte // may be given (a view of outBuf)
	outBuf  []byte
	err     error
}

func (s *scanReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		before := len(s.pend)
		var err error
		s.pend, err = readMore(s.r, s.pend)
		if n := len(s.pend) - before; n > 0 {
			for _, sc := range s.scans {
				if le := sc.feed(s.pend[before:]); le != nil {
					s.pend, s.err = nil, le
					return 0, s.err
				}
			}
		}
		if err == io.EOF && s.v != nil {
			if le := trailerLeak(s.v, s.trailer); le != nil {
				s.pend, s.err = nil, le
				return 0, s.err
			}
		}
		cut := len(s.pend)
		if err == nil {
			keep := 0
			for _, sc := range s.scans {
				keep = max(keep, sc.keep)
			}
			cut = max(0, len(s.pend)-keep)
		}
		s.outBuf = append(s.outBuf[:0], s.pend[:cut]...)
		s.out = s.outBuf
		s.pend = append(s.pend[:0], s.pend[cut:]...)
		if err != nil {
			s.err = err
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// scanner finds what find looks for across the chunks of a stream: it
// keeps the last keep bytes of what it saw (what it looks for, one byte
// short).
type scanner struct {
	find func([]byte) *leakError
	keep int
	tail []byte
}

// newScanner looks for v's placeholders.
func newScanner(v *Vault) *scanner {
	return &scanner{keep: len(placeholderPrefix) + 40 - 1, find: func(b []byte) *leakError {
		if name, found := v.Find(b); found {
			return &leakError{name, "body"}
		}
		return nil
	}}
}

// The spellings of a _method field name a scanner refuses past the held
// part of a body, in lower case: in a multipart part's headers (also
// PHP's ".method" and percent-encoded), and in JSON (also a key whose
// letters are \u escapes, which encoders never write for these letters).
var (
	multipartFieldSpellings = []string{"_method", "%5fmethod", "%2emethod", `=.method`, `".method`, ": .method", ":.method"}
	jsonFieldSpellings      = []string{`_method"`, `.method"`, `\u005f`, `\u002e`, `\u006d`, `\u004d`, `\u0065`, `\u0045`, `\u0074`, `\u0054`, `\u0068`, `\u0048`, `\u006f`, `\u004f`, `\u0064`, `\u0044`}
)

// fieldScanner looks for any of spellings (lower case) in a body, any case.
func fieldScanner(spellings []string) *scanner {
	keep := 0
	for _, sp := range spellings {
		keep = max(keep, len(sp)-1)
	}
	return &scanner{keep: keep, find: func(b []byte) *leakError {
		l := bytes.ToLower(b)
		for _, sp := range spellings {
			if bytes.Contains(l, []byte(sp)) {
				return &leakError{where: "a _method field past the held part of a form body"}
			}
		}
		return nil
	}}
}

// methodFieldScanner looks for a _method field name in a multipart body.
func methodFieldScanner() *scanner { return fieldScanner(multipartFieldSpellings) }

// jsonFieldScanner looks for a _method member name in a JSON body.
func jsonFieldScanner() *scanner { return fieldScanner(jsonFieldSpellings) }

func (s *scanner) feed(b []byte) *leakError {
	buf := append(s.tail, b...)
	le := s.find(buf)
	if len(buf) > s.keep {
		buf = buf[len(buf)-s.keep:]
	}
	s.tail = append(s.tail[:0], buf...)
	return le
}

// refuseBusy writes a 503 for a request nsgate cannot hold now.
func refuseBusy(w http.ResponseWriter, rule, reason string) int {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Nsgate-Refusal", "busy")
	w.Header().Set("X-Nsgate-Rule", rule)
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, "nsgate: "+printable(reason)+"\n")
	return http.StatusServiceUnavailable
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
	// scrub, when set, is scrubbed out of every header the worker gets:
	// an informational (1xx) response's, the final one's and the
	// trailers (scrubHeader after the proxy returns).
	scrub *Vault
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 || r.status < 200 {
		r.status = code
	}
	r.scrubHeader()
	r.ResponseWriter.WriteHeader(code)
}

// scrubHeader scrubs the secrets out of the header the worker gets next.
func (r *recorder) scrubHeader() {
	if r.scrub != nil {
		scrubHeader(r.ResponseWriter.Header(), r.scrub)
	}
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
