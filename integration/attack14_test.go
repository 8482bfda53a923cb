//go:build integration

package integration

// Attack round 14 on the credential broker and the per-request rules on
// terminated TLS, after round 13's fixes (the echo forms, the Upgrade and
// Connection refusals, strict multipart). Written by an independent
// tester. Each attempt is one line of the worker's output:
//   - echo-*: the secret comes back in a form an ordinary server writes
//     and an ordinary client decodes; the line is what the worker decoded.
//     "FINDING:" when it holds the secret.
//   - override-*: a _method field a real server (PHP) reads; "FINDING:"
//     when the POST reached the upstream.
//   - fr-*: a legitimate request; "FALSE REFUSAL:" when nsgate refused it.
//   - held-*: controls that must stay refused.
// Run: NSGATE_REQUIRE_ALL=1 go test -tags integration -count=1 -run TestAttack14 -v ./integration/

import (
	"bufio"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

const attack14Port = 9481

// secret14 is shaped like real secrets: '/', '+' and '=' as in AWS secret
// keys and other base64 tokens, '~', '-' and '.' as in Azure AD client
// secrets.
const secret14 = "it14SECRET/abc+def=0123~xyz-Q.r"

// secret14q is a second credential whose secret holds quotes (printable
// ASCII, accepted by NewVault).
const secret14q = `it14Q"uote'KEY-98765`

type up14 struct{ hostileUpstream }

func startUp14(t *testing.T) *up14 {
	u := &up14{}
	u.listen(t, attack14Port, []string{"h2", "http/1.1"}, u.serve)
	return u
}

// pyQuote is Python's urllib.parse.quote(s) (safe='/'): letters, digits,
// "_.-~" and '/' stay.
func pyQuote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if alnum14(c) || strings.IndexByte("_.-~/", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// phpURLEncode is PHP's urlencode (also Java's URLEncoder.encode and
// Ruby's URI.encode_www_form_component but for '*'): letters, digits and
// "-_." stay, '~' is escaped, a space is '+'.
func phpURLEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case alnum14(c) || strings.IndexByte("-_.", c) >= 0:
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func alnum14(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// dotnetJSON is a string inside JSON as System.Text.Json writes it by
// default (JavaScriptEncoder.Default, ASP.NET Core's): the HTML-sensitive
// characters '+', '&', '<', '>', '\”, '"' and '`' as \u escapes.
func dotnetJSON(s string) string {
	return strings.NewReplacer("+", `\u002B`, "&", `\u0026`, "<", `\u003C`, ">", `\u003E`, "'", `\u0027`, `"`, `\u0022`, "`", `\u0060`, `\`, `\\`).Replace(s)
}

var (
	tmplJS   = template.Must(template.New("js").Parse(`<html><script>var token = "{{.}}";</script></html>`))
	tmplAttr = template.Must(template.New("attr").Parse(`<html><input type=hidden name=t value={{.}}></html>`))
)

func (u *up14) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.log(fmt.Sprintf("[%s] %s %s %s | ct=%q ce=%q | body %q", r.Header.Get("X-Attempt"), r.Method, r.Host, r.RequestURI, r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding"), clip(string(body), 400)))
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	key := r.Header.Get("X-Api-Key")
	switch r.URL.Path {
	case "/e/pyquote":
		// A Python (Flask/Django) API redirecting with the token in a
		// query, as urllib.parse.quote writes it.
		loc := "https://api.example.test/cb?tok=" + pyQuote(auth)
		w.Header().Set("Location", loc)
		w.WriteHeader(302)
		fmt.Fprintf(w, "<a href=\"%s\">continue</a>\n", loc)
	case "/e/phpurl":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<a href=\"/cb?tok=%s\">continue</a>\n", phpURLEncode(auth))
	case "/e/dotnet":
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprintf(w, `{"error":"invalid_token","token":"%s"}`, dotnetJSON(auth))
	case "/e/gotmpl-js":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		tmplJS.Execute(w, auth)
	case "/e/gotmpl-attr":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		tmplAttr.Execute(w, auth)
	case "/e/php-html":
		// PHP's htmlspecialchars (ENT_QUOTES, PHP 8.1's default).
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<p>bad key %s</p>\n", strings.NewReplacer("&", "&amp;", `"`, "&quot;", "'", "&#039;", "<", "&lt;", ">", "&gt;").Replace(key))
	case "/e/py-html":
		// Python's html.escape (Django's escape writes the same).
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<p>bad key %s</p>\n", strings.NewReplacer("&", "&amp;", `"`, "&quot;", "'", "&#x27;", "<", "&lt;", ">", "&gt;").Replace(key))
	default:
		fmt.Fprintf(w, "ok %s %s %s\n", r.Method, r.Host, r.URL.Path)
	}
}

func attack14Policy(caFile string) string {
	return fmt.Sprintf(`version: 1
allow:
  - host: api.example.test
    ports: [%d]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/repos/acme/**", "/e/*"]
      - methods: [POST]
        paths: ["/repos/acme/app/issues", "/upload"]
  - host: uploads.example.test
    ports: [%d]
    tls: terminate
dns:
  upstream: ["%s"]
  hosts:
    api.example.test: [%s]
    uploads.example.test: [%s]
tls:
  upstream_ca: %s
credentials:
  - name: api
    from: {env: NSGATE_IT14_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
  - name: key
    from: {env: NSGATE_IT14_KEY}
    placeholder_env: API_KEY
    hosts: [api.example.test]
    header: X-Api-Key
    format: "{}"
`, attack14Port, attack14Port, internet.UpstreamDNS, internet.AppV4, internet.AppV4, caFile)
}

const attack14Script = `
import os, ssl, socket, json, re, html, gzip, urllib.parse
PH = os.environ['API_TOKEN']
KPH = os.environ['API_KEY']
HOST = 'api.example.test'
PORT = %d
ctx = ssl.create_default_context()
def conn(host=HOST, timeout=10):
    return ctx.wrap_socket(socket.create_connection((host, PORT), timeout=timeout), server_hostname=host)
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
def raw(data, host=HOST):
    c = conn(host)
    c.sendall(data)
    out = readall(c)
    c.close()
    return out
def unchunk(b):
    out = b''
    while b:
        n, _, rest = b.partition(b'\r\n')
        n = int(n.split(b';')[0] or b'0', 16)
        if n == 0: break
        out += rest[:n]
        b = rest[n+2:]
    return out
def get(name, path, extra=''):
    r = raw(('GET %%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nX-Api-Key: %%s\r\n%%sConnection: close\r\n\r\n' %% (path, HOST, name, PH, KPH, extra)).encode())
    head, _, body = r.partition(b'\r\n\r\n')
    if b'chunked' in head.lower():
        body = unchunk(body)
    return head.decode('latin-1'), body.decode('latin-1')
def show(name, s):
    print(name + ': ' + repr(s[:600]))

# --- 1. echoes in forms ordinary servers write and clients decode ---
head, body = get('echo-pyquote-location', '/e/pyquote')
loc = [l for l in head.split('\r\n') if l.lower().startswith('location:')]
show('echo-pyquote-location', urllib.parse.parse_qs(urllib.parse.urlparse(loc[0].split(':', 1)[1].strip()).query)['tok'][0] if loc else head)
head, body = get('echo-phpurl', '/e/phpurl')
m = re.search(r'tok=([^"]*)', body)
show('echo-phpurl', urllib.parse.unquote_plus(m.group(1)) if m else body)
head, body = get('echo-dotnet-json', '/e/dotnet')
try:
    show('echo-dotnet-json', json.loads(body)['token'])
except Exception as e:
    show('echo-dotnet-json', body + ' <<%%s>>' %% e)
head, body = get('echo-gotmpl-js', '/e/gotmpl-js')
m = re.search(r'var token = "(.*?)";', body)
show('echo-gotmpl-js', json.loads('"' + m.group(1).replace('\\/', '/') + '"') if m else body)
head, body = get('echo-gotmpl-attr', '/e/gotmpl-attr')
show('echo-gotmpl-attr', html.unescape(body))
head, body = get('echo-php-html', '/e/php-html')
show('echo-php-html', html.unescape(body))
head, body = get('echo-py-html', '/e/py-html')
show('echo-py-html', html.unescape(body))

# --- 2. _method in a multipart body, read by PHP (Laravel, Symfony) ---
def post(name, ctype, body, target='/repos/acme/app/issues', host=HOST, extra=''):
    h = 'POST %%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nContent-Type: %%s\r\n%%sContent-Length: %%d\r\nConnection: close\r\n\r\n' %% (target, host, name, PH, ctype, extra, len(body))
    if host != HOST:
        h = h.replace('Authorization: Bearer %%s\r\n' %% PH, '')
    r = raw(h.encode() + body, host)
    print('%%s: %%r' %% (name, r.split(b'\r\n')[0]))
# PHP (main/rfc1867.c) ends a part's data at "\n--boundary" (no CR needed)
# and then takes the next line equal to "--boundary"; Go's multipart
# reader, set to CRLF by the first boundary line, needs "\r\n--boundary".
post('override-mp-lf-boundary', 'multipart/form-data; boundary=XX',
     b'--XX\r\nContent-Disposition: form-data; name="title"\r\n\r\nhello\n--XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n')
post('held-mp-crlf', 'multipart/form-data; boundary=XX',
     b'--XX\r\nContent-Disposition: form-data; name="title"\r\n\r\nhello\r\n--XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n')

# --- 3. legitimate requests ---
def mp(b):
    return ('--%%s\r\nContent-Disposition: form-data; name="title"\r\n\r\nhello\r\n--%%s\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nsome text\r\n--%%s--\r\n' %% (b, b, b)).encode()
for name, b in [('fr-chromium-form', '----WebKitFormBoundary7MA4YWxkTrZu0gW'),
                ('fr-firefox-form', '----geckoformboundary8e4f2c1a9d6b3e7f5a0c'),
                ('fr-jersey-form', 'Boundary_1_1234567890_1700000000000'),
                ('held-fr-curl-form', '------------------------d74496d66958873e')]:
    post(name, 'multipart/form-data; boundary=' + b, mp(b), target='/upload')
# The same browser upload to a terminated host with no rules and no
# credential at all.
post('fr-chromium-form-norules', 'multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW', mp('----WebKitFormBoundary7MA4YWxkTrZu0gW'), target='/upload', host='uploads.example.test')
# A gzip-compressed upload (OpenTelemetry's OTLP/HTTP exporters, Sentry,
# Elasticsearch clients) to that host.
post('fr-gzip-upload-norules', 'application/json', gzip.compress(b'{"resourceSpans":[]}'), target='/v1/traces', host='uploads.example.test', extra='Content-Encoding: gzip\r\n')
print('DONE')
`

// TestAttack14 runs attack14Script in one worker and judges it from the
// worker's output and what up14 recorded.
func TestAttack14(t *testing.T) {
	up := startUp14(t)
	forEachMode(t, func(t *testing.T, m mode) {
		up.mu.Lock()
		up.got = nil
		up.mu.Unlock()
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		pol := writeFile(t, dir, "policy.yaml", attack14Policy(caFile))
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--", "/usr/bin/python3", "-c", fmt.Sprintf(attack14Script, attack14Port))
		cmd.Env = append(cmd.Env, "NSGATE_IT14_SECRET="+secret14, "NSGATE_IT14_KEY="+secret14q)
		r := runBounded(t, cmd, 170*time.Second, "nsgate run (attack14)", nil)
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
		unq := func(s string) string { // the worker printed Python reprs
			return strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(s)
		}
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				v := lines[name]
				if strings.Contains(unq(v), secret14) || strings.Contains(unq(v), secret14q) {
					t.Errorf("FINDING: %s: the worker decoded the secret from the echo: %s", name, v)
				}
				for _, s := range byAttempt[name] {
					if strings.Contains(strings.ToLower(s), "nsgph") {
						t.Errorf("FINDING: %s: the placeholder reached the upstream: %s", name, s)
					}
					if strings.HasPrefix(name, "override-") || strings.HasPrefix(name, "held-mp") {
						t.Errorf("FINDING: %s: a multipart body whose _method PHP reads (DELETE) reached the upstream on an allowed POST: %s", name, s)
					}
				}
				if strings.HasPrefix(name, "fr-") || strings.HasPrefix(name, "held-fr-") {
					if !strings.Contains(v, " 200 ") || len(byAttempt[name]) != 1 {
						t.Errorf("FALSE REFUSAL: %s: a legitimate request was refused: %s (upstream saw %q)", name, v, byAttempt[name])
					}
				}
			})
		}
		for _, ar := range readAudit(t, log) {
			if ev := ar.str("event"); ev == "request" || ev == "credential" {
				t.Logf("audit: %v", ar)
			}
			if s := fmt.Sprint(ar); strings.Contains(s, secret14) || strings.Contains(s, secret14q) {
				t.Errorf("FINDING: audit record holds the secret: %v", ar)
			}
		}
		if !strings.Contains(r.stdout, "DONE") {
			t.Errorf("the attack script did not finish")
		}
	})
}
