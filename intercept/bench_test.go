package intercept

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
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
