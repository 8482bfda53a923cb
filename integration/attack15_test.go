//go:build integration

package integration

// Attack round 15 on the echo scrub and the multipart reading of _method,
// after round 14's fixes. Written by an independent tester. Each attempt
// is one line of the worker's output:
//   - echo-*: the secret comes back with each layer of its encoding an
//     ordinary encoder's (PHP, Python, .NET, Go), decoded as a client
//     does; "FINDING:" when the decoded line holds the secret.
//   - override-*: a multipart _method field that PHP 8.2 or Rack 2.2
//     reads (checked against php-cgi and Rack::MethodOverride) and Go's
//     parser names otherwise; "FINDING:" when the POST reached the upstream.
//   - fr-*: a legitimate request; "FALSE REFUSAL:" when nsgate refused it.
//   - held-*: controls that must stay refused.
// Run: NSGATE_REQUIRE_ALL=1 go test -tags integration -count=1 -run TestAttack15 -v ./integration/

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/nsgate/nsgate/lab/internet"
)

const attack15Port = 9491

// secret15 is shaped like real secrets: '/', '+' and '=' as in AWS secret
// keys and other base64 tokens, '~', '-' and '.' as in Azure AD client
// secrets.
const secret15 = "it15SECRET/abc+def=0123~xyz-Q.r"

// secret15q is a second credential whose secret holds quotes (printable
// ASCII, accepted by NewVault).
const secret15q = `it15Q"uote'KEY-98765`

type up15 struct{ hostileUpstream }

func startUp15(t *testing.T) *up15 {
	u := &up15{}
	u.listen(t, attack15Port, []string{"h2", "http/1.1"}, u.serve)
	return u
}

var tmplCSS15 = template.Must(template.New("css").Parse(`<html><style>p{font-family:"{{.}}"}</style></html>`))

// phpHTML5 is PHP's htmlentities($s, ENT_QUOTES | ENT_HTML5) on ASCII
// (checked against php 8.2): the HTML5 named entities for every character
// that has one.
func phpHTML5(s string) string {
	return strings.NewReplacer("&", "&amp;", `"`, "&quot;", "'", "&apos;", "<", "&lt;", ">", "&gt;", "/", "&sol;", "+", "&plus;", "=", "&equals;", ".", "&period;", "(", "&lpar;", ")", "&rpar;", ":", "&colon;", ",", "&comma;", "!", "&excl;", "?", "&quest;", "#", "&num;", "$", "&dollar;", "%", "&percnt;", "*", "&ast;", ";", "&semi;", "@", "&commat;", "[", "&lsqb;", "]", "&rsqb;", "\\", "&bsol;", "^", "&Hat;", "_", "&lowbar;", "`", "&grave;", "{", "&lcub;", "|", "&verbar;", "}", "&rcub;").Replace(s)
}

// jsonStr is a JSON string as PHP's json_encode writes it (escaping '/').
func jsonStr(s string, slash bool) string {
	b, _ := json.Marshal(s)
	out := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(b))
	if slash {
		out = strings.ReplaceAll(out, "/", `\/`)
	}
	return out
}

func utf16le(s string) []byte {
	var b []byte
	for _, r := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, r)
	}
	return b
}

