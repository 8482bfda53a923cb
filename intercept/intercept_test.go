package intercept

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/tlsca"
)

const secret = "s3cr3t-TOKEN-value-0123456789"

const testPolicy = `
version: 1
allow:
  - host: api.example.test
    ports: [443]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/repos/acme/*", "/echo", "/ws"]
      - methods: [POST]
        paths: ["/upload"]
  - host: other.example.test
    ports: [443]
    tls: terminate
credentials:
  - name: gh
    from: {env: GH_SECRET}
    placeholder_env: GH_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
`

// sink collects audit events.
type sink struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (s *sink) Log(e audit.Event) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, e)
	return uint64(len(s.evs))
}

func (s *sink) all() []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]audit.Event(nil), s.evs...)
}

// upstream is a fake TLS server for api.example.test that records what it
// receives.
type upstream struct {
	srv  *httptest.Server
	ca   *tlsca.CA
	mu   sync.Mutex
	seen []*http.Request
	auth []string
	// WebSocket: the messages the upstream received, the extension
	// offers it saw, and whether a frame came that broke the framing.
	wsMsgs []string
	wsExt  []string
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u.ca = ca
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r)
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		switch r.URL.Path {
		case "/echo":
			// Reflects what it got, secret included.
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			io.WriteString(w, "you sent: "+r.Header.Get("Authorization")+" proto "+r.Proto)
		case "/ws":
			if r.Header.Get("Upgrade") != "websocket" {
				http.Error(w, "no upgrade", 400)
				return
			}
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "websocket")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			u.mu.Lock()
			u.wsExt = append(u.wsExt, r.Header.Get("Sec-WebSocket-Extensions"))
			u.mu.Unlock()
			u.wsEcho(brw)
		default:
			io.WriteString(w, "ok "+string(body))
		}
	}))
	u.srv.EnableHTTP2 = true
	u.srv.Config.ErrorLog = quietLog
	u.srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Leaf("api.example.test")
	}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

type rig struct {
	t    *testing.T
	e    *Engine
	up   *upstream
	sink *sink
	addr string
	ph   string
}

func newRig(t *testing.T, mutate func(*Engine)) *rig {
	p, err := policy.Parse("t.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	e, err := NewEngine(p, func(k string) string {
		if k == "GH_SECRET" {
			return secret
		}
		return ""
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Roots = up.ca.Pool()
	if mutate != nil {
		mutate(e)
	}
	r := &rig{t: t, e: e, up: up, sink: &sink{}}
	r.ph = strings.TrimPrefix(e.Vault.WorkerEnv()[0], "GH_TOKEN=")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r.addr = ln.Addr().String()
	upAddr := up.srv.Listener.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first, _ := net.Dial("tcp", upAddr)
			go e.Serve(ctx, c, nil, Flow{Policy: p, Rule: "allow[0]", Host: "api.example.test", Port: 443, Seq: 7, Audit: r.sink,
				First: first, Dial: func(ctx context.Context) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "tcp", upAddr)
				}})
		}
	}()
	return r
}

// client is a worker's client that trusts the run's CA; h2 chooses ALPN.
func (r *rig) client(h2 bool) *http.Client {
	tc := &tls.Config{RootCAs: r.e.CA.Pool(), ServerName: "api.example.test"}
	tr := &http.Transport{
		TLSClientConfig: tc,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", r.addr)
		},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tc.NextProtos = []string{"http/1.1"}
	}
	r.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (r *rig) do(c *http.Client, method, url, auth, body string) (*http.Response, string) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (r *rig) requests(action string) []audit.Request {
	var out []audit.Request
	for _, e := range r.sink.all() {
		if q, ok := e.(audit.Request); ok && q.Action == action {
			out = append(out, q)
		}
	}
	return out
}

func (r *rig) credentialDenies() []audit.Credential {
	var out []audit.Credential
	for _, e := range r.sink.all() {
		if q, ok := e.(audit.Credential); ok {
			out = append(out, q)
		}
	}
	return out
}

func (r *rig) noSecretInAudit() {
	for _, e := range r.sink.all() {
		if s := strings.ToLower(strings.ReplaceAll(fmtEvent(e), " ", "")); strings.Contains(s, strings.ToLower(secret)) {
			r.t.Errorf("audit record holds the secret: %v", e)
		}
	}
}

func fmtEvent(e audit.Event) string {
	return strings.TrimSpace(strings.ReplaceAll(sprint(e), "\n", " "))
}

