package netstack

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// httpNamePolicy allows app.test on port 80 with the Host check on.
const httpNamePolicy = `
version: 1
allow:
  - {host: app.test, ports: [80]}
`

// recordingServer serves on loopback: it reads each connection to its end
// and sends everything it read on the returned channel.
func recordingServer(t testing.TB) (string, <-chan []byte) {
	got := make(chan []byte, 16)
	addr := serveTCP(t, func(c *net.TCPConn) {
		var b bytes.Buffer
		io.Copy(&b, c)
		got <- b.Bytes()
	})
	return addr, got
}

func nameHarness(t testing.TB, upstream string) *harness {
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.5"): "app.test"},
		answers: map[string][]netip.Addr{"app.test": {mustAddr("203.0.113.10")}},
	}
	h := newHarness(t, withNames(names), withPolicy(t, httpNamePolicy))
	h.dialer.route("tcp", "203.0.113.10:80", upstream)
	return h
}

// TestL7EveryRequest: on a plain HTTP flow opened by name, every request
// is checked, whatever read it arrives in; a refused one resets the
// worker, none of its bytes reach upstream, and an l7 deny record says
// why. Controls pass every byte.
func TestL7EveryRequest(t *testing.T) {
	const (
		get     = "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"
		getEvil = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"
		chunked = "POST / HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n"
	)
	tests := []struct {
		name   string
		why    string
		parts  []string // written one by one, a pause between
		wantUp string   // what upstream must have read, exactly
		reason string   // the l7 deny record's reason; "" for a control
	}{
		{"keep-alive right host", "a second request to the same host passes",
			[]string{get, get}, get + get, ""},
		{"chunked post then get", "a chunked body, then the next request",
			[]string{chunked + "5\r\nhel", "lo\r\n0\r\n\r\n", get}, chunked + "5\r\nhello\r\n0\r\n\r\n" + get, ""},
		{"kept-alive other host", "the second request names another host",
			[]string{get, getEvil}, get, "host does not match"},
		{"pipelined other host", "two requests in one write: the refused one never leaves",
			[]string{get + getEvil}, "", "host does not match"},
		{"head split over reads", "a held head is not forwarded before it is checked",
			[]string{get, "GET / HTTP/1.1\r\nHo", "st: evil.test\r\n\r\n"}, get, "host does not match"},
		{"cl+te smuggling", "ambiguous framing is refused",
			[]string{get, "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + getEvil}, get,
			"http: both Content-Length and Transfer-Encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, got := recordingServer(t)
			h := nameHarness(t, up)
			c, err := h.dialTCP("198.18.0.5:80")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, seq := h.sink.flowBySrc(t, c.LocalAddr().String())
			for _, p := range tt.parts {
				c.Write([]byte(p))
				time.Sleep(30 * time.Millisecond)
			}
			if tt.reason == "" {
				c.CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, rerr := io.ReadAll(c)
			var seen []byte
			select {
			case seen = <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("upstream never ended (%s)", tt.why)
			}
			if string(seen) != tt.wantUp {
				t.Fatalf("upstream read %q, want %q (%s)", seen, tt.wantUp, tt.why)
			}
			if tt.reason == "" {
				if rerr != nil || h.sink.hasL7Deny(seq) {
					t.Fatalf("control: read error %v, l7 deny %v%s", rerr, h.sink.hasL7Deny(seq), h.sink.dump())
				}
				if n := h.g.Stats().L7Refused; n != 0 {
					t.Fatalf("control: L7Refused %d, want 0", n)
				}
				return
			}
			if rerr == nil {
				t.Fatalf("worker saw a clean end, want a reset (%s)", tt.why)
			}
			ev, _ := h.sink.waitEvent(t, "l7 deny", func(ev audit.Event) bool {
				r, ok := ev.(audit.L7)
				return ok && r.FlowSeq == seq && r.Action == "deny"
			})
			if r := ev.(audit.L7); r.Reason != tt.reason {
				t.Fatalf("l7 record %+v, want reason %q (%s)", r, tt.reason, tt.why)
			}
			waitL7Refused(t, h, 1)
		})
	}
}

// waitL7Refused waits a little for the gateway's L7Refused counter
// (counted just after the l7 deny record is written) to reach want, and
// fails if it does not, or goes past it.
func waitL7Refused(t *testing.T, h *harness, want uint64) {
	t.Helper()
	var n uint64
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n = h.g.Stats().L7Refused; n >= want {
			break
		}
	}
	if n != want {
		t.Fatalf("L7Refused %d, want %d", n, want)
	}
}

