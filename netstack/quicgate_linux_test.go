package netstack

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/l7"
)

// clientHello is a minimal TLS ClientHello handshake message naming sni.
func clientHello(sni string) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)    // random
	body = append(body, 0)                      // session id
	body = append(body, 0, 2, 0x13, 0x01, 1, 0) // suites, compression
	name := append([]byte{0, byte(len(sni) >> 8), byte(len(sni))}, sni...)
	list := append([]byte{byte(len(name) >> 8), byte(len(name))}, name...)
	ext := append([]byte{0, 0, byte(len(list) >> 8), byte(len(list))}, list...)
	body = append(body, byte(len(ext)>>8), byte(len(ext)))
	body = append(body, ext...)
	n := len(body)
	return append([]byte{1, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// initial is a QUIC v1 client Initial carrying CRYPTO data at off, padded
// to 1200 bytes.
func initial(t testing.TB, pn uint32, off int, data []byte) []byte {
	t.Helper()
	b, err := l7.BuildQUICInitial(l7.QUICInitial{
		Version: l7.QUICv1, DCID: []byte("quicgate-test"), PN: pn,
		Payload: l7.QUICCryptoFrame(off, data), PadTo: 1200,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// initialFor is a QUIC v1 client Initial of the connection dcid carrying
// CRYPTO data at off, padded to 1200 bytes.
func initialFor(t testing.TB, dcid string, pn uint32, off int, data []byte) []byte {
	t.Helper()
	b, err := l7.BuildQUICInitial(l7.QUICInitial{
		Version: l7.QUICv1, DCID: []byte(dcid), PN: pn,
		Payload: l7.QUICCryptoFrame(off, data), PadTo: 1200,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// countingEcho is a loopback UDP server that counts what it receives and
// echoes it.
type countingEcho struct {
	addr string
	n    atomic.Int64
	mu   sync.Mutex
	got  [][]byte
}

func newCountingEcho(t testing.TB) *countingEcho {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e := &countingEcho{addr: c.LocalAddr().String()}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			e.mu.Lock()
			e.got = append(e.got, append([]byte(nil), buf[:n]...))
			e.mu.Unlock()
			e.n.Add(1)
			c.WriteTo(buf[:n], from)
		}
	}()
	return e
}

const quicPolicy = `
version: 1
allow:
  - host: app.test
    ports: [443]
    proto: udp
  - host: voip.test
    ports: [443]
    proto: udp
    l7: none
`

func quicHarness(t *testing.T) (*harness, *countingEcho) {
	names := &fakeNames{
		fake: map[netip.Addr]string{
			mustAddr("198.18.0.10"): "app.test",
			mustAddr("198.18.0.11"): "voip.test",
		},
		answers: map[string][]netip.Addr{
			"app.test":  {mustAddr("203.0.113.10")},
			"voip.test": {mustAddr("203.0.113.11")},
		},
	}
	h := newHarness(t, withNames(names), withPolicy(t, quicPolicy))
	e := newCountingEcho(t)
	h.dialer.route("udp", "203.0.113.10:443", e.addr)
	h.dialer.route("udp", "203.0.113.11:443", e.addr)
	return h, e
}

func (h *harness) waitProhibited(t *testing.T) {
	t.Helper()
	if h.rec.wait(5*time.Second, func(b []byte) bool {
		typ, code, ok := icmpInfo(b)
		return ok && typ == 3 && code == 13
	}) == nil {
		t.Fatal("no ICMP administratively prohibited")
	}
}

// TestQUICGate checks the gate on UDP flows opened by name.
func TestQUICGate(t *testing.T) {
	ch := clientHello("app.test")
	t.Run("sni matches", func(t *testing.T) {
		h, e := quicHarness(t)
		c := h.dialUDP(t, "198.18.0.10:443")
		// The ClientHello in two datagrams sent back to back: the
		// second arrives while the flow is being dialed.
		d1, d2 := initial(t, 0, 0, ch[:40]), initial(t, 1, 40, ch[40:])
		c.Write(d1)
		c.Write(d2)
		// Either order: gVisor's UDP forwarder registers the flow's
		// endpoint before it hands it the first datagram, so under load
		// the second can get there first (a QUIC server reorders).
		buf := make([]byte, 2000)
		echoes := map[string]bool{}
		for i := range 2 {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("echo %d: %v", i, err)
			}
			echoes[string(buf[:n])] = true
		}
		if !echoes[string(d1)] || !echoes[string(d2)] {
			t.Fatal("the echoes are not the two datagrams sent")
		}
		f, seq := h.sink.flow(t, "198.18.0.10:443")
		l := h.sink.l7Of(t, seq)
		if f.Action != "allow" || l.Action != "allow" || l.SNI != "app.test" || l.Reason != "sni matches" {
			t.Fatalf("flow %+v, l7 %+v", f, l)
		}
		e.mu.Lock()
		got := len(e.got) == 2 && (string(e.got[0]) == string(d1) && string(e.got[1]) == string(d2) ||
			string(e.got[0]) == string(d2) && string(e.got[1]) == string(d1))
		e.mu.Unlock()
		if !got {
			t.Fatal("upstream did not get the two held datagrams")
		}
		// After the check the flow is opaque: anything goes.
		c.Write([]byte("short header stuff"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "short header stuff" {
			t.Fatalf("after the check: %q, %v", buf[:n], err)
		}
	})
	for _, tc := range []struct {
		name, why, reason string
		datagrams         [][]byte
	}{
		{"other sni", "the ClientHello names another host", l7.ReasonSNIMismatch,
			[][]byte{initial(t, 0, 0, clientHello("evil.test"))}},
		{"garbage", "not a QUIC Initial", "quic: not a quic long header packet",
			[][]byte{[]byte("hello, udp")}},
		{"tampered", "an Initial that does not decrypt", "quic: initial packet does not decrypt",
			[][]byte{func() []byte { b := initial(t, 0, 0, ch); b[200] ^= 1; return b }()}},
		{"incomplete", "half a ClientHello, then nothing: refused after the hold time", "quic: incomplete client hello",
			[][]byte{initial(t, 0, 0, ch[:40])}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, e := quicHarness(t)
			c := h.dialUDP(t, "198.18.0.10:443")
			for _, d := range tc.datagrams {
				c.Write(d)
			}
			h.waitProhibited(t)
			f, seq := h.sink.flow(t, "198.18.0.10:443")
			l := h.sink.l7Of(t, seq)
			if l.Action != "deny" || l.Reason != tc.reason || l.Host != "app.test" {
				t.Fatalf("%s: flow %+v, l7 %+v, want deny %q", tc.why, f, l, tc.reason)
			}
			if end := h.sink.flowEnd(t, seq); end.Error != errL7Denied.Error() || end.BytesOut != 0 {
				t.Fatalf("flow_end %+v", end)
			}
			if n := e.n.Load(); n != 0 {
				t.Fatalf("%s: upstream received %d datagrams", tc.why, n)
			}
		})
	}
	// A later QUIC connection on the same flow (same socket, same
	// 5-tuple) is checked like the first: the bypass the attack review
	// found was a second connection naming another host.
	t.Run("second connection", func(t *testing.T) {
		for _, tc := range []struct {
			name, why string
			second    [][]byte
			pass      bool   // the second connection's datagrams are echoed
			reason    string // else: the deny record's reason
		}{
			{"other sni", "a new connection ID naming another host", []([]byte){initialFor(t, "second-conn", 0, 0, clientHello("evil.test"))},
				false, l7.ReasonSNIMismatch},
			{"other sni in two datagrams", "held until the ClientHello is whole", [][]byte{
				initialFor(t, "second-conn", 0, 0, clientHello("evil.test")[:30]),
				initialFor(t, "second-conn", 1, 30, clientHello("evil.test")[30:]),
			}, false, l7.ReasonSNIMismatch},
			{"first connection's ID reused", "a new ClientHello under the checked ID", [][]byte{initial(t, 9, 0, clientHello("evil.test"))},
				false, "quic: crypto data contradicts earlier data"},
			{"same sni", "a client reusing its socket for the same server", [][]byte{initialFor(t, "second-conn", 0, 0, ch)},
				true, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h, e := quicHarness(t)
				c := h.dialUDP(t, "198.18.0.10:443")
				first := initial(t, 0, 0, ch)
				c.Write(first)
				buf := make([]byte, 2000)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, err := c.Read(buf); err != nil || string(buf[:n]) != string(first) {
					t.Fatalf("first connection: echo %d bytes, %v", n, err)
				}
				_, seq := h.sink.flow(t, "198.18.0.10:443")
				if l := h.sink.l7Of(t, seq); l.Action != "allow" {
					t.Fatalf("first connection: %+v", l)
				}
				for _, d := range tc.second {
					c.Write(d)
				}
				if tc.pass {
					for i, want := range tc.second {
						c.SetReadDeadline(time.Now().Add(5 * time.Second))
						if n, err := c.Read(buf); err != nil || string(buf[:n]) != string(want) {
							t.Fatalf("%s: echo %d: %d bytes, %v", tc.why, i, n, err)
						}
					}
					if n := countL7(h.sink, seq, "allow"); n != 2 {
						t.Fatalf("%s: %d allow records, want 2: %s", tc.why, n, h.sink.dump())
					}
					return
				}
				h.waitProhibited(t)
				ev, _ := h.sink.waitEvent(t, "l7 deny of flow", func(ev audit.Event) bool {
					l, ok := ev.(audit.L7)
					return ok && l.FlowSeq == seq && l.Action == "deny"
				})
				if l := ev.(audit.L7); l.Reason != tc.reason || l.Host != "app.test" {
					t.Fatalf("%s: deny record %+v, want reason %q", tc.why, l, tc.reason)
				}
				// A short-header datagram still passes: the first
				// connection goes on. Only it reached the server.
				c.Write([]byte("\x40short header"))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, err := c.Read(buf); err != nil || string(buf[:n]) != "\x40short header" {
					t.Fatalf("after the refusal: %q, %v", buf[:n], err)
				}
				e.mu.Lock()
				defer e.mu.Unlock()
				if len(e.got) != 2 || string(e.got[0]) != string(first) {
					t.Fatalf("%s: upstream got %d datagrams, want the first connection's and the short one", tc.why, len(e.got))
				}
			})
		}
	})
	t.Run("l7 none", func(t *testing.T) {
		h, e := quicHarness(t)
		c := h.dialUDP(t, "198.18.0.11:443")
		c.Write([]byte("not quic"))
		buf := make([]byte, 100)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "not quic" {
			t.Fatalf("echo %q, %v", buf[:n], err)
		}
		_, seq := h.sink.flow(t, "198.18.0.11:443")
		if h.sink.hasL7(seq) || e.n.Load() != 1 {
			t.Fatalf("an l7: none flow was checked: %s", h.sink.dump())
		}
	})
}

// countL7 counts the l7 records of flow seq with action.
func countL7(s *fakeSink, seq uint64, action string) int {
	n := 0
	for _, l := range s.l7Records(seq) {
		if l.Action == action {
			n++
		}
	}
	return n
}

// l7Records are the l7 records of flow seq so far.
func (s *fakeSink) l7Records(seq uint64) []audit.L7 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var recs []audit.L7
	for _, ev := range s.events {
		if l, ok := ev.(audit.L7); ok && l.FlowSeq == seq {
			recs = append(recs, l)
		}
	}
	return recs
}
