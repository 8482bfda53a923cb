//go:build integration

package integration

// Attacks on the credential broker (docs/credentials.md), written by an
// independent tester. Each subcase is one attempt; a FINDING error means
// the attempt got through (the secret reached the worker, the placeholder
// went somewhere it may not, a refused request reached the upstream).
// Run: make build && go test -tags integration -count=1 -run TestAttackCreds -v ./integration/

import (
	"bytes"
	"compress/zlib"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/tlsca"
)

const attackPort = 9461

// attackUpstream is a hostile-but-plausible api.example.test: each path is
// one way an upstream can echo what it received.
type attackUpstream struct {
	ca *tlsca.CA
	mu sync.Mutex
	// got is every request: "METHOD path | header dump | trailer dump".
	got []string
}

func (u *attackUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

func startAttackUpstream(t *testing.T) *attackUpstream {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u := &attackUpstream{ca: ca}
	ln, err := net.Listen("tcp", net.JoinHostPort(internet.AppV4, fmt.Sprint(attackPort)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(u.serve),
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"}, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.Leaf("api.example.test")
		}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

func (u *attackUpstream) serve(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	body.ReadFrom(r.Body)
	var hd strings.Builder
	for k, vs := range r.Header {
		fmt.Fprintf(&hd, "%s=%q ", k, vs)
	}
	var tr strings.Builder
	for k, vs := range r.Trailer {
		fmt.Fprintf(&tr, "%s=%q ", k, vs)
	}
	u.mu.Lock()
	tail := body.String()
	tail = tail[len(tail)-min(len(tail), 80):]
	u.got = append(u.got, fmt.Sprintf("%s %s | %s| trailers: %s| body %q (%d bytes, tail %q)", r.Method, r.RequestURI, hd.String(), tr.String(), clip(body.String(), 200), body.Len(), tail))
	u.mu.Unlock()
	auth := r.Header.Get("Authorization")
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// After the upgrade, the echo goes over the raw stream.
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.WriteString("ws-echo " + auth + "\n")
		rw.Flush()
		return
	}
	switch r.URL.Path {
	case "/trailer":
		// The echo in a declared and an undeclared trailer.
		w.Header().Set("Trailer", "X-Echo-Trailer")
		w.WriteHeader(200)
		fmt.Fprintln(w, "body without the secret")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Echo-Trailer", auth)
		w.Header().Set(http.TrailerPrefix+"X-Late", auth)
	case "/early":
		// 103 Early Hints carrying the echo, then a clean 200.
		w.Header().Set("Link", "</x?"+auth+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(200)
		fmt.Fprintln(w, "clean")
	case "/deflate":
		// Compressed with an encoding the gateway did not ask for.
		var b bytes.Buffer
		zw := zlib.NewWriter(&b)
		fmt.Fprintf(zw, "echo %s\n", auth)
		zw.Close()
		w.Header().Set("Content-Encoding", "deflate")
		w.Write(b.Bytes())
	case "/range":
		// A static-looking document that holds the echo; Range honoured.
		http.ServeContent(w, r, "x.txt", time.Time{}, strings.NewReader("echo: "+auth+"\n"))
	case "/redir":
		w.Header().Set("Location", "https://elsewhere.test/cb?tok="+strings.ReplaceAll(auth, " ", "%20"))
		w.WriteHeader(302)
	case "/echo-case":
		// The echo with its letters' case changed, as an error page that
		// upper-cases what it quotes would.
		fmt.Fprintf(w, "echo %s | %s\n", strings.ToUpper(auth), strings.ToLower(auth))
	case "/hname":
		// The echo in a header name.
		w.Header().Set("X-"+strings.ReplaceAll(auth, " ", "-"), "1")
		fmt.Fprintln(w, "clean")
	default:
		w.Header().Set("X-Echo", auth)
		fmt.Fprintf(w, "echo %s %s %s\n", r.Proto, r.URL.Path, auth)
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func attackPolicy(caFile string) string {
	return fmt.Sprintf(`version: 1
allow:
  - host: api.example.test
    ports: [%d]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/repos/acme/*", "/echo", "/trailer", "/early", "/deflate", "/range", "/redir", "/hname", "/echo-case"]
      - methods: [POST]
        paths: ["/repos/acme/app/issues"]
      - methods: [GET]
        paths: ["/search"]
        query: {q: "repo:acme*"}
dns:
  upstream: ["%s"]
  hosts:
    api.example.test: [%s]
tls:
  upstream_ca: %s
credentials:
  - name: api
    from: {env: NSGATE_IT_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
`, attackPort, internet.UpstreamDNS, internet.AppV4, caFile)
}

// attackScript is the worker: Python over raw TLS sockets, so that every
// byte of each request is the attacker's. Each attempt prints one line
// "NAME: result".
const attackScript = `
import os, ssl, socket, zlib, glob
PH = os.environ['API_TOKEN']
HOST = 'api.example.test'
PORT = %d
ctx = ssl.create_default_context()
def raw(data, alpn=None, timeout=8):
    c = ctx.wrap_socket(socket.create_connection((HOST, PORT), timeout=timeout), server_hostname=HOST)
    c.sendall(data)
    out = b''
    try:
        while True:
            b = c.recv(65536)
            if not b: break
            out += b
    except Exception as e:
        out += ('<<%%s>>' %% e).encode()
    c.close()
    return out
def req(path, extra='', method='GET', body=b'', ver='HTTP/1.1', host=HOST):
    h = '%%s %%s %%s\r\n' %% (method, path, ver)
    if host is not None: h += 'Host: %%s\r\n' %% host
    h += 'Authorization: Bearer %%s\r\nConnection: close\r\n%%s\r\n' %% (PH, extra)
    return raw(h.encode() + body)
def show(name, r):
    print(name + ': ' + repr(r[:600]))

# --- secret into the worker's hands ---
show('echo', req('/echo'))
show('trailer', req('/trailer', 'TE: trailers\r\n'))
show('early', req('/early'))
r = req('/deflate', 'Accept-Encoding: deflate\r\n')
try:
    body = r.split(b'\r\n\r\n', 1)[1]
    if b'chunked' in r.split(b'\r\n\r\n',1)[0].lower():
        # de-chunk
        out = b''; rest = body
        while rest:
            ln, rest = rest.split(b'\r\n', 1); n = int(ln.split(b';')[0], 16)
            if n == 0: break
            out += rest[:n]; rest = rest[n+2:]
        body = out
    show('deflate', zlib.decompress(body))
except Exception as e:
    show('deflate', r + (' <<%%s>>' %% e).encode())
a = req('/range', 'Range: bytes=0-19\r\n').split(b'\r\n\r\n', 1)[-1]
b = req('/range', 'Range: bytes=20-\r\n').split(b'\r\n\r\n', 1)[-1]
show('range', a + b)
show('redir', req('/redir'))
show('hname', req('/hname'))
show('echo-case', req('/echo-case'))
show('head', req('/echo', method='HEAD'))
# Pipelined: two requests on one connection.
p = ('GET /echo HTTP/1.1\r\nHost: %%s\r\nAuthorization: Bearer %%s\r\n\r\nGET /echo HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer %%s\r\nConnection: close\r\n\r\n' %% (HOST, PH, PH)).encode()
show('pipeline', raw(p))

# --- the worker's own view: init's environment, every process's ---
found = []
for f in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):
    try:
        d = open(f, 'rb').read()
    except Exception as e:
        continue
    if b'NSGATE_IT_SECRET' in d:
        found.append(f + ' ' + repr(d[d.find(b'NSGATE_IT_SECRET'):][:60]))
print('procenv: ' + repr(found))
for f in ['/proc/1/environ', '/proc/1/cmdline', '/proc/1/status']:
    try:
        d = open(f, 'rb').read()
        print('proc1 %%s: readable %%d bytes, secret var %%s' %% (f, len(d), b'NSGATE_IT_SECRET' in d))
    except Exception as e:
        print('proc1 %%s: %%s' %% (f, e))
print('proc1 ls: %%r' %% sorted(os.listdir('/proc'))[:40])

# --- the placeholder elsewhere ---
show('cookie', req('/echo', 'Cookie: a=%%s\r\n' %% PH))
show('xhdr', req('/echo', 'X-Api: %%s\r\n' %% PH))
show('dupauth', req('/echo', 'Authorization: Basic %%s\r\n' %% PH))
chunked = ('5\r\nhello\r\n0\r\nX-T: %%s\r\n\r\n' %% PH).encode()
show('reqtrailer', req('/echo', 'Transfer-Encoding: chunked\r\nTrailer: X-T\r\n', body=chunked))
chunked = ('5\r\nhello\r\n0\r\nAuthorization: Bearer %%s\r\n\r\n' %% PH).encode()
show('reqtrailer-auth', req('/echo', 'Transfer-Encoding: chunked\r\n', body=chunked))
show('url-pct', req('/echo?t=%%6e' + PH[1:]))
show('form-pct', req('/echo', 'Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %%d\r\n' %% (len(PH) + 4), body=('t=%%6e' + PH[1:]).encode()))
show('body-lower', req('/echo', 'Content-Length: %%d\r\n' %% len(PH), body=PH.lower().encode()))
show('absform', req('https://other.test/echo'))
show('absform-same', req('https://api.example.test:%%d/echo' %% PORT))
show('http10-nohost', req('/echo', ver='HTTP/1.0', host=None))
show('expect', req('/echo', 'Expect: 100-continue\r\nContent-Length: 3\r\n', body=b'abc'))
show('h2c', req('/echo', 'Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nConnection: Upgrade, HTTP2-Settings\r\n'))
show('connect', raw(('CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\nAuthorization: Bearer %%s\r\n\r\n' %% PH).encode()))
show('connect-same', raw(('CONNECT api.example.test:%%d HTTP/1.1\r\nHost: api.example.test:%%d\r\n\r\n' %% (PORT, PORT)).encode()))

# --- refused paths through the rules ---
for i, path in enumerate(['/admin', '/repos/acme/../admin', '/repos/acme/%%2e%%2e/admin', '/repos/acme/%%2E%%2E/admin',
        '/repos/acme/x%%2f..%%2f..%%2fadmin', '/repos/acme/x%%2fadmin', '//admin', '/repos//acme/x', '/repos/acme/x;/../../admin',
        '/repos/acme/..;/admin', '/repos/acme/x\\..\\..\\admin', '/repos/acme/%%c0%%ae%%c0%%ae/admin', '/repos/acme/%%u002e%%u002e/admin',
        '/echo#/../admin', '/echo/../admin', '/echo%%00/../admin', '/ECHO', '/echo/', '/echo?x=/../admin', '*', '/repos/acme/%%252e%%252e/admin',
        '/repos/acme/\xef\xbc\x8e\xef\xbc\x8e/admin', '/repos/acme/x/%%2e/', '/./admin', '/echo%%20']):
    r = raw(('GET %%s HTTP/1.1\r\nHost: %%s\r\nConnection: close\r\n\r\n' %% (path, HOST)).encode('latin-1'))
    print('path %%d %%r: %%r' %% (i, path, r.split(b'\r\n')[0]))
for m, extra in [('OPTIONS', ''), ('DELETE', ''), ('GET', 'X-HTTP-Method-Override: delete\r\n'), ('GET', 'x-http-method: DELETE\r\n'),
        ('GET', 'X-Method-Override: DELETE\r\n'), ('GET', 'X_HTTP_Method_Override: DELETE\r\n'), ('GET', 'x_method-override: DELETE\r\n'), ('get', ''), ('GET ', ''), ('POST', 'X-HTTP-Method-Override: GET\r\nContent-Length: 0\r\n')]:
    r = raw(('%%s /echo HTTP/1.1\r\nHost: %%s\r\nConnection: close\r\n%%s\r\n' %% (m, HOST, extra)).encode())
    print('method %%r %%r: %%r' %% (m, extra.strip(), r.split(b'\r\n')[0]))
# Smuggling: CL and TE together; a second request hidden in the body.
sm = ('GET /echo HTTP/1.1\r\nHost: %%s\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: %%s\r\n\r\n' %% (HOST, HOST)).encode()
show('smuggle-clte', raw(sm))
sm = ('GET /echo HTTP/1.1\r\nHost: %%s\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n' %% HOST).encode()
show('smuggle-te2', raw(sm))
show('folding', raw(('GET /echo HTTP/1.1\r\nHost: %%s\r\nX-A: a\r\n %%s\r\nConnection: close\r\n\r\n' %% (HOST, PH)).encode()))
show('hdr-space', raw(('GET /echo HTTP/1.1\r\nHost: %%s\r\nX-A : %%s\r\nConnection: close\r\n\r\n' %% (HOST, PH)).encode()))
ws = raw(('GET /repos/acme/ws HTTP/1.1\r\nHost: %%s\r\nAuthorization: Bearer %%s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n' %% (HOST, PH)).encode(), timeout=3)
show('ws', ws)
import subprocess
base = 'https://%%s:%%d' %% (HOST, PORT)
for name, path in [('h2-trailer', '/trailer'), ('h2-early', '/early'), ('h2-echo', '/echo')]:
    r = subprocess.run(['/usr/bin/curl', '-sS', '--http2', '-i', '-H', 'Authorization: Bearer ' + PH, base + path], capture_output=True)
    show(name, r.stdout + r.stderr)
r = subprocess.run(['/usr/bin/curl', '-sS', '--http2', '-i', '-H', 'Host: other.test', '-H', 'Authorization: Bearer ' + PH, base + '/echo'], capture_output=True)
show('h2-host-vs-authority', r.stdout + r.stderr)
# Method override where the rules do not look: the form body, an encoded key.
for name, target, ctype, body in [('override-form', '/repos/acme/app/issues', 'application/x-www-form-urlencoded', b'_method=DELETE'),
        ('override-pctkey', '/repos/acme/app/issues?%%5Fmethod=DELETE', 'text/plain', b''),
        ('override-multipart', '/repos/acme/app/issues', 'multipart/form-data; boundary=XX', b'--XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n'),
        ('override-form-badparam', '/repos/acme/app/issues', 'application/x-www-form-urlencoded; charset', b'_method=DELETE'),
        ('override-multipart-badparam', '/repos/acme/app/issues', 'multipart/form-data; boundary=XX; x', b'--XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n'),
        ('override-notype', '/repos/acme/app/issues', None, b'_method=DELETE'),
        ('override-semicolon', '/repos/acme/app/issues', 'application/x-www-form-urlencoded', b'a=1;_method=DELETE'),
        ('override-mixed-contentid', '/repos/acme/app/issues', 'multipart/mixed; boundary=XX; y="boundary=YY"', b'--YY\r\nContent-ID: _method\r\n\r\nDELETE\r\n--YY--\r\n'),
        ('override-php-dot', '/repos/acme/app/issues', 'application/x-www-form-urlencoded', b'.method=DELETE'),
        ('override-php-dot-query', '/repos/acme/app/issues?.method=DELETE', 'text/plain', b'hi'),
        ('override-json', '/repos/acme/app/issues', 'application/json', b'{"\\u005fmethod":"DELETE"}')]:
    ct = '' if ctype is None else 'Content-Type: %%s\r\n' %% ctype
    r = raw(('POST %%s HTTP/1.1\r\nHost: %%s\r\n%%sContent-Length: %%d\r\nConnection: close\r\n\r\n' %% (target, HOST, ct, len(body))).encode() + body)
    print('%%s: %%r' %% (name, r.split(b'\r\n')[0]))
# Query rules (q once, matching repo:acme*) against the ways lenient servers
# read a query: ';' splits it (Rack 2), another case (ASP.NET), an index,
# a NUL or a leading space (PHP) name the same parameter again.
for name, q in [('query-ok', 'q=repo:acme/app'), ('query-semicolon', 'q=repo:acme/app&z=1;q=repo:other'), ('query-case', 'q=repo:acme/app&Q=repo:other'),
        ('query-array', 'q=repo:acme/app&q[]=repo:other'), ('query-nul', 'q=repo:acme/app&q%%00x=repo:other'), ('query-space', 'q=repo:acme/app&+q=repo:other')]:
    r = raw(('GET /search?%%s HTTP/1.1\r\nHost: %%s\r\nConnection: close\r\n\r\n' %% (q, HOST)).encode())
    print('%%s: %%r' %% (name, r.split(b'\r\n')[0]))
print('DONE')
`

// TestAttackCreds runs every attempt of attackScript in one worker and
// judges the results from the worker's output, the upstream's log and the
// audit log.
func TestAttackCreds(t *testing.T) {
	up := startAttackUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		pol := writeFile(t, dir, "policy.yaml", attackPolicy(caFile))
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--", "/usr/bin/python3", "-c", fmt.Sprintf(attackScript, attackPort))
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		r := runBounded(t, cmd, 170*time.Second, "nsgate run (attack)", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		lines := map[string]string{}
		for _, l := range strings.Split(r.stdout, "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok {
				lines[k] = v
			}
		}
		for k, v := range lines {
			if lv := strings.ToLower(v); strings.Contains(lv, strings.ToLower(credSecret)) || strings.Contains(lv, strings.ToLower(credSecret[:20])) {
				t.Errorf("FINDING: attempt %q: the worker saw the secret (or its prefix): %s", k, v)
			}
		}
		if rng := lines["range"]; strings.Contains(rng, credSecret[:7]) && strings.Contains(rng, credSecret[7:]) {
			t.Errorf("FINDING: range: the secret came back in two Range pieces: %s", rng)
		}
		for _, s := range up.seen() {
			t.Logf("upstream got: %s", s)
			if strings.Contains(strings.ToLower(s), "nsgph") || strings.Contains(strings.ToLower(s), "%6esgph") {
				t.Errorf("FINDING: the placeholder reached the upstream: %s", s)
			}
			if strings.Contains(strings.SplitN(s, " ", 3)[1], "repo:other") {
				t.Errorf("FINDING: a query the rules refuse (a second q) reached the upstream: %s", s)
			}
			if target, _, _ := strings.Cut(strings.SplitN(s, " ", 3)[1], "?"); strings.Contains(target, "admin") {
				t.Errorf("FINDING: a refused path reached the upstream: %s", s)
			}
			if l := strings.ToLower(s); strings.Contains(l, "_method") || strings.Contains(l, "%5fmethod") || strings.Contains(l, ".method") || strings.Contains(l, "\\u005fmethod") {
				t.Errorf("FINDING: a method override the rules did not judge reached the upstream on an allowed POST: %s", s)
			}
			if h, _, _ := strings.Cut(strings.ToLower(strings.ReplaceAll(s, "_", "-")), "| trailers"); strings.Contains(h, "method-override") || strings.Contains(h, "x-http-method") {
				t.Errorf("FINDING: a method-override header reached the upstream unjudged: %s", s)
			}
			if strings.HasPrefix(s, "DELETE") || strings.HasPrefix(s, "OPTIONS") || (strings.HasPrefix(s, "POST") && !strings.HasPrefix(s, "POST /repos/acme/app/issues")) {
				t.Errorf("FINDING: a refused method reached the upstream: %s", s)
			}
		}
		for _, ar := range readAudit(t, log) {
			if ev := ar.str("event"); ev == "request" || ev == "credential" {
				t.Logf("audit: %v", ar)
			}
			if strings.Contains(fmt.Sprint(ar), credSecret) {
				t.Errorf("FINDING: audit record holds the secret: %v", ar)
			}
		}
		if !strings.Contains(lines["query-ok"], "200") {
			t.Errorf("the allowed query was refused: %q", lines["query-ok"])
		}
		for k, v := range lines {
			if strings.HasPrefix(k, "query-") && k != "query-ok" && !strings.Contains(v, "403") {
				t.Errorf("FINDING: %s: a query the rules refuse was not refused: %s", k, v)
			}
		}
		if !strings.Contains(r.stdout, "DONE") {
			t.Errorf("the attack script did not finish")
		}
	})
}

// holdScript: the secret's file (hidden in the view) read and unmounted;
// a body over the held MiB with the placeholder split across two writes;
// then many connections that each make nsgate hold almost a MiB of body,
// and never finish it.
const holdScript = `
import os, ssl, socket, time, ctypes, sys
PH = os.environ['API_TOKEN']
HOST = 'api.example.test'
PORT = %d
SECRET = sys.argv[1]
N = int(sys.argv[2])
print('ph: ' + PH)
try:
    print('secretfile: %%r' %% open(SECRET).read())
except Exception as e:
    print('secretfile: %%s' %% e)
libc = ctypes.CDLL(None, use_errno=True)
r = libc.umount2(SECRET.encode(), 2)
print('umount: %%d errno %%d' %% (r, ctypes.get_errno()))
try:
    print('secretfile-after: %%r' %% open(SECRET).read())
except Exception as e:
    print('secretfile-after: %%s' %% e)
try:
    mi = [l for l in open('/proc/self/mountinfo') if os.path.dirname(SECRET) in l]
    print('mountinfo: %%r' %% mi)
except Exception as e:
    print('mountinfo: %%s' %% e)
ctx = ssl.create_default_context()
def conn():
    return ctx.wrap_socket(socket.create_connection((HOST, PORT), timeout=20), server_hostname=HOST)
# Big body, placeholder split across the 1 MiB mark's streaming part.
c = conn()
pre = b'a' * ((1 << 20) + 10)
body = pre + PH.encode() + b'b' * 10
c.sendall(('GET /echo HTTP/1.1\r\nHost: %%s\r\nAuthorization: Bearer %%s\r\nContent-Length: %%d\r\nConnection: close\r\n\r\n' %% (HOST, PH, len(body))).encode())
c.sendall(pre + PH[:30].encode())
time.sleep(0.5)
c.sendall(PH[30:].encode() + b'b' * 10)
out = b''
try:
    while True:
        b = c.recv(65536)
        if not b: break
        out += b
except Exception as e:
    out += ('<<%%s>>' %% e).encode()
print('bigbody: %%r' %% out[:300])
held = []
for i in range(N):
    try:
        c = conn()
        c.sendall(('GET /echo HTTP/1.1\r\nHost: %%s\r\nContent-Length: %%d\r\n\r\n' %% (HOST, 4 << 20)).encode())
        c.sendall(b'x' * ((1 << 20) - 1))
        held.append(c)
    except Exception as e:
        print('hold %%d: %%s' %% (i, e))
        break
print('held: %%d' %% len(held))
sys.stdout.flush()
time.sleep(6)
print('DONE')
`

// TestAttackCredsHold: the secret file and the gateway's memory.
func TestAttackCredsHold(t *testing.T) {
	up := startAttackUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		sdir, err := os.MkdirTemp("/var/tmp", "nsgate-attack-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(sdir)
		os.Chmod(sdir, 0o755)
		secretFile := writeFile(t, sdir, "secret", credSecret+"\n")
		pol := strings.Replace(attackPolicy(caFile), "from: {env: NSGATE_IT_SECRET}", "from: {file: "+secretFile+"}", 1)
		polFile := writeFile(t, dir, "policy.yaml", pol)
		log := filepath.Join(dir, "audit.jsonl")
		n := 120
		if v := os.Getenv("NSGATE_ATTACK_HOLD"); v != "" {
			fmt.Sscan(v, &n)
		}
		cmd := nsgateCmd(m, "run", "--policy", polFile, "--audit", log, "--ro", sdir, "--", "/usr/bin/python3", "-c", fmt.Sprintf(holdScript, attackPort), secretFile, fmt.Sprint(n))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var peak int64
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		timeout := time.After(170 * time.Second)
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-timeout:
				cmd.Process.Kill()
				<-done
				t.Errorf("nsgate run hung")
				break wait
			case <-tick.C:
				if kb := rssKB(cmd.Process.Pid); kb > peak {
					peak = kb
				}
			}
		}
		t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), clip(errb.String(), 3000))
		t.Logf("nsgate peak RSS %d MiB with %d held bodies", peak/1024, n)
		if strings.Contains(out.String(), credSecret) {
			t.Errorf("FINDING: the worker read the secret")
		}
		if peak > 100*1024 {
			t.Errorf("FINDING: %d held request bodies grew nsgate to %d MiB (no bound on held bodies per flow or run)", n, peak/1024)
		}
		for _, s := range up.seen() {
			t.Logf("upstream got: %s", clip(s, 600))
			if strings.Contains(strings.ToLower(s), PHPrefix(out.String())) {
				t.Errorf("FINDING: part of the placeholder reached the upstream: %s", clip(s, 600))
			}
		}
		for _, ar := range readAudit(t, log) {
			if ev := ar.str("event"); ev == "credential" || (ev == "request" && ar.str("action") == "allow") {
				t.Logf("audit: %v", ar)
			}
		}
	})
}