func TestSubstituteAndScrub(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		r := newRig(t, nil)
		c := r.client(h2)
		resp, body := r.do(c, "GET", "https://api.example.test/echo", "Bearer "+r.ph, "")
		if resp.StatusCode != 200 {
			t.Fatalf("h2=%v: status %d %s", h2, resp.StatusCode, body)
		}
		if want := "HTTP/2.0"; h2 && resp.Proto != want {
			t.Errorf("worker side proto %s, want %s", resp.Proto, want)
		}
		if got := r.up.auth[0]; got != "Bearer "+secret {
			t.Errorf("upstream got Authorization %q", got)
		}
		if strings.Contains(body, secret) || strings.Contains(resp.Header.Get("X-Echo"), secret) {
			t.Errorf("the worker saw the secret: %q %q", body, resp.Header.Get("X-Echo"))
		}
		if !strings.Contains(body, r.ph) || !strings.Contains(resp.Header.Get("X-Echo"), r.ph) {
			t.Errorf("echo not turned back into the placeholder: %q", body)
		}
		// Keep-alive: a second request on the same connection is
		// decided too.
		resp, _ = r.do(c, "DELETE", "https://api.example.test/repos/acme/app", "", "")
		if resp.StatusCode != 403 || resp.Header.Get("X-Nsgate-Rule") != "allow[0]" {
			t.Errorf("DELETE: status %d rule %q", resp.StatusCode, resp.Header.Get("X-Nsgate-Rule"))
		}
		if r.up.count() != 1 {
			t.Errorf("upstream saw %d requests, want 1", r.up.count())
		}
		allow, deny := r.requests("allow"), r.requests("deny")
		if len(allow) != 1 || allow[0].Path != "/echo" || allow[0].Status != 200 || allow[0].Rule != "allow[0].requests[0]" || allow[0].BytesIn == 0 {
			t.Errorf("allow records %+v", allow)
		}
		if len(deny) != 1 || deny[0].Method != "DELETE" || deny[0].Status != 403 {
			t.Errorf("deny records %+v", deny)
		}
		r.noSecretInAudit()
	}
}