func (u *up15) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.log(fmt.Sprintf("[%s] %s %s %s | ct=%q ce=%q | body %q", r.Header.Get("X-Attempt"), r.Method, r.Host, r.RequestURI, r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding"), clip(string(body), 400)))
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	key := r.Header.Get("X-Api-Key")
	switch r.URL.Path {
	case "/e/php-html5":
		// PHP's htmlentities with ENT_HTML5 (Laravel's e() with the flag,
		// Symfony's escaper 'html' with ENT_HTML5).
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<p>bad token %s</p>\n", phpHTML5(auth))
	case "/e/json-in-json-php":
		// A PHP API wrapping an upstream's JSON answer in a string field:
		// json_encode(['raw' => json_encode(['t' => $tok])]).
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"raw":%s}`, jsonStr(`{"t":`+jsonStr(auth, true)+`}`, true))
	case "/e/json-in-json-py":
		// json.dumps({'raw': json.dumps({'t': key})}) (a key with quotes).
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"raw": %s}`, jsonStr(`{"t": `+jsonStr(key, false)+`}`, false))
	case "/e/json-in-json-dotnet":
		// System.Text.Json's default escaping, twice (an ASP.NET Core API
		// returning a problem detail whose "detail" holds a JSON body).
		w.Header().Set("Content-Type", "application/problem+json")
		fmt.Fprintf(w, `{"detail":"%s"}`, dotnetJSON(`{"token":"`+dotnetJSON(auth)+`"}`))
	case "/e/next-redirect":
		// A login redirect carrying the URL it came from, itself with the
		// token in its query: urlencode({'next': '/cb?' + urlencode({'tok': t})}).
		loc := "https://api.example.test/login?next=" + url.QueryEscape("/cb?tok="+url.QueryEscape(auth))
		w.Header().Set("Location", loc)
		w.WriteHeader(302)
		fmt.Fprintf(w, "see %s\n", loc)
	case "/e/qp":
		// A mail API returning a raw message, its body quoted-printable
		// (Python's email/quopri, PHP's quoted_printable_encode: '=' is =3D).
		w.Header().Set("Content-Type", "message/rfc822")
		fmt.Fprintf(w, "Content-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nyour token: %s\r\n", strings.ReplaceAll(auth, "=", "=3D"))
	case "/e/utf16-dotnet":
		// System.Text.Json's escaping, sent as UTF-16 (Encoding.Unicode).
		w.Header().Set("Content-Type", "application/json; charset=utf-16")
		w.Write(utf16le(`{"token":"` + dotnetJSON(auth) + `"}`))
	case "/e/gotmpl-css":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		tmplCSS15.Execute(w, auth)
	default:
		fmt.Fprintf(w, "ok %s %s %s\n", r.Method, r.Host, r.URL.Path)
	}
}

