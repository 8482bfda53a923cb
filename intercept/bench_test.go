package intercept

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRequest compares one keep-alive GET through termination (worker
// TLS, rules, substitution, upstream TLS) with the same GET straight to the
// upstream, as a passthrough flow would carry it (docs/performance.md).
// New connections: the first-request cost, handshakes included.
func BenchmarkRequest(b *testing.B) {
	t := &testing.T{}
	r := newRig(t, nil)
	direct := func() *http.Client {
		tr := &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: r.up.ca.Pool(), ServerName: "api.example.test"},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", r.up.srv.Listener.Addr().String())
			},
			ForceAttemptHTTP2: true,
		}
		return &http.Client{Transport: tr}
	}
	get := func(b *testing.B, c *http.Client) {
		req, _ := http.NewRequest("GET", "https://api.example.test/repos/acme/app", nil)
		req.Header.Set("Authorization", "Bearer "+r.ph)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, tc := range []struct {
		name   string
		client func() *http.Client
	}{{"passthrough", direct}, {"terminated", func() *http.Client { return r.client(true) }}} {
		b.Run(tc.name+"/keepalive", func(b *testing.B) {
			c := tc.client()
			for b.Loop() {
				get(b, c)
			}
		})
		b.Run(tc.name+"/first", func(b *testing.B) {
			for b.Loop() {
				c := tc.client()
				get(b, c)
				c.CloseIdleConnections()
			}
		})
	}
}

// BenchmarkScrubBody: the response scrub over a 4 MiB body of JSON-like
// text that holds no secret (the common case), and one that holds the
// secret in changing case every 64 KiB.
func BenchmarkScrubBody(b *testing.B) {
	line := []byte(`{"id": 1234567, "name": "example-repo", "url": "https://api.example.test/repos/acme/app", "token_hint": "s3cr3t-TOKEN-"},` + "\n")
	clean := bytes.Repeat(line, (4<<20)/len(line))
	echo := bytes.Clone(clean)
	for i := 0; i+len(secret) < len(echo); i += 64 << 10 {
		s := secret
		if i%(128<<10) == 0 {
			s = strings.ToUpper(secret)
		}
		copy(echo[i:], s)
	}
	ph := placeholderPrefix + "0123456789abcdef0123456789abcdef01234567"
	// Every echo form of the secret, as the Vault makes them.
	es := newEchoSearch(secret, ph)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"clean", clean}, {"echo", echo}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				sb := &scrubBody{r: io.NopCloser(bytes.NewReader(tc.body)), echoes: []*echoSearch{es}, keep: es.maxLen - 1}
				io.Copy(io.Discard, sb)
			}
		})
	}
}