func TestRefusals(t *testing.T) {
	r := newRig(t, nil)
	tests := []struct {
		why, method, url, auth, body, host string
		credential                         bool
	}{
		{why: "method not allowed", method: "PUT", url: "/repos/acme/app"},
		{why: "path not allowed", method: "GET", url: "/admin"},
		{why: "encoded slash", method: "GET", url: "/repos/acme%2fapp"},
		{why: "encoded dots", method: "GET", url: "/repos/acme/%2e%2e/secret"},
		{why: "overlong dot", method: "GET", url: "/repos/acme/%c0%ae%c0%ae"},
		{why: "placeholder in the query", method: "GET", url: "/repos/acme/app?t=PH", credential: true},
		{why: "placeholder in the path", method: "GET", url: "/repos/acme/PH", credential: true},
		{why: "placeholder in another header", method: "GET", url: "/repos/acme/app", auth: "", credential: true, host: "x-leak"},
		{why: "placeholder in the body", method: "POST", url: "/upload", body: "token=PH", credential: true},
		{why: "fronting by Host", method: "GET", url: "/repos/acme/app", host: "other.example.test"},
	}
	for _, h2 := range []bool{false, true} {
		c := r.client(h2)
		for _, tt := range tests {
			before := len(r.credentialDenies())
			req, _ := http.NewRequest(tt.method, "https://api.example.test"+strings.ReplaceAll(tt.url, "PH", r.ph), strings.NewReader(strings.ReplaceAll(tt.body, "PH", r.ph)))
			req.URL.Opaque = ""
			if tt.body == "" {
				req.Body = nil
			}
			switch tt.host {
			case "x-leak":
				req.Header.Set("X-Leak", r.ph)
			case "":
			default:
				req.Host = tt.host
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("%s h2=%v: %v", tt.why, h2, err)
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 403 {
				t.Errorf("%s h2=%v: status %d, want 403", tt.why, h2, resp.StatusCode)
			}
			if tt.credential && len(r.credentialDenies()) != before+1 {
				t.Errorf("%s h2=%v: no credential record", tt.why, h2)
			}
		}
	}
	if n := r.up.count(); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
	if d := r.requests("deny"); len(d) != 2*len(tests) {
		t.Errorf("%d deny records, want %d", len(d), 2*len(tests))
	}
	r.noSecretInAudit()
}

func TestMethodOverride(t *testing.T) {
	r := newRig(t, nil)
	c := r.client(false)
	req, _ := http.NewRequest("GET", "https://api.example.test/repos/acme/app", nil)
	req.Header.Set("X-HTTP-Method-Override", "DELETE")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || r.up.count() != 0 {
		t.Errorf("override: status %d, upstream %d", resp.StatusCode, r.up.count())
	}
}

// TestBodyMethodOverrides: POST /upload is allowed and DELETE is not; a
// body a lenient server reads a _method field from is refused whatever
// way it spells the field, and a body without one goes through.
func TestBodyMethodOverrides(t *testing.T) {
	r := newRig(t, nil)
	c := r.client(false)
	big := strings.Repeat(`"x",`, 300_000) // 1.2 MB, past the held MiB
	manyBoundaries := "; x=\"boundary=b\""
	part := "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n"
	for _, tt := range []struct {
		name, ct, body string
		refused        bool
		cut            bool // refused mid-stream (last: the upstream sees the request start, when is a race)
	}{
		{"no content type", "", "_method=DELETE", true, false},
		{"multipart/mixed", "multipart/mixed; boundary=XX", part, true, false},
		{"two content types", "text/plain\nmultipart/form-data; boundary=XX", part, true, false},
		{"json", "application/json", `{"_method":"DELETE"}`, true, false},
		{"two boundaries", "multipart/form-data; boundary=XX" + manyBoundaries, part, true, false},
		{"json without _method", "application/json", `{"note":"the method field"}`, false, false},
		{"big json without _method", "application/json", `{"a":[` + big + `"x"]}`, false, false},
		{"no content type, no _method", "", "note=hi", false, false},
		{"json past the held part", "application/json", `{"a":[` + big + `"x"],"\u005fmethod":"DELETE"}`, true, true},
	} {
		before := r.up.count()
		req, _ := http.NewRequest("POST", "https://api.example.test/upload", strings.NewReader(tt.body))
		for _, ct := range strings.Split(tt.ct, "\n") {
			if ct != "" {
				req.Header.Add("Content-Type", ct)
			}
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := r.up.count() - before
		if tt.cut && resp.StatusCode != 502 {
			t.Errorf("%s: status %d; want 502, the request cut off", tt.name, resp.StatusCode)
		}
		if tt.refused && !tt.cut && (resp.StatusCode != 403 || got != 0) {
			t.Errorf("%s: status %d, upstream saw %d; want 403 and none", tt.name, resp.StatusCode, got)
		}
		if !tt.refused && (resp.StatusCode == 403 || got != 1) {
			t.Errorf("%s: status %d, upstream saw %d; want it forwarded", tt.name, resp.StatusCode, got)
		}
	}
	d := r.requests("deny")
	for i := 0; i < 100 && len(d) < 6; i++ { // the last is logged as its handler ends
		waitABit()
		d = r.requests("deny")
	}
	if len(d) != 6 || !strings.Contains(d[4].Reason, "boundary") || !strings.Contains(d[5].Reason, "past the held part") {
		t.Errorf("%d deny records, want 6 (the fifth on boundaries, the sixth past the held part): %+v", len(d), d)
	}
}

func TestPinnedClientFailsClosed(t *testing.T) {
	r := newRig(t, nil)
	// A client that trusts only the real upstream's CA (pins it).
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: r.up.ca.Pool(), ServerName: "api.example.test"},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", r.addr)
		},
	}
	defer tr.CloseIdleConnections()
	_, err := (&http.Client{Transport: tr}).Get("https://api.example.test/repos/acme/app")
	if err == nil {
		t.Fatal("a client pinning another CA got through")
	}
	if r.up.count() != 0 {
		t.Errorf("upstream saw %d requests", r.up.count())
	}
	found := false
	for i := 0; i < 100 && !found; i++ {
		for _, e := range r.sink.all() {
			if l, ok := e.(audit.L7); ok && l.Action == "deny" && strings.Contains(l.Reason, "handshake failed") {
				found = true
			}
		}
		if !found {
			waitABit()
		}
	}
	if !found {
		t.Errorf("no l7 deny record for the failed handshake: %v", r.sink.all())
	}
}

func TestUpstreamUnverified(t *testing.T) {
	// Roots without the upstream's CA: the upstream is not trusted.
	r := newRig(t, func(e *Engine) { e.Roots = e.CA.Pool() })
	resp, body := r.do(r.client(false), "GET", "https://api.example.test/repos/acme/app", "Bearer "+r.ph, "")
	if resp.StatusCode != 502 {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	if strings.Contains(body, secret) || r.up.count() != 0 {
		t.Errorf("body %q, upstream %d", body, r.up.count())
	}
}

func TestSNIMismatch(t *testing.T) {
	r := newRig(t, nil)
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: "other.example.test", RootCAs: r.e.CA.Pool()})
	if err == nil {
		c.Close()
		t.Fatal("handshake with another SNI succeeded")
	}
}

