package netstack

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDialerConnectsAtOnce(t *testing.T) {
	ln, err := serveHi("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A closed port: listen, note the port, close.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	ln6, err6 := serveHi("[::1]:0")
	if err6 == nil {
		defer ln6.Close()
	}

	cases := []struct {
		name, network, addr string
		why                 string
		wantErr             string
	}{
		{"v4", "tcp", ln.Addr().String(), "a loopback destination connects (the fast path) and the connection works", ""},
		{"refused", "tcp", closedAddr, "a refused connect is the dial's error, named as connect's", "connect: connection refused"},
		{"udp", "udp", "127.0.0.1:9", "UDP is left to net.Dialer", ""},
	}
	if err6 == nil {
		cases = append(cases, struct {
			name, network, addr string
			why                 string
			wantErr             string
		}{"v6", "tcp", ln6.Addr().String(), "IPv6 takes the same path", ""})
	}
	d := newDialer()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := d.DialContext(ctx, tc.network, tc.addr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: err %v, want %q", tc.why, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.why, err)
			}
			defer c.Close()
			if tc.network != "tcp" {
				return
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 2)
			if n, err := c.Read(b); n != 2 || string(b) != "hi" {
				t.Fatalf("%s: read %q, %v", tc.why, b[:n], err)
			}
			if c.RemoteAddr().String() != tc.addr {
				t.Fatalf("%s: remote %s, want %s", tc.why, c.RemoteAddr(), tc.addr)
			}
		})
	}
}

func TestConnectNowCompletesLoopbackInTheHook(t *testing.T) {
	// The point of the hook: on loopback the socket is connected before
	// net.Dialer's own connect, which then returns without parking.
	ln, err := serveHi("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var connected bool
	d := &net.Dialer{ControlContext: func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if err := connectNow(ctx, network, address, c); err != nil {
			return err
		}
		return c.Control(func(fd uintptr) {
			_, err := unix.Getpeername(int(fd))
			connected = err == nil
		})
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !connected {
		t.Fatal("the socket was not connected when the hook returned: net.Dialer would wait in the poller")
	}
}

// serveHi listens on addr and answers each connection with "hi".
func serveHi(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	return ln, nil
}
