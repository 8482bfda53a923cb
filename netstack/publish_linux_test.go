package netstack

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// TestDialGuestSource: an inbound connection reaches the worker from the
// host-side client's own address (as under libslirp), or from the gateway
// when the client is on the host's loopback or unknown; data flows both
// ways either way (the worker's answers to a foreign address come back to
// the gateway's endpoint).
func TestDialGuestSource(t *testing.T) {
	h := newHarness(t)
	fa, p := fullAddr(ap(Guest4 + ":8080"))
	ln, err := gonet.ListenTCP(h.worker, fa, p)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct{ client, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:198.51.100.9", "198.51.100.9"},
		{"127.0.0.1", Gateway4},
		{"127.3.4.5", Gateway4},
		{"", Gateway4},
		{"2001:db8::7", Gateway4}, // IPv6 client, IPv4 worker
		{"10.0.2.50", Gateway4},   // inside the worker's network
		{"198.18.0.9", Gateway4},  // nsgate's fake-IP range
	} {
		var client netip.Addr
		if tc.client != "" {
			client = netip.MustParseAddr(tc.client)
		}
		accepted := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				accepted <- "accept: " + err.Error()
				return
			}
			defer c.Close()
			from := netip.MustParseAddrPort(c.RemoteAddr().String()).Addr().String()
			c.Write([]byte("hi " + from))
			accepted <- from
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := h.g.DialGuest(ctx, "tcp", client, ap(Guest4+":8080"))
		cancel()
		if err != nil {
			t.Fatalf("client %q: DialGuest: %v", tc.client, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		from := <-accepted
		if from != tc.want || string(b) != "hi "+tc.want || err != nil {
			t.Errorf("client %q: worker saw %s and sent %q (%v), want %s", tc.client, from, b, err, tc.want)
		}
	}
}

// TestDialGuestSourceUDP: the same for a UDP forward's flow.
func TestDialGuestSourceUDP(t *testing.T) {
	h := newHarness(t)
	fa, p := fullAddr(ap(Guest4 + ":5353"))
	pc, err := gonet.DialUDP(h.worker, &fa, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := h.g.DialGuest(context.Background(), "udp", netip.MustParseAddr("192.0.2.7"), ap(Guest4+":5353"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	pc.SetDeadline(time.Now().Add(5 * time.Second))
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := netip.MustParseAddrPort(from.String()).Addr().String(); got != "192.0.2.7" || string(buf[:n]) != "ping" {
		t.Fatalf("worker got %q from %s, want ping from 192.0.2.7", buf[:n], got)
	}
	if _, err := pc.WriteTo([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("answer through the gateway: %q %v", buf[:n], err)
	}
}