func attack15Policy(caFile string) string {
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
    from: {env: NSGATE_IT15_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
  - name: key
    from: {env: NSGATE_IT15_KEY}
    placeholder_env: API_KEY
    hosts: [api.example.test]
    header: X-Api-Key
    format: "{}"
`, attack15Port, attack15Port, internet.UpstreamDNS, internet.AppV4, internet.AppV4, caFile)
}

const attack15Script = `
import os, ssl, socket, json, re, html, quopri, urllib.parse
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
def get(name, path):
    r = raw(('GET %%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nX-Api-Key: %%s\r\nConnection: close\r\n\r\n' %% (path, HOST, name, PH, KPH)).encode())
    head, _, body = r.partition(b'\r\n\r\n')
    if b'chunked' in head.lower():
        body = unchunk(body)
    return head.decode('latin-1'), body
def show(name, f):
    try:
        s = f()
    except Exception as e:
        s = '<<%%r>>' %% e
    print(name + ': ' + repr(s[:600]))

# --- 1. echoes: each layer an ordinary encoder's, decoded as clients do ---
h, b = get('echo-php-html5', '/e/php-html5')
show('echo-php-html5', lambda: html.unescape(b.decode()))
h, b = get('echo-json-in-json-php', '/e/json-in-json-php')
show('echo-json-in-json-php', lambda: json.loads(json.loads(b)['raw'])['t'])
h, b = get('echo-json-in-json-py', '/e/json-in-json-py')
show('echo-json-in-json-py', lambda: json.loads(json.loads(b)['raw'])['t'])
h, b = get('echo-json-in-json-dotnet', '/e/json-in-json-dotnet')
show('echo-json-in-json-dotnet', lambda: json.loads(json.loads(b)['detail'])['token'])
h, b = get('echo-next-redirect', '/e/next-redirect')
def nxt():
    loc = [l for l in h.split('\r\n') if l.lower().startswith('location:')][0].split(':', 1)[1].strip()
    n = urllib.parse.parse_qs(urllib.parse.urlparse(loc).query)['next'][0]
    return urllib.parse.parse_qs(urllib.parse.urlparse(n).query)['tok'][0]
show('echo-next-redirect', nxt)
h, b = get('echo-qp', '/e/qp')
show('echo-qp', lambda: quopri.decodestring(b.split(b'\r\n\r\n', 1)[1]).decode())
h, b = get('echo-utf16-dotnet', '/e/utf16-dotnet')
show('echo-utf16-dotnet', lambda: json.loads(b.decode('utf-16-le'))['token'])
h, b = get('echo-gotmpl-css', '/e/gotmpl-css')
show('echo-gotmpl-css', lambda: re.sub(r'\\([0-9a-fA-F]{1,6}) ?', lambda m: chr(int(m.group(1), 16)), b.decode()))

# --- 2. _method in a multipart body that Go's parser names otherwise ---
def post(name, ctype, body, target='/repos/acme/app/issues', host=HOST):
    h = 'POST %%s HTTP/1.1\r\nHost: %%s\r\nX-Attempt: %%s\r\nAuthorization: Bearer %%s\r\nContent-Type: %%s\r\nContent-Length: %%d\r\nConnection: close\r\n\r\n' %% (target, host, name, PH, ctype, len(body))
    r = raw(h.encode() + body, host)
    print('%%s: %%r' %% (name, r.split(b'\r\n')[0]))
MP = 'multipart/form-data; boundary=XX'
# PHP (php_ap_getword_conf) takes single quotes as quotes: _method. Go: "'_method'".
post('override-mp-squote-name', MP, b"--XX\r\nContent-Disposition: form-data; name='_method'\r\n\r\nDELETE\r\n--XX--\r\n")
# Go's mime.ParseMediaType lets name* (RFC 2231) win: "title". PHP ignores name*: _method.
post('override-mp-namestar', MP, b"--XX\r\nContent-Disposition: form-data; name*=UTF-8''title; name=\"_method\"\r\n\r\nDELETE\r\n--XX--\r\n")
# Rack 2.2/3 find "Content-Disposition:...name=" anywhere in the part's head,
# here inside another header's value: _method. Go reads the real header: "title".
post('override-mp-rack-xhdr', MP, b'--XX\r\nX-Note: Content-Disposition: form-data; name="_method"\r\nContent-Disposition: form-data; name="title"\r\n\r\nDELETE\r\n--XX--\r\n')
post('held-mp-plain', MP, b'--XX\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XX--\r\n')

# --- 3. legitimate uploads ---
def mp(b, cd_name='name="title"'):
    return ('--%%s\r\nContent-Disposition: form-data; %%s\r\n\r\nhello\r\n--%%s\r\nContent-Disposition: form-data; name=file; filename=a.txt; filename*=utf-8\'\'a.txt\r\nContent-Type: text/plain\r\n\r\nsome text\r\n--%%s--\r\n' %% (b, cd_name, b, b)).encode()
# .NET HttpClient's MultipartFormDataContent: a quoted GUID boundary, names unquoted, filename*.
post('fr-dotnet-form', 'multipart/form-data; boundary="4b3c6a4e-0b1e-4a7e-9d8a-2f1c0e5b7a91"', mp('4b3c6a4e-0b1e-4a7e-9d8a-2f1c0e5b7a91', 'name=title'), target='/upload')
print('DONE')
`

// TestAttack15 runs attack15Script in one worker and judges it from the
// worker's output and what up14 recorded.
func TestAttack15(t *testing.T) {
	up := startUp15(t)
	forEachMode(t, func(t *testing.T, m mode) {
		up.mu.Lock()
		up.got = nil
		up.mu.Unlock()
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		pol := writeFile(t, dir, "policy.yaml", attack15Policy(caFile))
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--", "/usr/bin/python3", "-c", fmt.Sprintf(attack15Script, attack15Port))
		cmd.Env = append(cmd.Env, "NSGATE_IT15_SECRET="+secret15, "NSGATE_IT15_KEY="+secret15q)
		r := runBounded(t, cmd, 170*time.Second, "nsgate run (attack15)", nil)
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
				if strings.Contains(unq(v), secret15) || strings.Contains(unq(v), secret15q) {
					t.Errorf("FINDING: %s: the worker decoded the secret from the echo: %s", name, v)
				}
				for _, s := range byAttempt[name] {
					if strings.Contains(strings.ToLower(s), "nsgph") {
						t.Errorf("FINDING: %s: the placeholder reached the upstream: %s", name, s)
					}
					if strings.HasPrefix(name, "override-") || strings.HasPrefix(name, "held-mp") {
						t.Errorf("FINDING: %s: a multipart body whose _method PHP or Rack reads (DELETE) reached the upstream on an allowed POST: %s", name, s)
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
			if s := fmt.Sprint(ar); strings.Contains(s, secret15) || strings.Contains(s, secret15q) {
				t.Errorf("FINDING: audit record holds the secret: %v", ar)
			}
		}
		if !strings.Contains(r.stdout, "DONE") {
			t.Errorf("the attack script did not finish")
		}
	})
}