// hasL7Deny reports whether there is an l7 deny record of the flow
// record seq.
func (s *fakeSink) hasL7Deny(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		if r, ok := ev.(audit.L7); ok && r.FlowSeq == seq && r.Action == "deny" {
			return true
		}
	}
	return false
}

// BenchmarkHTTPKeepAlive sends kept-alive requests through a flow opened
// by name, so every byte goes through the HTTP inspector: "requests" is
// 64 small GETs per op, "chunked" a 32 KiB chunk of an endless chunked
// upload per op.
func BenchmarkHTTPKeepAlive(b *testing.B) {
	const get = "GET /index.html HTTP/1.1\r\nHost: app.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n", 32<<10, strings.Repeat("x", 32<<10))
	for _, bc := range []struct {
		name, first, op string
	}{
		{"requests", get, strings.Repeat(get, 64)},
		{"chunked", "POST /up HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n", chunk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := serveTCP(b, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
			h := nameHarness(b, up)
			c, err := h.dialTCP("198.18.0.5:80")
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(bc.first)); err != nil {
				b.Fatal(err)
			}
			op := []byte(bc.op)
			b.SetBytes(int64(len(op)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Write(op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestL7SSHBannerExchange: a server-first protocol on a flow opened by
// name: the server's banner reaches the worker before it sends anything,
// and the worker's answer (an SSH banner, then binary packets) passes as
// "other", unheld and unfiltered.
func TestL7SSHBannerExchange(t *testing.T) {
	const banner = "SSH-2.0-OpenSSH_9.6\r\n"
	h := nameHarness(t, tcpServer(t, banner))
	c, err := h.dialTCP("198.18.0.5:80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(banner))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != banner {
		t.Fatalf("banner %q, %v", got, err)
	}
	answer := "SSH-2.0-client\r\n\x00\x00\x01\x0c\x0a\x14" + strings.Repeat("\x00", 16)
	c.Write([]byte(answer))
	echo := make([]byte, len(answer))
	if _, err := io.ReadFull(c, echo); err != nil || string(echo) != answer {
		t.Fatalf("echo %q, %v", echo, err)
	}
	_, seq := h.sink.flowBySrc(t, c.LocalAddr().String())
	if h.sink.hasL7(seq) {
		t.Fatalf("an l7 record for an SSH exchange%s", h.sink.dump())
	}
}

// helloRecord is a TLS handshake record carrying clientHello(sni).
func helloRecord(sni string) []byte {
	m := clientHello(sni)
	return append([]byte{22, 3, 1, byte(len(m) >> 8), byte(len(m))}, m...)
}

// TestL7RefusalTellsTheWorker: a first request refused by the Host check
// gets nsgate's 403 naming the reason, and a ClientHello refused by the
// SNI check a TLS access_denied alert, each followed by a clean end, so an
// agent can tell a policy refusal from a network fault; nothing reaches
// upstream, and the l7 record is written. The policy can turn either off:
// then the worker is reset.
func TestL7RefusalTellsTheWorker(t *testing.T) {
	tests := []struct {
		name, policy string
		send         []byte
		want         string // prefix of what the worker reads; "" means a reset
		reason       string
	}{
		{"http 403", httpNamePolicy, []byte("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
			"HTTP/1.1 403 Forbidden\r\n", "host does not match"},
		{"tls alert", httpNamePolicy, helloRecord("evil.test"), string(tlsAccessDenied), "sni does not match"},
		{"http page off", httpNamePolicy + "http: {refusal_page: false}\n", []byte("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"), "", "host does not match"},
		{"tls alert off", httpNamePolicy + "tls: {refusal_alert: false}\n", helloRecord("evil.test"), "", "sni does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, got := recordingServer(t)
			names := &fakeNames{
				fake:    map[netip.Addr]string{mustAddr("198.18.0.5"): "app.test"},
				answers: map[string][]netip.Addr{"app.test": {mustAddr("203.0.113.10")}},
			}
			h := newHarness(t, withNames(names), withPolicy(t, tt.policy))
			h.dialer.route("tcp", "203.0.113.10:80", up)
			c, err := h.dialTCP("198.18.0.5:80")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, seq := h.sink.flowBySrc(t, c.LocalAddr().String())
			c.Write(tt.send)
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			read, rerr := io.ReadAll(c)
			switch {
			case tt.want == "" && rerr == nil:
				t.Fatalf("read %q and a clean end, want a reset", read)
			case tt.want != "" && (rerr != nil || !strings.HasPrefix(string(read), tt.want)):
				t.Fatalf("read %q, %v; want %q and a clean end", read, rerr, tt.want)
			}
			if tt.want == "HTTP/1.1 403 Forbidden\r\n" && (!strings.Contains(string(read), "host does not match") || !strings.Contains(string(read), "app.test")) {
				t.Fatalf("the 403 does not name the reason and the flow's name: %q", read)
			}
			select {
			case seen := <-got:
				if len(seen) != 0 {
					t.Fatalf("upstream read %q", seen)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("upstream never ended")
			}
			ev, _ := h.sink.waitEvent(t, "l7 deny", func(ev audit.Event) bool {
				r, ok := ev.(audit.L7)
				return ok && r.FlowSeq == seq && r.Action == "deny"
			})
			if r := ev.(audit.L7); r.Reason != tt.reason {
				t.Fatalf("l7 record %+v, want reason %q", r, tt.reason)
			}
			waitL7Refused(t, h, 1)
		})
	}
}

// TestL7WebSocketAnswer: the bytes after a WebSocket upgrade request are
// frames only once the server answered 101, which the gate learns from
// what it writes to the worker. After another answer they are requests
// again (the frame below, a request for evil.test to a Python server that
// hands any method on, is refused as one), and before any answer nothing
// may follow the upgrade request.
func TestL7WebSocketAnswer(t *testing.T) {
	const (
		wsUpg = "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
		// A final binary frame of 32 bytes: its length byte is NBSP.
		frame = "\x82\xa0/xxxxxx HTTP/1.1\r\nHost:evil.test\r\n\r\n"
	)
	tests := []struct {
		name   string
		answer string // the server's answer to the upgrade request; "" for none
		wantUp string
		reason string
	}{
		{"switched", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", wsUpg + frame, ""},
		{"not switched", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", wsUpg, "http: malformed request line"},
		{"no answer yet", "", wsUpg, "websocket: client bytes before the server answered the upgrade"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan []byte, 1)
			up := serveTCP(t, func(c *net.TCPConn) {
				var b bytes.Buffer
				buf := make([]byte, 4096)
				for !bytes.Contains(b.Bytes(), []byte("\r\n\r\n")) {
					n, err := c.Read(buf)
					b.Write(buf[:n])
					if err != nil {
						got <- b.Bytes()
						return
					}
				}
				if tt.answer != "" {
					c.Write([]byte(tt.answer))
				}
				io.Copy(&b, c)
				got <- b.Bytes()
			})
			h := nameHarness(t, up)
			c, err := h.dialTCP("198.18.0.5:80")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, seq := h.sink.flowBySrc(t, c.LocalAddr().String())
			c.Write([]byte(wsUpg))
			if tt.answer != "" {
				// A client waits for the answer before it sends frames.
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, len(tt.answer))); err != nil {
					t.Fatalf("read the answer: %v", err)
				}
			} else {
				time.Sleep(30 * time.Millisecond)
			}
			c.Write([]byte(frame))
			if tt.reason == "" {
				c.CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, rerr := io.ReadAll(c)
			var seen []byte
			select {
			case seen = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("upstream never ended")
			}
			if string(seen) != tt.wantUp {
				t.Fatalf("upstream read %q, want %q", seen, tt.wantUp)
			}
			if tt.reason == "" {
				if rerr != nil || h.sink.hasL7Deny(seq) {
					t.Fatalf("control: read error %v, l7 deny %v%s", rerr, h.sink.hasL7Deny(seq), h.sink.dump())
				}
				return
			}
			if rerr == nil {
				t.Fatal("worker saw a clean end, want a reset")
			}
			ev, _ := h.sink.waitEvent(t, "l7 deny", func(ev audit.Event) bool {
				r, ok := ev.(audit.L7)
				return ok && r.FlowSeq == seq && r.Action == "deny"
			})
			if r := ev.(audit.L7); r.Reason != tt.reason {
				t.Fatalf("l7 deny reason %q, want %q", r.Reason, tt.reason)
			}
		})
	}
}