// PHPrefix is the first 20 characters of the placeholder the worker
// printed in its upstream echo, or a string that matches nothing.
func PHPrefix(out string) string {
	i := strings.Index(out, "nsgph")
	if i < 0 || len(out) < i+20 {
		return "\x00nomatch"
	}
	return out[i : i+20]
}

func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%d", &kb)
			return kb
		}
	}
	return 0
}

// TestAttackCredsH2Hold: one h2 connection, 100 streams, each holding
// almost a MiB of body in nsgate (testdata/h2hold).
func TestAttackCredsH2Hold(t *testing.T) {
	up := startAttackUpstream(t)
	bdir, err := os.MkdirTemp("/var/tmp", "nsgate-attack-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bdir)
	os.Chmod(bdir, 0o755)
	bin := filepath.Join(bdir, "h2hold")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/h2hold").CombinedOutput(); err != nil {
		t.Fatalf("build h2hold: %v\n%s", err, out)
	}
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		polFile := writeFile(t, dir, "policy.yaml", attackPolicy(caFile))
		cmd := nsgateCmd(m, "run", "--policy", polFile, "--audit", filepath.Join(dir, "a.jsonl"), "--ro", bdir, "--exec-allow", bin, "--",
			bin, fmt.Sprintf("api.example.test:%d", attackPort), "100", "6")
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		out, errb, peak := runSampled(t, cmd)
		t.Logf("stdout:\n%s\nstderr:\n%s", out, clip(errb, 3000))
		t.Logf("nsgate peak RSS %d MiB, one h2 connection", peak/1024)
		if peak > 100*1024 {
			t.Errorf("FINDING: one h2 connection grew nsgate to %d MiB", peak/1024)
		}
	})
}

// runSampled runs cmd, sampling its RSS; it returns stdout, stderr and the
// peak RSS in KiB.
func runSampled(t *testing.T, cmd *exec.Cmd) (string, string, int64) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var peak int64
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(170 * time.Second)
	for {
		select {
		case <-done:
			return out.String(), errb.String(), peak
		case <-timeout:
			cmd.Process.Kill()
			<-done
			t.Errorf("nsgate run hung")
			return out.String(), errb.String(), peak
		case <-tick.C:
			if kb := rssKB(cmd.Process.Pid); kb > peak {
				peak = kb
			}
		}
	}
}
