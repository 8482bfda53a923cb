//go:build integration

package integration

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/nsgate/nsgate/lab/internet"
)

// HTTP/3 through nsgate (UDP by name, the QUIC Initial check): a real QUIC server and
// clients from a Go QUIC library in test code only. The server listens on
// app.test's IPv6 address (UDP 443 on its IPv4 address is the lab's echo
// service); the policy's dns.hosts sends app.test there.

const quicPolicy = `version: 1
allow:
  - host: app.test
    ports: [443, 8443]
    proto: udp
dns:
  hosts:
    app.test: ["` + internet.AppV6 + `"]
`

const h3Body = "hello from app over http/3"

// countingPC counts the datagrams a server receives; snis are the TLS
// server names of the connections the server began.
type countingPC struct {
	net.PacketConn
	n    atomic.Int64
	mu   sync.Mutex
	snis []string
}

// sawSNI reports whether the server began a connection naming name.
func (c *countingPC) sawSNI(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.snis, name)
}

func (c *countingPC) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.n.Add(1)
	}
	return n, a, err
}

// h3Server serves h3Body over HTTP/3 at [AppV6]:443 with a certificate for
// app.test from the fake internet's CA, until the test ends. It returns
// the datagram counter and the certificate.
func h3Server(t *testing.T) (*countingPC, *x509.Certificate) {
	t.Helper()
	c, cert := h3Listen(t, "443")
	pc := c.PacketConn
	srv := &http3.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html><body>" + h3Body + " (" + r.Proto + ")</body></html>"))
		}),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
	}
	inner := srv.TLSConfig.GetConfigForClient
	srv.TLSConfig.GetConfigForClient = func(ch *tls.ClientHelloInfo) (*tls.Config, error) {
		c.mu.Lock()
		c.snis = append(c.snis, ch.ServerName)
		c.mu.Unlock()
		if inner != nil {
			return inner(ch)
		}
		return nil, nil
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(c) }()
	t.Cleanup(func() { srv.Close(); pc.Close(); <-done })
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c, leaf
}

// h3RetryServer serves h3Body over HTTP/3 at [AppV6]:8443 and answers
// every new connection with a Retry (address validation), as a server
// under load does: the client then starts over with the server's
// connection ID (4 bytes from quic-go) and a token. It returns the
// datagram counter.
func h3RetryServer(t *testing.T) *countingPC {
	t.Helper()
	c, cert := h3Listen(t, "8443")
	pc := c.PacketConn
	tr := &quic.Transport{Conn: c, VerifySourceAddress: func(net.Addr) bool { return true }}
	ln, err := tr.ListenEarly(http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}), &quic.Config{})
	if err != nil {
		t.Fatalf("h3 retry server: %v", err)
	}
	srv := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html><body>" + h3Body + " (" + r.Proto + ", after a retry)</body></html>"))
	})}
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeListener(ln) }()
	t.Cleanup(func() { srv.Close(); ln.Close(); tr.Close(); pc.Close(); <-done })
	return c
}

// h3Listen opens an HTTP/3 server's UDP socket on app.test's IPv6 address
// and port, counted, and issues its certificate for app.test from the
// fake internet's CA.
func h3Listen(t *testing.T, port string) (*countingPC, tls.Certificate) {
	t.Helper()
	cert, err := inet.CA().Issue([]string{internet.AppName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", net.JoinHostPort(internet.AppV6, port))
	if err != nil {
		t.Fatalf("h3 server on port %s: %v", port, err)
	}
	return &countingPC{PacketConn: pc}, cert
}

// buildH3Get builds the test's HTTP/3 client (integration/h3get) into dir.
func buildH3Get(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "h3get")
	cmd := exec.Command("go", "build", "-o", bin, "./integration/h3get")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build h3get: %v\n%s", err, out)
	}
	os.Chmod(bin, 0o755)
	return bin
}

// l7Records returns the l7 records with action.
func l7Records(recs []record, action string) []record {
	var out []record
	for _, r := range recs {
		if r.str("event") == "l7" && r.str("action") == action {
			out = append(out, r)
		}
	}
	return out
}

