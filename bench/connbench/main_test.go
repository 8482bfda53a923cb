package main

import (
	"io"
	"net"
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
