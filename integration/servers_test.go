//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// target is a fake internet host: a listener that counts every connection
// (or datagram) it receives, so a block test can assert that nothing
// arrived.
type target struct {
	name string
	hits atomic.Int64
}

func (t *target) count() int64 { return t.hits.Load() }

var (
	targetsMu sync.Mutex
	targets   = map[string]*target{} // by "ip:port/proto"
)

// targetAt returns the counter of the fake server at addr ("ip:port/tcp").
func targetAt(addr string) *target {
	targetsMu.Lock()
	defer targetsMu.Unlock()
	return targets[addr]
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	t *target
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.t.hits.Add(1)
	}
	return c, err
}

// serveHTTP starts an HTTP server on addr answering body.
func serveHTTP(addr, body string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	t := &target{name: addr}
	targetsMu.Lock()
	targets[addr+"/tcp"] = t
	targetsMu.Unlock()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s\n", body)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(countingListener{ln, t})
	return nil
}

// serveUDPEcho starts a UDP echo server on addr.
func serveUDPEcho(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("listen udp %s: %w", addr, err)
	}
	t := &target{name: addr}
	targetsMu.Lock()
	targets[addr+"/udp"] = t
	targetsMu.Unlock()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			t.hits.Add(1)
			pc.WriteTo(buf[:n], from)
		}
	}()
	return nil
}

func startServers() error {
	for _, s := range []struct{ addr, body string }{
		{net.JoinHostPort(appV4, "8080"), "hello from app"},
		{net.JoinHostPort(appV6, "8080"), "hello from app v6"},
		{net.JoinHostPort(appV4, "9090"), "app on a port the policy does not allow"},
		{net.JoinHostPort(otherV4, "8080"), "unapproved server"},
		{net.JoinHostPort(metadataV4, "80"), "fake metadata: iam credentials"},
		{"127.0.0.1:8080", "host loopback service"},
		{"[::1]:8080", "host loopback service v6"},
	} {
		if err := serveHTTP(s.addr, s.body); err != nil {
			return err
		}
	}
	for _, a := range []string{net.JoinHostPort(appV4, "5353"), net.JoinHostPort(otherV4, "9999"), net.JoinHostPort(metadataV4, "53")} {
		if err := serveUDPEcho(a); err != nil {
			return err
		}
	}
	return nil
}