func TestWebSocket(t *testing.T) {
	r := newRig(t, nil)
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: "api.example.test", RootCAs: r.e.CA.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.Write(clientFrame(wsText, true, []byte("hello")))
	if op, msg := readServerMsg(t, br); op != wsText || msg != "echo hello" {
		t.Errorf("after upgrade: op %d %q", op, msg)
	}
	// An upgrade to a path the rules refuse.
	c2, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: "api.example.test", RootCAs: r.e.CA.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET /wsx HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Errorf("refused upgrade: %v %v", resp, err)
	}
}

func TestPipelined(t *testing.T) {
	r := newRig(t, nil)
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: "api.example.test", RootCAs: r.e.CA.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Two requests in one write: the second is refused on its own.
	io.WriteString(c, "GET /repos/acme/app HTTP/1.1\r\nHost: api.example.test\r\n\r\nDELETE /repos/acme/app HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	br := bufio.NewReader(c)
	var codes []int
	for i := 0; i < 2; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 403 || r.up.count() != 1 {
		t.Errorf("codes %v, upstream %d", codes, r.up.count())
	}
}

func TestVaultNeverFormatsSecret(t *testing.T) {
	v, err := NewVault([]policy.Credential{{Name: "x", FromEnv: "X", PlaceholderEnv: "X", Hosts: []string{"a.test"}, Header: "A", Format: "{}"}},
		func(string) string { return secret }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{sprint(v), sprint(*v), v.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("formatted vault shows the secret: %s", s)
		}
	}
	_, err = NewVault([]policy.Credential{{Name: "x", FromEnv: "X"}}, func(string) string { return "short" }, nil)
	if err == nil || strings.Contains(err.Error(), "short\"") {
		t.Errorf("short secret: %v", err)
	}
}

func TestScrubAcrossReads(t *testing.T) {
	v, _ := NewVault([]policy.Credential{{Name: "x", FromEnv: "X", Format: "{}"}}, func(string) string { return secret }, nil)
	h := &handler{e: &Engine{Vault: v}}
	// A body that gives one byte per read: the secret straddles reads.
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(&oneByte{s: "a" + secret + "b" + secret})}
	h.scrubResponse(resp)
	b, _ := io.ReadAll(resp.Body)
	ph := v.creds[0].placeholder
	if string(b) != "a"+ph+"b"+ph {
		t.Errorf("scrubbed %q", b)
	}
}

type oneByte struct{ s string }

func (o *oneByte) Read(p []byte) (int, error) {
	if o.s == "" {
		return 0, io.EOF
	}
	p[0] = o.s[0]
	o.s = o.s[1:]
	return 1, nil
}

func TestScannerAcrossChunks(t *testing.T) {
	v, _ := NewVault([]policy.Credential{{Name: "x", FromEnv: "X", Format: "{}"}}, func(string) string { return secret }, nil)
	ph := v.creds[0].placeholder
	s := newScanner(v)
	data := "xxxx" + ph + "yyyy"
	found := false
	for i := 0; i < len(data); i += 7 {
		if s.feed([]byte(data[i:min(i+7, len(data))])) != nil {
			found = true
		}
	}
	if !found {
		t.Error("placeholder split across chunks not found")
	}
}

// TestScanReaderHoldsBack: a placeholder split across the reads of a
// streamed body is cut off before any byte of it is given on.
func TestScanReaderHoldsBack(t *testing.T) {
	v, _ := NewVault([]policy.Credential{{Name: "x", FromEnv: "X", Format: "{}"}}, func(string) string { return secret }, nil)
	ph := v.creds[0].placeholder
	data := strings.Repeat("z", 100) + ph + strings.Repeat("y", 100)
	sr := &scanReader{r: &oneByte{s: data}, scans: []*scanner{newScanner(v)}, v: v}
	got, err := io.ReadAll(sr)
	var le *leakError
	if !errors.As(err, &le) || le.name != "x" {
		t.Fatalf("err %v, want the placeholder found", err)
	}
	if strings.Contains(string(got), ph[:len(placeholderPrefix)]) {
		t.Errorf("gave %q: part of the placeholder went on", got)
	}
	// Without one, everything comes through.
	sr = &scanReader{r: &oneByte{s: "abc" + strings.Repeat("q", 200)}, scans: []*scanner{newScanner(v)}, v: v}
	if got, err := io.ReadAll(sr); err != nil || string(got) != "abc"+strings.Repeat("q", 200) {
		t.Errorf("clean stream: %q %v", got, err)
	}
}

