//go:build integration

package integration

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/tlsca"
)

const (
	credPort   = 9443
	credSecret = "itSECRET-0123456789-abcdefgh"
)

// credUpstream is the fake api.example.test: TLS with a certificate of the
// test's own CA, HTTP/1.1 and h2, recording what it receives.
type credUpstream struct {
	ca    *tlsca.CA
	mu    sync.Mutex
	auths []string
	paths []string
	proto []string
	ws    []string // WebSocket messages received
}

func (u *credUpstream) seen() (auths, paths, protos []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auths...), append([]string(nil), u.paths...), append([]string(nil), u.proto...)
}

func (u *credUpstream) reset() {
	u.mu.Lock()
	u.auths, u.paths, u.proto, u.ws = nil, nil, nil, nil
	u.mu.Unlock()
}

func startCredUpstream(t *testing.T) *credUpstream {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u := &credUpstream{ca: ca}
	ln, err := net.Listen("tcp", net.JoinHostPort(internet.AppV4, fmt.Sprint(credPort)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
				u.mu.Lock()
				u.paths = append(u.paths, "ws:"+r.URL.Path)
				u.mu.Unlock()
				c, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsAccept(r.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n")
				rw.Flush()
				u.wsServe(rw)
				return
			}
			io.Copy(io.Discard, r.Body)
			u.mu.Lock()
			u.auths = append(u.auths, r.Header.Get("Authorization"))
			u.paths = append(u.paths, r.URL.Path)
			u.proto = append(u.proto, r.Proto)
			u.mu.Unlock()
			// An echo endpoint: it reflects the header it got.
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			fmt.Fprintf(w, "echo %s %s\n", r.Proto, r.Header.Get("Authorization"))
		}),
		TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"}, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.Leaf("api.example.test")
		}},
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// wsScript upgrades to WebSocket on an allowed path, sends a line and
// prints the status and the echo.
const wsScript = `import ssl,socket
c=ssl.create_default_context().wrap_socket(socket.create_connection(('api.example.test',%d)),server_hostname='api.example.test')
c.sendall(b'GET /repos/acme/ws HTTP/1.1\\r\\nHost: api.example.test\\r\\nConnection: Upgrade\\r\\nUpgrade: websocket\\r\\nSec-WebSocket-Version: 13\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n\\r\\n')
h=b''
while not h.endswith(b'\\r\\n\\r\\n'): h+=c.recv(1)
c.sendall(bytes([0x81,0x85,1,2,3,4])+bytes(a^b for a,b in zip(b'hello',b'\\x01\\x02\\x03\\x04\\x01')))
f=c.recv(100)
print(h.split(b' ')[1].decode(), f[2:2+f[1]].decode().strip())`

func credPolicy(caFile string) string {
	return fmt.Sprintf(`version: 1
allow:
  - host: api.example.test
    ports: [%d]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/repos/acme/*", "/echo"]
  - host: app.test
    ports: [8081]
dns:
  upstream: ["%s"]
  hosts:
    api.example.test: [%s]
    app.test: [%s]
tls:
  upstream_ca: %s
credentials:
  - name: api
    from: {env: NSGATE_IT_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
`, credPort, internet.UpstreamDNS, internet.AppV4, internet.AppV4, caFile)
}

// credRun resets up and makes a work folder holding up's CA and
// credPolicy for it; it returns the folder, the policy and an audit log
// path in it, for one mode's run.
func credRun(t *testing.T, m mode, up *credUpstream) (dir, pol, log string) {
	t.Helper()
	up.reset()
	dir = workDir(t, m)
	caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
	pol = writeFile(t, dir, "policy.yaml", credPolicy(caFile))
	return dir, pol, filepath.Join(dir, "audit.jsonl")
}

