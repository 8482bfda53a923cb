package main

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// startForward runs forward on a fresh loopback listener relaying to
// target and returns the listener's address.
func startForward(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go forward(ln.(*net.TCPListener), target)
	return ln.Addr().String()
}

func TestProxy(t *testing.T) {
	// The backend reads to EOF and only then answers: this passes only if
	// the proxy passes the client's half-close on and keeps the other
	// direction open.
	back, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	go func() {
		for {
			c, err := back.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write(append([]byte("got:"), b...))
			}()
		}
	}()
	// An address nobody listens on: taken, then released.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	tests := []struct {
		name, target, want string
		why                string
	}{
		{"half-close", back.Addr().String(), "got:hello", "the request's EOF reaches the backend and its answer comes back after it"},
		{"dial fails", deadAddr, "", "a connection the proxy cannot complete is closed, not left hanging"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", startForward(t, tc.target))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write([]byte("hello"))
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("read: %v (%s)", err, tc.why)
			}
			if tc.want != "" && err != nil {
				t.Fatalf("read: %v (%s)", err, tc.why)
			}
			if string(got) != tc.want {
				t.Fatalf("got %q, want %q (%s)", got, tc.want, tc.why)
			}
		})
	}
}

// startLatencyServer runs serveLatency on a fresh loopback listener.
func startLatencyServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveLatency(c)
		}
	}()
	return ln.Addr().String()
}

func TestLatencyModes(t *testing.T) {
	addr := startLatencyServer(t)
	req := latRequest("bench.test")
	if len(req) != latReqSize {
		t.Fatalf("request is %d bytes, want %d", len(req), latReqSize)
	}
	for name, f := range map[string]func(string, []byte, int, int) ([]time.Duration, error){
		"keep": latencyKeep, "fresh": latencyFresh,
	} {
		s, err := f(addr, req, 2, 50)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(s) != 50 {
			t.Fatalf("%s: %d samples, want 50", name, len(s))
		}
		for _, d := range s {
			if d <= 0 {
				t.Fatalf("%s: sample %v", name, d)
			}
		}
		out := latencySummary(name, s)
		if !strings.HasPrefix(out, "mode="+name+" n=50 p50_us=") || !strings.Contains(out, " p999_us=") {
			t.Fatalf("%s: summary %q", name, out)
		}
	}
}

func TestLatencyShortResponse(t *testing.T) {
	// A server that answers with the head only: the kept-alive client
	// must fail on the missing body, not count the round trip.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, latReqSize)
		io.ReadFull(c, buf) // the request is exactly latReqSize bytes
		c.Write(make([]byte, latHeadSize))
		c.Close()
	}()
	if _, err := latencyKeep(ln.Addr().String(), latRequest("x"), 0, 1); err == nil {
		t.Fatal("a response without its body was counted")
	}
}