func TestQUICHTTP3(t *testing.T) {
	needSealed(t)
	srv, _ := h3Server(t)
	retrySrv := h3RetryServer(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		bin := buildH3Get(t, dir)
		pol := writeFile(t, dir, "policy.yaml", quicPolicy)
		ca := inet.CAFile()
		run := func(log string, args ...string) result {
			return runNsgate(t, m, append([]string{"run", "--policy", pol, "--audit", filepath.Join(dir, log), "--ro", ca, "--"}, args...)...)
		}

		t.Run("fetch", func(t *testing.T) {
			before := srv.n.Load()
			r := run("fetch.jsonl", bin, "-ca", ca, "https://app.test/")
			if r.code != 0 || !strings.Contains(r.stdout, "HTTP/3.0 200") || !strings.Contains(r.stdout, h3Body) {
				t.Fatalf("HTTP/3 fetch through nsgate: exit %d %q", r.code, r.stdout)
			}
			if srv.n.Load() == before {
				t.Fatal("the server saw no datagram")
			}
			recs := readAudit(t, filepath.Join(dir, "fetch.jsonl"))
			allow := l7Records(recs, "allow")
			if len(allow) == 0 || allow[0].str("sni") != "app.test" || len(l7Records(recs, "deny")) != 0 {
				t.Fatalf("l7 records: allow %v, deny %v", allow, l7Records(recs, "deny"))
			}
		})

		t.Run("other sni", func(t *testing.T) {
			before := srv.n.Load()
			r := run("evil.jsonl", bin, "-ca", ca, "-sni", "evil.test", "-timeout", "6s", "https://app.test/")
			if r.code == 0 {
				t.Fatalf("HTTP/3 with SNI evil.test got through: %q", r.stdout)
			}
			if n := srv.n.Load() - before; n != 0 {
				t.Fatalf("the server received %d datagrams", n)
			}
			deny := l7Records(readAudit(t, filepath.Join(dir, "evil.jsonl")), "deny")
			if len(deny) == 0 || deny[0].str("sni") != "evil.test" || deny[0].str("host") != "app.test" || deny[0].str("reason") != "sni does not match" {
				t.Fatalf("l7 deny records: %v", deny)
			}
		})

		// A second QUIC connection on the first one's socket (the same
		// 5-tuple, a flow already relayed) is checked like the first.
		t.Run("second connection", func(t *testing.T) {
			r := run("second.jsonl", bin, "-ca", ca, "-then-sni", "evil.test", "-timeout", "6s", "https://app.test/")
			if r.code != 0 || !strings.Contains(r.stdout, "HTTP/3.0 200") || !strings.Contains(r.stdout, "second: error") {
				t.Fatalf("first fetch, then a second connection naming evil.test: exit %d %q", r.code, r.stdout)
			}
			if srv.sawSNI("evil.test") {
				t.Fatal("the server began a connection naming evil.test")
			}
			recs := readAudit(t, filepath.Join(dir, "second.jsonl"))
			allow, deny := l7Records(recs, "allow"), l7Records(recs, "deny")
			if len(allow) != 1 || len(deny) == 0 || deny[0].str("sni") != "evil.test" || deny[0].str("reason") != "sni does not match" ||
				deny[0].num("flow") != allow[0].num("flow") {
				t.Fatalf("l7 records: allow %v, deny %v", allow, deny)
			}
		})

		// A Retry makes the client start over under the server's
		// (short) connection ID: that Initial is read and checked as a
		// later connection of the flow, and passes.
		t.Run("retry", func(t *testing.T) {
			before := retrySrv.n.Load()
			r := run("retry.jsonl", bin, "-ca", ca, "https://app.test:8443/")
			if r.code != 0 || !strings.Contains(r.stdout, "after a retry") {
				t.Fatalf("HTTP/3 fetch through a Retry: exit %d %q", r.code, r.stdout)
			}
			if retrySrv.n.Load() == before {
				t.Fatal("the retry server saw no datagram")
			}
			recs := readAudit(t, filepath.Join(dir, "retry.jsonl"))
			if allow, deny := l7Records(recs, "allow"), l7Records(recs, "deny"); len(allow) != 2 || len(deny) != 0 {
				t.Fatalf("l7 records: allow %v, deny %v; want the first Initial and the one after the Retry", allow, deny)
			}
		})

		t.Run("second connection same name", func(t *testing.T) {
			r := run("again.jsonl", bin, "-ca", ca, "-then-sni", "app.test", "https://app.test/")
			if r.code != 0 || !strings.Contains(r.stdout, "second: HTTP/3.0 200") {
				t.Fatalf("two connections naming app.test on one socket: exit %d %q", r.code, r.stdout)
			}
			recs := readAudit(t, filepath.Join(dir, "again.jsonl"))
			if allow, deny := l7Records(recs, "allow"), l7Records(recs, "deny"); len(allow) != 2 || len(deny) != 0 {
				t.Fatalf("l7 records: allow %v, deny %v", allow, deny)
			}
		})

		t.Run("garbage", func(t *testing.T) {
			before := srv.n.Load()
			r := run("garbage.jsonl", nsgateBin, "__probe", "udp", "app.test:443")
			if r.code == 0 || !strings.HasPrefix(r.stdout, "refused") {
				t.Fatalf("a non-QUIC datagram to app.test:443: exit %d %q", r.code, r.stdout)
			}
			if n := srv.n.Load() - before; n != 0 {
				t.Fatalf("the server received %d datagrams", n)
			}
			deny := l7Records(readAudit(t, filepath.Join(dir, "garbage.jsonl")), "deny")
			if len(deny) == 0 || !strings.HasPrefix(deny[0].str("reason"), "quic: ") {
				t.Fatalf("l7 deny records: %v", deny)
			}
		})
	})
}

// TestQUICChromium: Chromium forced onto QUIC fetches app.test over
// HTTP/3 through nsgate.
func TestQUICChromium(t *testing.T) {
	needChromium(t)
	needSealed(t)
	srv, leaf := h3Server(t)
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		writeFile(t, dir, "policy.yaml", quicPolicy)
		before := srv.n.Load()
		r := runChromium(t, m, dir, "h3", "https://app.test/", chromiumNeeds, chromiumFlags{Browser: []string{
			"--enable-quic", "--origin-to-force-quic-on=app.test:443",
			"--ignore-certificate-errors-spki-list=" + base64.StdEncoding.EncodeToString(spki[:])}})
		if !strings.Contains(r.stdout, h3Body+" (HTTP/3.0)") {
			t.Fatalf("Chromium did not get the page over HTTP/3: exit %d, stdout %q", r.code, r.stdout)
		}
		if srv.n.Load() == before {
			t.Fatal("the server saw no datagram")
		}
		allow := l7Records(r.audit, "allow")
		if len(allow) == 0 || allow[0].str("sni") != "app.test" || len(l7Records(r.audit, "deny")) != 0 {
			t.Fatalf("l7 records: allow %v, deny %v", allow, l7Records(r.audit, "deny"))
		}
	})
}