// TestCredentialsCurl: curl in the worker, with no CA flag, reaches the
// terminated host; the upstream gets the real secret, the worker sees only
// the placeholder (its environment holds no secret, the echo comes back
// scrubbed); a refused method and path get nsgate's 403 with no request
// upstream; h2 works; every request is audited and the secret is in no
// record.
func TestCredentialsCurl(t *testing.T) {
	up := startCredUpstream(t)
	rec := startRecordingHTTP(t)
	forEachMode(t, func(t *testing.T, m mode) {
		_, pol, log := credRun(t, m, up)
		base := "https://api.example.test:" + fmt.Sprint(credPort)
		script := strings.Join([]string{
			`curl -sS --http1.1 -H "Authorization: Bearer $API_TOKEN" ` + base + `/echo; echo`,
			`curl -sS --http2 -H "Authorization: Bearer $API_TOKEN" ` + base + `/echo; echo`,
			`curl -s -o /dev/null -w "del=%{http_code}\n" -X DELETE ` + base + `/repos/acme/app`,
			`curl -s -o /dev/null -w "path=%{http_code}\n" ` + base + `/admin`,
			`curl -s -o /dev/null -w "leak=%{http_code}\n" "` + base + `/repos/acme/app?t=$API_TOKEN"`,
			`curl -s -o /dev/null -w "front=%{http_code}\n" --http1.1 -H "Host: other.example.test" ` + base + `/echo`,
			`curl -s -o /dev/null -w "h2front=%{http_code} %{http_version}\n" --http2 -H "Host: other.example.test" ` + base + `/echo`,
			`/usr/bin/python3 -c "import os,urllib.request as u; r=u.Request('` + base + `/echo', headers={'Authorization': 'Bearer '+os.environ['API_TOKEN']}); print('py', u.urlopen(r).read().decode())"`,
			`node -e "fetch('` + base + `/echo', {headers: {Authorization: 'Bearer ' + process.env.API_TOKEN}}).then(r => r.text()).then(t => console.log('node', t))"`,
			`curl -s -o /dev/null -w "other=%{http_code}\n" "http://app.test:8081/?t=$API_TOKEN"`,
			`curl -s -o /dev/null -w "dns=%{http_code}\n" "https://$API_TOKEN.app.test:8443/"; echo dnsexit=$?`,
			`curl -s -o /dev/null --pinnedpubkey "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" ` + base + `/echo; echo pinned=$?`,
			`/usr/bin/python3 -c "` + fmt.Sprintf(wsScript, credPort) + `"`,
			`env`,
		}, "\n")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--exec-allow", "/usr/bin/env", "--exec-allow", "/usr/bin/python3.11", "--exec-allow", "/usr/bin/node", "--", "sh", "-c", script)
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		rec.reset()
		r := runBounded(t, cmd, 60*time.Second, "nsgate run (credentials)", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		if strings.Contains(r.stdout, credSecret) || strings.Contains(r.stderr, credSecret) {
			t.Errorf("the worker saw the secret")
		}
		if strings.Count(r.stdout, "Bearer nsgph") != 4 || !strings.Contains(r.stdout, "py echo") || !strings.Contains(r.stdout, "node echo") || !strings.Contains(r.stdout, "API_TOKEN=nsgph") {
			t.Errorf("the worker did not get its echo with the placeholder:\n%s", r.stdout)
		}
		for _, want := range []string{"del=403", "path=403", "leak=403", "front=403", "h2front=403 2", "101 ws-echo hello", "other=000", "dnsexit=6", "pinned=90"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("missing %s in:\n%s", want, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") || strings.Contains(r.stdout, "NSGATE_IT_SECRET") {
			t.Errorf("worker environment wrong:\n%s", r.stdout)
		}
		auths, paths, protos := up.seen()
		if len(auths) != 4 || !slices.Contains(paths, "ws:/repos/acme/ws") {
			t.Errorf("upstream got %d requests, paths %q; want 4 (curl h1, curl h2, python, node)", len(auths), paths)
		}
		for _, a := range auths[:min(4, len(auths))] {
			if a != "Bearer "+credSecret {
				t.Errorf("upstream got Authorization %q, want the secret", a)
			}
		}
		for _, p := range protos {
			if p != "HTTP/2.0" {
				t.Errorf("upstream protos %q: want h2 upstream (ALPN)", protos)
			}
		}
		// The flow is dialled before its first bytes (decide, dial,
		// complete), so the server sees a connection, but not one byte.
		if n := rec.bytes.Load(); n != 0 || len(rec.served()) != 0 {
			t.Errorf("app.test:%d read %d bytes (%q), want none: the placeholder reached another host", keepAlivePort, n, rec.served())
		}
		var allow, deny, cred int
		wheres := map[string]bool{}
		for _, ar := range readAudit(t, log) {
			if strings.Contains(fmt.Sprint(ar), credSecret) {
				t.Errorf("audit record holds the secret: %v", ar)
			}
			switch {
			case ar.str("event") == "request" && ar.str("action") == "allow":
				allow++
			case ar.str("event") == "request" && ar.str("action") == "deny":
				deny++
			case ar.str("event") == "credential":
				cred++
				wheres[ar.str("where")] = true
			}
		}
		if allow != 5 || deny != 5 || !wheres["the URL"] || !wheres["a passthrough flow's first bytes"] || !wheres["a DNS name"] {
			t.Errorf("audit: %d allowed requests, %d refused, credential denies in %v; want 5, 5, and the URL, another host, a DNS name", allow, deny, wheres)
		}
	})
}

// TestCredentialsBreak: with the credential and request-rule layers
// switched off (--unsafe-break), the refused requests of
// TestCredentialsCurl get through, so that test can fail.
func TestCredentialsBreak(t *testing.T) {
	up := startCredUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir, pol, _ := credRun(t, m, up)
		base := "https://api.example.test:" + fmt.Sprint(credPort)
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", filepath.Join(dir, "a.jsonl"), "--unsafe-break", "credentials,request-rules",
			"--exec-allow", "/usr/bin/curl", "--", "sh", "-c", `curl -s -o /dev/null -w "code=%{http_code}\n" "`+base+`/admin?t=$API_TOKEN"`)
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		r := runBounded(t, cmd, 60*time.Second, "nsgate run (break)", nil)
		_, paths, _ := up.seen()
		if !strings.Contains(r.stdout, "code=200") || !slices.Equal(paths, []string{"/admin"}) {
			t.Errorf("with the layers broken: %q, upstream paths %q; want the refused request through", r.stdout, paths)
		}
		if !strings.Contains(r.stderr, "credentials,request-rules") {
			t.Errorf("the run did not say the layers are off: %s", r.stderr)
		}
	})
}