// TestScrubHeader: secrets in header values (any case) become the
// placeholder; a header whose name holds one goes.
func TestScrubHeader(t *testing.T) {
	v, _ := NewVault([]policy.Credential{{Name: "x", FromEnv: "X", Format: "{}"}}, func(string) string { return secret }, nil)
	ph := v.creds[0].placeholder
	h := http.Header{}
	h.Set("X-Echo", "Bearer "+secret)
	h.Set("X-Upper", strings.ToUpper(secret))
	h.Set("Link", "<https://x/?t="+secret+">; rel=preload")
	h.Set("X-Bearer-"+secret, "1")
	scrubHeader(h, v)
	if h.Get("X-Echo") != "Bearer "+ph || h.Get("X-Upper") != ph || !strings.Contains(h.Get("Link"), ph) {
		t.Errorf("values not scrubbed: %v", h)
	}
	for k := range h {
		if strings.Contains(strings.ToLower(k), strings.ToLower(secret)) {
			t.Errorf("header %q kept", k)
		}
	}
}

func TestFormOverrides(t *testing.T) {
	for _, tt := range []struct {
		ct, body string
		want     []string
	}{
		{"application/x-www-form-urlencoded", "a=1&_method=DELETE", []string{"DELETE"}},
		{"application/x-www-form-urlencoded; charset=utf-8", "%5Fmethod=put&b=2", []string{"put"}},
		{"application/x-www-form-urlencoded", "_METHOD=PATCH", []string{"PATCH"}},
		{"application/x-www-form-urlencoded", "method=DELETE", nil},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"DELETE"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n--XX--\r\n", nil},
		{"text/plain", "_method=DELETE", nil},
		// Malformed parameters: a lenient server still reads the form.
		{"application/x-www-form-urlencoded; charset", "_method=DELETE", []string{"DELETE"}},
		{"Application/X-WWW-Form-Urlencoded ; a=\"b", "_method=DELETE", []string{"DELETE"}},
		{" application/x-www-form-urlencoded;;", "_method=DELETE", []string{"DELETE"}},
		{"multipart/form-data; boundary=XX; x", "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		// The readings of lenient servers, each a way past a strict one.
		{"", "_method=DELETE", []string{"DELETE"}},                                      // Rack: a POST without a type is a form
		{"application/x-www-form-urlencoded", "a=1;_method=DELETE", []string{"DELETE"}}, // Rack 2 splits on ';'
		{"application/x-www-form-urlencoded", ".method=DELETE", []string{"DELETE"}},     // PHP reads '.' as '_'
		{"application/x-www-form-urlencoded", "+_method=DELETE", []string{"DELETE"}},    // PHP drops leading spaces
		{"application/x-www-form-urlencoded", "_method%00x=DELETE", []string{"DELETE"}}, // PHP cuts at a NUL
		{"multipart/mixed; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"DELETE"}},
		{"multipart/related; boundary=XX", "--XX\r\nContent-ID: _method\r\n\r\nDELETE\r\n--XX--\r\n", []string{"DELETE"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: attachment; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"DELETE"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=_method; x\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		// Rack's greedy match takes the last boundary, PHP the first
		// "boundary" even inside another name, PHP keeps spaces and
		// quotes: such a header is refused, and so is a body the strict
		// parse gives up on that a lenient one reads on.
		{"multipart/form-data; boundary=AA; x=\"boundary=BB\"", "--BB\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--BB--\r\n", []string{"<refused>"}},
		{"multipart/form-data; xboundary=BB; boundary=AA", "--BB\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--BB--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary= \"XX\"", "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=\"a,b\"", "--a,b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--a,b--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=\"XX\"", "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"DELETE"}},
		{"multipart/form-data; boundary=XX", " --XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nbadline\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"x\"; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv\r\n", []string{"<refused>"}},
		// PHP ends a part at a bare LF before the delimiter, Rack at the
		// delimiter anywhere: either is refused.
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhello\n--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhello--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		// PHP reads single quotes; Go prefers name*, PHP ignores it; Rack
		// finds a Content-Disposition inside another header: refused.
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name='_method'\r\n\r\nDELETE\r\n--XX--\r\n", []string{"DELETE"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name*=UTF-8''title; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		{"multipart/form-data; boundary=XX", "--XX\r\nX-Note: Content-Disposition: form-data; name=\"_method\"\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
		// The browsers' boundaries hold the word itself, after the name.
		{"multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW", "------WebKitFormBoundary7MA4YWxkTrZu0gW\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n------WebKitFormBoundary7MA4YWxkTrZu0gW--\r\n", nil},
		{"multipart/form-data; boundary=----geckoformboundary1f2e3d", "------geckoformboundary1f2e3d\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n------geckoformboundary1f2e3d--\r\n", []string{"DELETE"}},
		{"multipart/form-data;boundary=Boundary_1_12345_1234567890", "--Boundary_1_12345_1234567890\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n--Boundary_1_12345_1234567890--\r\n", nil},
		{"multipart/form-data; Boundary=XX; x=boundary", "--XX\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n--XX--\r\n", []string{"<refused>"}},
		{"application/x-www-form-urlencoded", "%5B_method%5D=DELETE", []string{"DELETE"}}, // Rack strips the brackets
		{"application/x-www-form-urlencoded", "_method]=DELETE", []string{"DELETE"}},      // and a trailing one
		{"application/x-www-form-urlencoded x", "_method=DELETE", []string{"DELETE"}},     // PHP stops the type at a space
		// JSON's top-level _method (Laravel), any "/json" type.
		{"application/json", `{"a":1,"_method":"DELETE"}`, []string{"DELETE"}},
		{"text/plain; x=/json", `{"\u005fmethod":"PUT","_method":"DELETE"}`, []string{"PUT", "DELETE"}},
		{"application/vnd.api+json", `{"a":{"_method":"DELETE"},"_method":1}`, nil},
		{"application/json", `[{"_method":"DELETE"}]`, nil},
		{"multipart/form-data", "--XX\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n", []string{"<refused>"}},
	} {
		// "<refused>": the request is refused whatever the rules allow
		// (formsOf's error, or the "" no rule allows).
		forms, err := formsOf(http.MethodPost, []string{tt.ct})
		var got []string
		if err != nil {
			got = []string{"<refused>"}
		}
		for _, f := range forms {
			for _, v := range f.overrides([]byte(tt.body), true) {
				if v == "" {
					v = "<refused>"
				}
				got = append(got, v)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s %q: %q, want %q", tt.ct, tt.body, got, tt.want)
		}
	}
}

func TestUnpct(t *testing.T) {
	for in, want := range map[string]string{"a%6eb": "anb", "%256e": "n", "100%": "100%", "%zz": "%zz", "%4": "%4", "x%41": "xA"} {
		if got := string(unpct([]byte(in))); got != want {
			t.Errorf("unpct(%q) = %q, want %q", in, got, want)
		}
	}
	if unpct([]byte("plain")) != nil {
		t.Error("no % gives nil")
	}
}

func FuzzUnpctAndForm(f *testing.F) {
	f.Add([]byte("_method=%44ELETE&%"), "multipart/form-data; boundary=a")
	f.Fuzz(func(t *testing.T, b []byte, ct string) {
		unpct(b)
		forms, _ := formsOf(http.MethodPost, []string{ct, "text/plain"})
		for _, f := range append(forms, bodyForm{kind: formURLEncoded}, bodyForm{kind: formJSON}) {
			f.overrides(b, true)
			f.overrides(b, false)
		}
	})
}

// TestReplaceFoldPlaceholderHoldsSecret: a secret that its own
// placeholder contains (a short secret of hex digits) is replaced once,
// not again inside the placeholder put in its place.
func TestReplaceFoldPlaceholderHoldsSecret(t *testing.T) {
	ph := placeholderPrefix + "0123456789abcdef0123456789abcdef01234567"
	sec := "89ABCDEF01"
	got := replaceFold("x "+sec+" y "+strings.ToLower(sec), []string{sec}, []string{ph})
	if want := "x " + ph + " y " + ph; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestFoldPatIndex: the anchored any-case search finds what a plain
// any-case search finds, at the same offset, for anchors of every kind
// (a rare byte, a digit, a letter whose two cases are both scanned).
func TestFoldPatIndex(t *testing.T) {
	for _, sec := range []string{secret, "abcdefghij", "0123456789", "ab~cd", "QqQqQqQq"} {
		p := newFoldPat(sec)
		for _, hay := range []string{"", sec, "x" + strings.ToUpper(sec), "a" + strings.ToLower(sec) + "b", strings.Repeat("q", 50) + sec[:len(sec)-1], strings.Repeat(sec[:len(sec)-1]+"_", 5) + strings.ToUpper(sec), "qQ" + sec} {
			want := indexFoldAny(hay, sec)
			if got := p.index([]byte(hay)); got != want {
				t.Errorf("%q in %q: %d, want %d", sec, hay, got, want)
			}
		}
	}
}

// TestScrubBodyAnyCase: the body scrub replaces the secret in any ASCII
// case, also across reads (the chunks split it), and leaves the rest as
// it was.
func TestScrubBodyAnyCase(t *testing.T) {
	ph := placeholderPrefix + "0123456789abcdef0123456789abcdef01234567"
	mixed := []byte(secret)
	for i := range mixed {
		if i%2 == 0 {
			mixed[i] = strings.ToUpper(string(mixed[i]))[0]
		}
	}
	body := "a " + secret + " b " + strings.ToUpper(secret) + " c " + strings.ToLower(secret) + " d " + string(mixed) + " e"
	want := "a " + ph + " b " + ph + " c " + ph + " d " + ph + " e"
	for _, chunk := range []int{1, 3, 7, len(body)} {
		sb := &scrubBody{r: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), echoes: []*echoSearch{newEchoSearch(secret, ph)}, keep: len(secret) - 1}
		if chunk > 1 {
			sb.r = io.NopCloser(&chunkReader{s: body, n: chunk})
		}
		got, err := io.ReadAll(sb)
		if err != nil || string(got) != want {
			t.Errorf("chunks of %d: %q, %v; want %q", chunk, got, err, want)
		}
	}
}

// chunkReader gives s n bytes at a time.
type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

// FuzzFoldPat: the anchored search agrees with the plain any-case one.
func FuzzFoldPat(f *testing.F) {
	f.Add("s3cr3t-TOKEN", "xx S3CR3T-token yy")
	f.Add("QqQq", "qqqQqQqQ")
	f.Fuzz(func(t *testing.T, sec, hay string) {
		if sec == "" || strings.ContainsFunc(sec, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
			return // a secret is printable ASCII (NewVault)
		}
		p := newFoldPat(sec)
		if got, want := p.index([]byte(hay)), indexFoldAny(hay, sec); got != want {
			t.Fatalf("%q in %q: %d, want %d", sec, hay, got, want)
		}
	})
}

// TestScrubEchoForms: the body scrub replaces the secret in every form a
// client decodes back to it (each of echoCodes, and the mixes real
// encoders write: Python's quote keeping '/', PHP's urlencode, .NET's
// JSON, html/template in a script and in an attribute, PHP's and
// Python's HTML escaping), in any case, across reads, with the
// placeholder.
func TestScrubEchoForms(t *testing.T) {
	ph := placeholderPrefix + "0123456789abcdef0123456789abcdef01234567"
	testEchoForms(t, "it13SECRET/abc+def=0123456789~xyz<&>", ph, []string{
		"it13SECRET/abc%2Bdef%3D0123456789~xyz%3C%26%3E",                         // Python quote, safe='/'
		"it13SECRET%2Fabc%2Bdef%3D0123456789%7Exyz%3C%26%3E",                     // PHP urlencode
		`it13SECRET/abc\u002Bdef=0123456789~xyz\u003C\u0026\u003E`,               // .NET System.Text.Json
		`it13SECRET\/abc\u002bdef\u003d0123456789~xyz\u003c\u0026\u003e`,         // html/template in <script>
		"it13SECRET/abc&#43;def&#61;0123456789~xyz&lt;&amp;&gt;",                 // html/template, unquoted attribute
		utf16(`it13SECRET/abc\u002Bdef=0123456789~xyz\u003C\u0026\u003E`, false), // .NET's JSON in UTF-16
		utf16("it13SECRET%2Fabc%2Bdef%3D0123456789%7Exyz%3C%26%3E", true),        // UTF-16BE, percent inside
		"it13SECRET&sol;abc&plus;def&equals;0123456789~xyz&lt;&amp;&gt;",         // PHP htmlentities, HTML5
		`it13SECRET\\\/abc+def=0123456789~xyz\\u003c\\u0026\\u003e`,              // JSON in a JSON string
		"it13SECRET%252Fabc%252Bdef%253D0123456789~xyz%253C%2526%253E",           // a URL in a query
		"it13SECRET/abc+def=3D0123456789~xyz=3C=26=3E",                           // quoted-printable
	})
	testEchoForms(t, `it14Q"uote'KEY-98765`, ph, []string{
		"it14Q&quot;uote&#039;KEY-98765", // PHP htmlspecialchars
		"it14Q&quot;uote&#x27;KEY-98765", // Python html.escape
	})
	// No letter or digit to anchor on: each whole form alone.
	testEchoForms(t, "!@#$%^&*()~/+=", ph, nil)
}

func testEchoForms(t *testing.T, sec, ph string, mixes []string) {
	t.Helper()
	es := newEchoSearch(sec, ph)
	var forms []string
	for _, code := range echoCodes {
		forms = append(forms, code.encode(sec))
	}
	forms = append(forms, mixes...)
	var body strings.Builder
	for i, f := range forms {
		if i%2 == 1 {
			f = strings.ToLower(f)
		}
		body.WriteString("<" + f + ">\n")
	}
	sb := &scrubBody{r: io.NopCloser(&chunkReader{s: body.String(), n: 5}), echoes: []*echoSearch{es}, keep: es.maxLen - 1}
	got, err := io.ReadAll(sb)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forms {
		if indexFoldAny(string(got), f) >= 0 {
			t.Errorf("%q: the form %q is still in the scrubbed body:\n%q", sec, f, got)
		}
	}
	if n := strings.Count(string(got), ph) + strings.Count(string(got), utf16(ph, false)) + strings.Count(string(got), utf16(ph, true)); n < len(forms)-2 {
		t.Errorf("%q: %d placeholders in the scrubbed body for %d forms:\n%q", sec, n, len(forms), got)
	}
}

// FuzzEchoSearch: whatever the body, the scrub does not panic, and what
// it returns holds no echo of the secret as it is (any case) or in any of
// echoCodes' forms.
func FuzzEchoSearch(f *testing.F) {
	f.Add("s3cr3t/TOKEN+x=", "a s3cr3t%2FTOKEN%2bx%3D b s3cr3t\\/token&#43;x&#x3D; c")
	f.Add("!@#$%^&*", "!%40#&#36;%^&*")
	f.Fuzz(func(t *testing.T, sec, hay string) {
		if len(sec) < 1 || len(sec) > 64 || strings.ContainsFunc(sec, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
			return
		}
		ph := placeholderPrefix + "0123456789abcdef0123456789abcdef01234567"
		if strings.Contains(ph, strings.ToLower(sec)) {
			return // a secret the placeholder holds: found again in it
		}
		es := newEchoSearch(sec, ph)
		out, _ := es.replace([]byte(hay))
		// And streamed, in chunks of a size the input picks.
		sb := &scrubBody{r: io.NopCloser(&chunkReader{s: hay, n: 1 + len(hay)%7}), echoes: []*echoSearch{es}, keep: es.maxLen - 1}
		streamed, err := io.ReadAll(sb)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range [][]byte{out, streamed} {
			for _, code := range echoCodes {
				if form := code.encode(sec); indexFoldAny(string(o), form) >= 0 && !strings.Contains(strings.ToLower(code.encode(ph)), strings.ToLower(form)) {
					t.Fatalf("secret %q: form %q left in %q (from %q)", sec, form, o, hay)
				}
			}
		}
	})
}

// TestScrubBodyHoldsOnlyAPossibleEcho: a stream of small events goes
// through as each comes (nothing held that cannot start an echo), and only
// the tail that may be the start of one is held until more comes.
func TestScrubBodyHoldsOnlyAPossibleEcho(t *testing.T) {
	ph := placeholderPrefix + "0123456789abcdef0123456789abcdef01234567"
	sec := "it13SECRET/abc+def=0123456789~xyz"
	es := newEchoSearch(sec, ph)
	pr, pw := io.Pipe()
	sb := &scrubBody{r: pr, echoes: []*echoSearch{es}, keep: es.maxLen - 1}
	buf := make([]byte, 4096)
	read := func(want string) {
		t.Helper()
		got := ""
		for len(got) < len(want) {
			n, err := sb.Read(buf)
			if err != nil {
				t.Fatalf("read: %v (got %q, want %q)", err, got, want)
			}
			got += string(buf[:n])
		}
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	go func() {
		pw.Write([]byte("data: {\"delta\": \"hello\"}\n\n"))
		pw.Write([]byte("data: {\"delta\": \"world it13SEC"))
		pw.Write([]byte("RET%2Fabc+def=0123456789~xyz\"}\n\n"))
		pw.Close()
	}()
	read("data: {\"delta\": \"hello\"}\n\n") // the first event whole, at once
	read("data: {\"delta\": \"world ")       // up to what may begin the secret
	read(ph + "\"}\n\n")
}
