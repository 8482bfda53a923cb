package netstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// flowBySrc waits for the flow record whose worker address is src.
func (s *fakeSink) flowBySrc(t *testing.T, src string) (audit.Flow, uint64) {
	t.Helper()
	ev, seq := s.waitEvent(t, "flow from "+src, func(ev audit.Event) bool {
		f, ok := ev.(audit.Flow)
		return ok && f.Src == src
	})
	return ev.(audit.Flow), seq
}

// l7Of waits for the l7 record of the flow record seq.
func (s *fakeSink) l7Of(t *testing.T, seq uint64) audit.L7 {
	t.Helper()
	ev, _ := s.waitEvent(t, fmt.Sprint("l7 record of flow ", seq), func(ev audit.Event) bool {
		r, ok := ev.(audit.L7)
		return ok && r.FlowSeq == seq
	})
	return ev.(audit.L7)
}

// hasL7 reports whether there is an l7 record of the flow record seq.
func (s *fakeSink) hasL7(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		if r, ok := ev.(audit.L7); ok && r.FlowSeq == seq {
			return true
		}
	}
	return false
}

// TestOnePolicySnapshotPerFlow: a flow is decided, has its resolved
// addresses checked, its first bytes checked (L7) and its record written
// under one policy, read once, even when the source returns a different
// policy on every call (a SIGHUP between two reads). Policy A allows the
// name as allow[0] and checks the HTTP Host; policy B allows it as
// allow[1] and checks nothing. Each flow must read the source exactly
// once, and its record and its L7 outcome must both be A's or both B's.
func TestOnePolicySnapshotPerFlow(t *testing.T) {
	a := mustPolicy(t, `
version: 1
allow:
  - {host: app.test, ports: [80], proto: any, l7: none}  # allow[0]; l7: none is for UDP only
`)
	b := mustPolicy(t, `
version: 1
allow:
  - {cidr: 192.0.2.0/24, ports: [1]}                # allow[0]
  - {host: app.test, ports: [80], proto: any}      # allow[1]
tls:  {verify_sni: false}
http: {verify_host: false}
`)
	var calls atomic.Int64
	source := func() *policy.Policy {
		if calls.Add(1)%2 == 1 {
			return a
		}
		return b
	}
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.5"): "app.test"},
		answers: map[string][]netip.Addr{"app.test": {mustAddr("203.0.113.10")}},
	}
	h := newHarness(t, withNames(names), func(c *Config) { c.Policy = source })
	h.dialer.route("tcp", "203.0.113.10:80", tcpServer(t, ""))
	h.dialer.route("udp", "203.0.113.10:80", udpEcho(t))
	// A request whose Host is not the name: policy A's L7 check refuses
	// it, policy B lets it through to the echo server.
	const request = "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"

	for i := range 6 {
		t.Run(fmt.Sprint("tcp", i), func(t *testing.T) {
			before := calls.Load()
			c, err := h.dialTCP("198.18.0.5:80")
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			f, seq := h.sink.flowBySrc(t, c.LocalAddr().String())
			if n := calls.Load() - before; n != 1 {
				t.Fatalf("the flow read the policy source %d times, want once", n)
			}
			underA := (before+1)%2 == 1
			c.Write([]byte(request))
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			got, _ := io.ReadAll(io.LimitReader(c, int64(len(request))))
			if underA {
				l7 := h.sink.l7Of(t, seq)
				// Nothing from the echo server: only nsgate's 403.
				if f.Action != "allow" || f.Rule != "allow[0]" || l7.Action != "deny" || !strings.HasPrefix(string(got), "HTTP/1.1 403 ") {
					t.Fatalf("under policy A: record %+v, l7 %+v, worker read %q; want allow[0], an l7 deny and nsgate's 403", f, l7, got)
				}
				return
			}
			if f.Action != "allow" || f.Rule != "allow[1]" || string(got) != request || h.sink.hasL7(seq) {
				t.Fatalf("under policy B: record %+v, worker read %q; want allow[1], the echo and no l7 check%s", f, got, h.sink.dump())
			}
		})
	}
	for i := range 4 {
		t.Run(fmt.Sprint("udp", i), func(t *testing.T) {
			before := calls.Load()
			c := h.dialUDP(t, "198.18.0.5:80")
			c.Write([]byte("ping"))
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 8)
			if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
				t.Fatalf("echo %q, %v", buf[:n], err)
			}
			f, _ := h.sink.flowBySrc(t, c.LocalAddr().String())
			if n := calls.Load() - before; n != 1 {
				t.Fatalf("the flow read the policy source %d times, want once", n)
			}
			want := "allow[1]"
			if (before+1)%2 == 1 {
				want = "allow[0]"
			}
			if f.Action != "allow" || f.Rule != want {
				t.Fatalf("record %+v, want allow by %s: the policy the flow read", f, want)
			}
		})
	}
}