// TestCredentialsChromium: headless Chromium, with no certificate flag,
// trusts the run's CA (the NSS database nsgate writes in the private home)
// and loads a page of the terminated host.
func TestCredentialsChromium(t *testing.T) {
	needChromium(t)
	up := startCredUpstream(t)
	t.Setenv("NSGATE_IT_SECRET", credSecret)
	forEachMode(t, func(t *testing.T, m mode) {
		dir, _, _ := credRun(t, m, up)
		r := runChromium(t, m, dir, "cred", "https://api.example.test:"+fmt.Sprint(credPort)+"/echo", chromiumNeeds)
		_, paths, _ := up.seen()
		if !strings.Contains(r.stdout, "echo HTTP/2.0") || !slices.Contains(paths, "/echo") {
			t.Errorf("Chromium did not load the terminated page: exit %d, stdout %q, upstream paths %q", r.code, r.stdout, paths)
		}
		for _, rec := range r.audit {
			if rec.str("event") == "request" && rec.str("path") == "/echo" && rec.str("action") == "allow" {
				return
			}
		}
		t.Errorf("no allowed request record for /echo")
	})
}

// TestCredentialsPlaceholderFile: a credential's placeholder_file lands in
// the worker's private home; a request that reads it there gets the real
// secret added upstream, and the worker never sees the secret. With
// --home DIR the run refuses to start instead of starting without it.
func TestCredentialsPlaceholderFile(t *testing.T) {
	up := startCredUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		up.reset()
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		text := strings.Replace(credPolicy(caFile), "    placeholder_env: API_TOKEN\n", "    placeholder_file: ~/.config/api/token\n", 1)
		if !strings.Contains(text, "placeholder_file") {
			t.Fatal("credPolicy changed: no placeholder_env line to replace")
		}
		pol := writeFile(t, dir, "policy.yaml", text)
		log := filepath.Join(dir, "audit.jsonl")
		base := "https://api.example.test:" + fmt.Sprint(credPort)
		py := `import os,urllib.request as u; tok=open(os.path.expanduser('~/.config/api/token')).read().strip(); print('tok', tok); r=u.Request('` + base + `/echo', headers={'Authorization': 'Bearer '+tok}); print('py', u.urlopen(r).read().decode())`
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--", "/usr/bin/python3", "-c", py)
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		r := runBounded(t, cmd, 60*time.Second, "nsgate run (placeholder_file)", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		if r.code != 0 || !strings.Contains(r.stdout, "tok nsgph") || !strings.Contains(r.stdout, "py echo") {
			t.Errorf("exit %d: the worker did not read its placeholder file and get its echo:\n%s", r.code, r.stdout)
		}
		if strings.Contains(r.stdout, credSecret) || strings.Contains(r.stderr, credSecret) {
			t.Errorf("the worker saw the secret")
		}
		auths, _, _ := up.seen()
		if len(auths) != 1 || auths[0] != "Bearer "+credSecret {
			t.Errorf("upstream got Authorization %q; want the secret once", auths)
		}

		up.reset()
		home := filepath.Join(dir, "home")
		os.Mkdir(home, 0o755)
		if m.uid >= 0 {
			os.Chown(home, m.uid, m.gid)
		}
		cmd = nsgateCmd(m, "run", "--policy", pol, "--home", home, "--", "/usr/bin/python3", "-c", py)
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		r = runBounded(t, cmd, 60*time.Second, "nsgate run (placeholder_file, --home)", nil)
		if r.code != 125 || !strings.Contains(r.stderr, "placeholder_file ~/.config/api/token needs nsgate's private home") {
			t.Errorf("with --home: exit %d stderr %q; want 125 naming placeholder_file", r.code, r.stderr)
		}
		if auths, _, _ := up.seen(); len(auths) != 0 {
			t.Errorf("with --home the upstream got %d requests, want 0", len(auths))
		}
	})
}
