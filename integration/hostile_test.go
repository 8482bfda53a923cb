//go:build integration

package integration

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/tlsca"
)

// hostileUpstream is the attack rounds' fake upstream (attack13_test.go
// and on): TLS on a lab address with certificates from a CA of its own,
// one for each name a client asks for (api.example.test when it asks for
// none), recording what it got.
type hostileUpstream struct {
	ca  *tlsca.CA
	mu  sync.Mutex
	got []string
}

func (u *hostileUpstream) log(s string) {
	u.mu.Lock()
	u.got = append(u.got, s)
	u.mu.Unlock()
}

func (u *hostileUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

// listen serves serve on internet.AppV4:port over TLS with ALPN protos
// until the test ends.
func (u *hostileUpstream) listen(t *testing.T, port int, protos []string, serve http.HandlerFunc) {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u.ca = ca
	ln, err := net.Listen("tcp", net.JoinHostPort(internet.AppV4, fmt.Sprint(port)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{
		Handler:           serve,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{NextProtos: protos, GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if h.ServerName == "" {
				return ca.Leaf("api.example.test")
			}
			return ca.Leaf(h.ServerName)
		}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
}