// held returns what the gateway's admissions hold: flow slots, dial
// slots and UDP flows being set up.
func held(g *Gateway) (tcpFlows, udpFlows, dials int64, pending int) {
	g.udpMu.Lock()
	pending = len(g.udpPending)
	g.udpMu.Unlock()
	return g.tcpFlows.Load(), g.udpFlows.Load(), g.pendingDials.Load(), pending
}

// waitReleased waits until the admissions hold nothing.
func waitReleased(t *testing.T, g *Gateway, after string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tf, uf, d, p := held(g)
		if tf == 0 && uf == 0 && d == 0 && p == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: still held: %d tcp flows, %d udp flows, %d pending dials, %d udp flows being set up", after, tf, uf, d, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAdmissionReleasesEverything: whatever way a flow ends — refused by
// the policy, by a name's answers, by a limit, by a failed resolution or
// dial, by the L7 check, by the audit log failing during its dial, or
// relayed and ended by either side, by a reset, by the idle timeout or by
// Close — every flow slot, dial slot and pending UDP entry is given back,
// and Close finds no flow left to wait for.
func TestAdmissionReleasesEverything(t *testing.T) {
	const pol = `
version: 1
allow:
  - {cidr: 203.0.113.0/24, ports: [8080, 7], proto: any}
  - {host: app.test, ports: [80], proto: any}
  - {host: private.test, ports: [80], proto: any}
  - {host: gone.test, ports: [80], proto: any}
`
	names := &fakeNames{
		fake: map[netip.Addr]string{
			mustAddr("198.18.0.5"): "app.test",
			mustAddr("198.18.0.6"): "private.test",
			mustAddr("198.18.0.7"): "gone.test", // no answers: the resolution fails
			mustAddr("198.18.0.8"): "evil.test", // no rule
		},
		answers: map[string][]netip.Addr{
			"app.test":     {mustAddr("203.0.113.10")},
			"private.test": {mustAddr("10.1.2.3")},
		},
	}
	// Dials to 203.0.113.30 wait until unblock is closed, then fail; a
	// dial to 203.0.113.40 fails the audit log.
	unblock := make(chan struct{})
	var blocked sync.WaitGroup
	blocked.Add(1)
	var sink *failingSink
	hooks := func(c *Config) {
		dial := c.Dial
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			switch {
			case strings.HasPrefix(addr, "203.0.113.30:"):
				blocked.Done()
				<-unblock
				return nil, fmt.Errorf("test dialer: %s blocked, then refused", addr)
			case strings.HasPrefix(addr, "203.0.113.40:"):
				sink.fail()
			}
			return dial(ctx, network, addr)
		}
	}
	h := newHarness(t, withNames(names), withPolicy(t, pol), withFailingAudit(&sink), hooks,
		withLimits(Limits{MaxFlows: 5, MaxUDPFlows: 1, MaxPendingDials: 1, DialTimeout: 3 * time.Second,
			TCPIdle: time.Second, UDPIdle: 500 * time.Millisecond}))
	srv := endingServer(t)
	h.dialer.route("tcp", "203.0.113.10:8080", srv)
	h.dialer.route("tcp", "203.0.113.10:80", tcpServer(t, ""))
	h.dialer.route("udp", "203.0.113.10:7", udpEcho(t))

	refused := func(dst, reason string) {
		t.Helper()
		if c, err := h.dialTCP(dst); err == nil {
			c.Close()
			t.Fatalf("tcp %s: connected, want refused (%s)", dst, reason)
		}
		f, _ := h.sink.flow(t, dst)
		want := "deny"
		if strings.HasPrefix(reason, "dial: ") || strings.HasPrefix(reason, "resolve: ") {
			want = "fail" // allowed, then the destination did not answer
		}
		if f.Action != want || !strings.Contains(f.Reason, reason) {
			t.Fatalf("tcp %s: record %+v, want %s saying %q", dst, f, want, reason)
		}
	}

	// Refused before anything is taken, or with slots taken and given
	// back on the way.
	refused("198.51.100.7:8080", "no allow rule matches")
	refused("198.18.0.8:80", "no allow rule matches tcp evil.test:80")
	refused("198.18.0.6:80", "all 1 resolved addresses refused")
	refused("198.18.0.7:80", "resolve: no such host")
	refused("203.0.113.20:8080", "dial: ")
	waitReleased(t, h.g, "refused tcp flows")

	// A dial slot held by a dial that hangs: the next flow meets the
	// limit of one pending dial.
	hung := make(chan error, 1)
	go func() {
		c, err := h.dialTCP("203.0.113.30:8080")
		if err == nil {
			c.Close()
		}
		hung <- err
	}()
	blocked.Wait()
	refused("203.0.113.11:8080", "limit: 1 pending dials")
	close(unblock)
	if err := <-hung; err == nil {
		t.Fatal("the hung dial's flow connected")
	}
	waitReleased(t, h.g, "a flow refused at the dial limit and the hung dial")

	// Five relayed flows (the limit), ending every way, and a sixth
	// refused while they are open.
	conns := make([]net.Conn, 5)
	for i := range conns {
		c, err := h.dialTCP("203.0.113.10:8080")
		if err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
		conns[i] = c
	}
	refused("203.0.113.12:8080", "limit: 5 concurrent tcp flows")
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			switch i {
			case 0: // the server answers and closes first
				c.Write([]byte("a"))
				io.ReadAll(c)
			case 1: // the worker half-closes first
				c.Write([]byte("b"))
				c.(interface{ CloseWrite() error }).CloseWrite()
				io.ReadAll(c)
			case 2: // the server resets
				c.Write([]byte("r"))
				io.ReadAll(c)
			case 3: // the worker closes mid-flow
				c.Write([]byte("q"))
			case 4: // nobody speaks: the relay idles out
				io.ReadAll(c)
			}
			c.Close()
		}()
	}
	wg.Wait()
	waitReleased(t, h.g, "relayed tcp flows ending every way")

	// The L7 check refuses a flow opened by name.
	c, err := h.dialTCP("198.18.0.5:80")
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	io.ReadAll(c)
	c.Close()
	waitReleased(t, h.g, "a flow the L7 check refused")

	// UDP: refused by the policy, relayed until idle, refused by the
	// limit while that one is open, and a failed dial.
	u := h.dialUDP(t, "198.51.100.7:7")
	u.Write([]byte("x"))
	if f, _ := h.sink.flow(t, "198.51.100.7:7"); f.Action != "deny" {
		t.Fatalf("record %+v", f)
	}
	u = h.dialUDP(t, "203.0.113.10:7")
	u.Write([]byte("ping"))
	u.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := u.Read(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	u2 := h.dialUDP(t, "203.0.113.11:7")
	u2.Write([]byte("x"))
	if f, _ := h.sink.flow(t, "203.0.113.11:7"); !strings.Contains(f.Reason, "limit: 1 concurrent udp flows") {
		t.Fatalf("record %+v", f)
	}
	waitReleased(t, h.g, "udp flows refused, and relayed until idle")
	u = h.dialUDP(t, "203.0.113.21:7")
	u.Write([]byte("x"))
	if f, _ := h.sink.flow(t, "203.0.113.21:7"); !strings.HasPrefix(f.Reason, "dial: ") {
		t.Fatalf("record %+v", f)
	}
	waitReleased(t, h.g, "a udp flow whose dial failed")

	// Flows open when the gateway closes, and one refused because the
	// audit log fails while it is being dialled.
	open, err := h.dialTCP("203.0.113.10:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	u = h.dialUDP(t, "203.0.113.10:7")
	u.Write([]byte("ping"))
	u.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := u.Read(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	h.dialer.route("tcp", "203.0.113.40:8080", serveTCP(t, func(*net.TCPConn) {}))
	if c, err := h.dialTCP("203.0.113.40:8080"); err == nil {
		c.Close()
		t.Fatal("a flow was admitted though the audit log failed during its dial")
	}
	// The refused flow gives its slot back on its own goroutine, just after
	// the worker saw the refusal: wait for it (bounded).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tf, uf, _, _ := held(h.g)
		if tf == 1 && uf == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tcp and %d udp flows held before Close, want the two open ones", tf, uf)
		}
	}
	closed := make(chan struct{})
	go func() { h.g.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a flow that was never released")
	}
	waitReleased(t, h.g, "Close")
}
