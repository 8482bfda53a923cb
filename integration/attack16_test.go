//go:build integration

package integration

// Attack round 16 on the credential broker on terminated TLS: the
// streaming scrub's hold (holdFrom) with echoes split across upstream
// writes, and the secret back through trailers of a response to a
// WebSocket upgrade request the upstream did not switch. Written by an
// independent tester. A hostile raw HTTP/1.1 upstream on a lab address.
// Run: NSGATE_REQUIRE_ALL=1 go test -tags integration -count=1 -run TestAttack16 -v ./integration/

import (
	"bufio"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/tlsca"
)

const attack16Port = 9501

const secret16 = "it16SECRET/abc+def=0123~xyz-Q.r"

// secret16b starts with a byte that is not a letter or digit, so its
// first byte is escaped in every encoded form.
const secret16b = "+16/KEYx=98765-w"

// forms16 are the encodings the upstream echoes a secret in.
var forms16 = map[string]func(string) string{
	"raw":  func(s string) string { return s },
	"pct":  func(s string) string { return url.QueryEscape(s) },
	"json": func(s string) string { return dotnetJSON(s) },
	"html": func(s string) string { return phpHTML5(s) },
	"u16":  func(s string) string { return string(utf16le(s)) },
	"u16j": func(s string) string { return string(utf16le(dotnetJSON(s))) },
}

func startUp16(t *testing.T) *tlsca.CA {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(internet.AppV4, fmt.Sprint(attack16Port)), &tls.Config{
		NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{*cert}})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve16(c)
		}
	}()
	return ca
}

func serve16(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	r, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	sec := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if r.URL.Query().Get("k") == "b" {
		sec = r.Header.Get("X-Api-Key")
	}
	chunk := func(s string) { fmt.Fprintf(c, "%x\r\n%s\r\n", len(s), s) }
	switch r.URL.Path {
	case "/e/trailer", "/e/ws-trailer":
		// A chunked answer with the secret in an announced trailer and
		// in an unannounced one.
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Leak\r\nConnection: close\r\n\r\n")
		chunk("ok\n")
		fmt.Fprintf(c, "0\r\nX-Leak: %s\r\nX-Other: %s\r\n\r\n", sec, sec)
	case "/e/split":
		q := r.URL.Query()
		enc := forms16[q.Get("f")](sec)
		i, _ := strconv.Atoi(q.Get("i"))
		i = min(i, len(enc))
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
		chunk("token=" + enc[:i])
		time.Sleep(40 * time.Millisecond)
		chunk(enc[i:] + "\n")
		fmt.Fprintf(c, "0\r\n\r\n")
	default:
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
	}
}

func attack16Policy(caFile string) string {
	return fmt.Sprintf(`version: 1
allow:
  - host: api.example.test
    ports: [%d]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/e/*"]
dns:
  upstream: ["%s"]
  hosts:
    api.example.test: [%s]
tls:
  upstream_ca: %s
credentials:
  - name: api
    from: {env: NSGATE_IT16_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
  - name: key
    from: {env: NSGATE_IT16_KEY}
    placeholder_env: API_KEY
    hosts: [api.example.test]
    header: X-Api-Key
    format: "{}"
`, attack16Port, internet.UpstreamDNS, internet.AppV4, caFile)
}

const attack16Script = `
import os, ssl, socket, sys
PH = os.environ['API_TOKEN']
KPH = os.environ['API_KEY']
HOST = 'api.example.test'
PORT = %d
ctx = ssl.create_default_context()
def raw(data):
    c = ctx.wrap_socket(socket.create_connection((HOST, PORT), timeout=10), server_hostname=HOST)
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
def get(name, path, extra=''):
    return raw(('GET %%s HTTP/1.1\r\nHost: %%s\r\nAuthorization: Bearer %%s\r\nX-Api-Key: %%s\r\n%%sConnection: close\r\n\r\n' %% (path, HOST, PH, KPH, extra)).encode())
def show(name, b):
    print(name + ': ' + b.hex())
    sys.stdout.flush()
WS = 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n'
show('trailer', get('trailer', '/e/trailer'))
show('ws-trailer', get('ws-trailer', '/e/ws-trailer', WS))
# Only the Upgrade header: no Connection: Upgrade, no key; the proxy does not even ask the upstream to switch.
show('ws-trailer-bare', get('ws-trailer-bare', '/e/ws-trailer', 'Upgrade: websocket\r\n'))
for k, n in (('a', %d), ('b', %d)):
    for f in ('raw', 'pct', 'json', 'html', 'u16', 'u16j'):
        for i in range(0, n):
            show('split-%%s-%%s-%%d' %% (k, f, i), get('s', '/e/split?k=%%s&f=%%s&i=%%d' %% (k, f, i)))
print('DONE')
`

func TestAttack16(t *testing.T) {
	ca := startUp16(t)
	maxEnc := func(s string) int {
		n := 0
		for _, f := range forms16 {
			n = max(n, len(f(s)))
		}
		return n
	}
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(ca.PEM()))
		pol := writeFile(t, dir, "policy.yaml", attack16Policy(caFile))
		log := filepath.Join(dir, "audit.jsonl")
		script := fmt.Sprintf(attack16Script, attack16Port, maxEnc(secret16)+1, maxEnc(secret16b)+1)
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--", "/usr/bin/python3", "-c", script)
		cmd.Env = append(cmd.Env, "NSGATE_IT16_SECRET="+secret16, "NSGATE_IT16_KEY="+secret16b)
		r := runBounded(t, cmd, 400*time.Second, "nsgate run (attack16)", nil)
		t.Logf("exit %d\nstderr:\n%s", r.code, clip(r.stderr, 3000))
		sc := bufio.NewScanner(strings.NewReader(r.stdout))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seen := 0
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), ": ")
			if !ok {
				continue
			}
			b, err := hex.DecodeString(v)
			if err != nil {
				continue
			}
			seen++
			got := string(b)
			t.Run(name, func(t *testing.T) {
				if strings.Contains(name, "trailer") {
					t.Logf("%s: %q", name, got)
				}
				for _, s := range []string{secret16, secret16b} {
					for fn, f := range forms16 {
						if strings.Contains(strings.ToLower(got), strings.ToLower(f(s))) {
							t.Errorf("FINDING: %s: the worker got the secret (%s form): %q", name, fn, clip(got, 600))
						}
					}
				}
			})
		}
		if !strings.Contains(r.stdout, "DONE") || seen == 0 {
			t.Errorf("the attack script did not finish (%d lines): %s", seen, clip(r.stdout, 2000))
		}
	})
}
