package inbound

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests below use only 127.0.0.1: the "guest" is an echo server on
// loopback that a fake dialer reaches whatever guest address it is given.

var testGuest = netip.MustParseAddr("10.0.2.100")

// fakeGuest serves TCP and UDP echo on loopback and records the dials.
type fakeGuest struct {
	tcp net.Listener
	udp net.PacketConn

	mu    sync.Mutex
	dials []string // "proto addr"
	fail  error    // if set, dials fail with it
}

func newFakeGuest(t *testing.T) *fakeGuest {
	t.Helper()
	g := &fakeGuest{}
	var err error
	if g.tcp, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if g.udp, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.tcp.Close(); g.udp.Close() })
	go func() {
		for {
			c, err := g.tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c) // echo until EOF, then close
			}()
		}
	}()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := g.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			g.udp.WriteTo([]byte("echo:"+string(buf[:n])), from)
		}
	}()
	return g
}

func (g *fakeGuest) dial(ctx context.Context, proto string, _, addr netip.AddrPort) (net.Conn, error) {
	g.mu.Lock()
	g.dials = append(g.dials, proto+" "+addr.String())
	fail := g.fail
	g.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	var d net.Dialer
	if proto == "tcp" {
		return d.DialContext(ctx, "tcp4", g.tcp.Addr().String())
	}
	return d.DialContext(ctx, "udp4", g.udp.LocalAddr().String())
}

func (g *fakeGuest) dialLog() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.dials...)
}

// inboundLog collects OnInbound events.
type inboundLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *inboundLog) add(i Event) {
	l.mu.Lock()
	l.ev = append(l.ev, i)
	l.mu.Unlock()
}

func (l *inboundLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.ev...)
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T, proto string) uint16 {
	t.Helper()
	var addr string
	if proto == "tcp" {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
	} else {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr().String()
		c.Close()
	}
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return uint16(n)
}

var loopback = netip.MustParseAddr("127.0.0.1")

// addFwd adds a forward on a free loopback port, retrying if another
// process took the port in between.
func addFwd(t *testing.T, h *Forwarder, r Rule) (int, uint16) {
	t.Helper()
	for i := 0; i < 5; i++ {
		r.HostAddr = loopback
		r.HostPort = freePort(t, r.Proto)
		fw, err := h.Add(r)
		if err == nil {
			if fw.HostPort != r.HostPort {
				t.Fatalf("Add moved the host port: %+v", fw)
			}
			return fw.ID, r.HostPort
		}
	}
	t.Fatal("no free port")
	return 0, 0
}

func dialHost(t *testing.T, proto string, port uint16) net.Conn {
	t.Helper()
	c, err := net.Dial(proto+"4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestForwarderTCP(t *testing.T) {
	g := newFakeGuest(t)
	var log inboundLog
	h := New(Options{Guest: testGuest, Dial: g.dial, OnInbound: log.add})
	defer h.Close()

	id, port := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
	if id != 1 {
		t.Fatalf("first ID = %d, want 1", id)
	}
	if got := h.List(); len(got) != 1 || got[0].GuestAddr != testGuest || got[0].ID != 1 ||
		got[0].HostAddr != loopback || got[0].HostPort != port || got[0].GuestPort != 80 {
		t.Fatalf("a missing guest address becomes the default guest: %+v", got)
	}

	c := dialHost(t, "tcp", port)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite() // the half-close must reach the guest
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hello" {
		t.Fatalf("relayed echo = %q, %v", b, err)
	}
	if d := g.dialLog(); len(d) != 1 || d[0] != "tcp 10.0.2.100:80" {
		t.Fatalf("dials = %q", d)
	}
	ev := log.all()
	if len(ev) != 1 || ev[0].Err != nil || ev[0].Forward.ID != 1 || ev[0].Src.Addr() != loopback {
		t.Fatalf("inbound events = %+v", ev)
	}
	if want := c.LocalAddr().(*net.TCPAddr).AddrPort(); ev[0].Src != want {
		t.Errorf("inbound src = %s, want %s", ev[0].Src, want)
	}
}

func TestForwarderTCPGuestUnreachable(t *testing.T) {
	g := newFakeGuest(t)
	g.fail = errors.New("connection refused by the guest")
	var log inboundLog
	// No Options.Guest: the rule's own guest address is the one dialled
	// (with one, no other is accepted: TestForwarderAddErrors).
	h := New(Options{Dial: g.dial, OnInbound: log.add})
	defer h.Close()
	_, port := addFwd(t, h, Rule{Proto: "tcp", GuestAddr: netip.MustParseAddr("10.0.2.50"), GuestPort: 8080})
	c := dialHost(t, "tcp", port)
	b, err := io.ReadAll(c) // closed without data
	if len(b) != 0 {
		t.Fatalf("got %q, %v", b, err)
	}
	ev := log.all()
	if len(ev) != 1 || ev[0].Err == nil || !strings.Contains(ev[0].Err.Error(), "refused by the guest") {
		t.Fatalf("inbound events = %+v", ev)
	}
	if d := g.dialLog(); len(d) != 1 || d[0] != "tcp 10.0.2.50:8080" {
		t.Fatalf("an explicit guest address is dialed: %q", d)
	}
}

func TestForwarderRemove(t *testing.T) {
	g := newFakeGuest(t)
	h := New(Options{Guest: testGuest, Dial: g.dial})
	defer h.Close()
	id1, port1 := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
	id2, _ := addFwd(t, h, Rule{Proto: "udp", GuestPort: 53})
	if id1 != 1 || id2 != 2 {
		t.Fatalf("IDs %d, %d", id1, id2)
	}
	// A connection established before removal keeps working, as with
	// slirp4netns (removal closes only the listener).
	c := dialHost(t, "tcp", port1)
	c.Write([]byte("a"))
	if b := make([]byte, 1); func() bool { _, err := io.ReadFull(c, b); return err != nil || b[0] != 'a' }() {
		t.Fatal("no echo before removal")
	}
	if err := h.Remove(id1); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("b"))
	if b := make([]byte, 1); func() bool { _, err := io.ReadFull(c, b); return err != nil || b[0] != 'b' }() {
		t.Fatal("an established connection died with its forward")
	}
	if _, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port1))), time.Second); err == nil {
		t.Fatal("the listener is still open after removal")
	}
	if err := h.Remove(id1); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("second removal: %v, want ErrUnknownID", err)
	}
	if err := h.Remove(99); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("unknown ID: %v", err)
	}
	if got := h.List(); len(got) != 1 || got[0].ID != 2 {
		t.Fatalf("list after removal: %+v", got)
	}
	// IDs are not reused.
	if id, _ := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80}); id != 3 {
		t.Fatalf("next ID = %d, want 3", id)
	}
}

func TestForwarderAddErrors(t *testing.T) {
	g := newFakeGuest(t)
	h := New(Options{Guest: testGuest, Dial: g.dial})
	defer h.Close()
	_, port := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
	tests := []struct {
		why string
		r   Rule
	}{
		{"the port is taken (by the first forward)", Rule{Proto: "tcp", HostAddr: loopback, HostPort: port, GuestPort: 80}},
		{"sctp", Rule{Proto: "sctp", HostAddr: loopback, HostPort: 1, GuestPort: 1}},
		{"an IPv6 host address", Rule{Proto: "tcp", HostAddr: netip.IPv6Loopback(), HostPort: 1, GuestPort: 1}},
		{"an IPv6 guest address", Rule{Proto: "tcp", HostAddr: loopback, HostPort: 1, GuestAddr: netip.MustParseAddr("fd00::100"), GuestPort: 1}},
		{"host port 0", Rule{Proto: "tcp", HostAddr: loopback, GuestPort: 1}},
		{"guest port 0", Rule{Proto: "udp", HostAddr: loopback, HostPort: 1}},
		{"an address that is not local", Rule{Proto: "tcp", HostAddr: netip.MustParseAddr("192.0.2.1"), HostPort: 8080, GuestPort: 1}},
		// add_hostfwd names any guest_addr; under slirp4netns 10.0.2.2 is
		// the host's loopback. Every connection would be refused at the
		// dial, so the forward itself is refused: no listener that can
		// never reach the worker.
		{"the gateway as guest", Rule{Proto: "tcp", HostAddr: loopback, HostPort: freePort(t, "tcp"), GuestAddr: netip.MustParseAddr("10.0.2.2"), GuestPort: 80}},
		{"the host's loopback as guest", Rule{Proto: "tcp", HostAddr: loopback, HostPort: freePort(t, "tcp"), GuestAddr: loopback, GuestPort: 22}},
		{"the metadata address as guest", Rule{Proto: "udp", HostAddr: loopback, HostPort: freePort(t, "udp"), GuestAddr: netip.MustParseAddr("169.254.169.254"), GuestPort: 80}},
	}
	for _, tt := range tests {
		if fw, err := h.Add(tt.r); err == nil {
			t.Errorf("%s: added as %d", tt.why, fw.ID)
		}
	}
	// Failures consume no ID and leave nothing behind.
	if got := h.List(); len(got) != 1 {
		t.Fatalf("list: %+v", got)
	}
	if id, _ := addFwd(t, h, Rule{Proto: "udp", GuestPort: 1}); id != 2 {
		t.Fatalf("next ID = %d, want 2", id)
	}
	if _, err := New(Options{Guest: testGuest}).Add(Rule{Proto: "tcp", HostAddr: loopback, HostPort: 1, GuestPort: 1}); err == nil {
		t.Error("a nil dialer was accepted")
	}
}

func TestForwarderUDP(t *testing.T) {
	g := newFakeGuest(t)
	const udpIdle = 300 * time.Millisecond
	var log inboundLog
	h := New(Options{Guest: testGuest, Dial: g.dial, OnInbound: log.add, UDPIdle: udpIdle})
	defer h.Close()
	_, port := addFwd(t, h, Rule{Proto: "udp", GuestPort: 53})

	roundTrip := func(c net.Conn, msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "echo:"+msg {
			t.Fatalf("reply to %q: %q, %v", msg, buf[:n], err)
		}
	}
	a := dialHost(t, "udp", port)
	b := dialHost(t, "udp", port)
	roundTrip(a, "a1")
	roundTrip(b, "b1")
	roundTrip(a, "a2") // same flow as a1
	if d := g.dialLog(); len(d) != 2 || d[0] != "udp 10.0.2.100:53" || d[1] != "udp 10.0.2.100:53" {
		t.Fatalf("one guest connection per client address: %q", d)
	}
	if ev := log.all(); len(ev) != 2 || ev[0].Err != nil || ev[1].Err != nil || ev[0].Src == ev[1].Src {
		t.Fatalf("inbound events: %+v", ev)
	}
	// After the idle time the flow is gone; the next datagram opens a new one.
	time.Sleep(udpIdle + 200*time.Millisecond)
	roundTrip(a, "a3")
	if d := g.dialLog(); len(d) != 3 {
		t.Fatalf("an idle flow was not renewed: %q", d)
	}
}

func TestForwarderLimits(t *testing.T) {
	t.Run("MaxUDPFlows: datagrams from one client too many are dropped", func(t *testing.T) {
		g := newFakeGuest(t)
		var log inboundLog
		h := New(Options{Guest: testGuest, Dial: g.dial, OnInbound: log.add, MaxUDPFlows: 1})
		defer h.Close()
		_, port := addFwd(t, h, Rule{Proto: "udp", GuestPort: 53})
		a := dialHost(t, "udp", port)
		a.Write([]byte("x"))
		buf := make([]byte, 10)
		if _, err := a.Read(buf); err != nil {
			t.Fatal(err)
		}
		b := dialHost(t, "udp", port)
		b.Write([]byte("y"))
		b.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := b.Read(buf); err == nil {
			t.Fatalf("second client answered: %q", buf[:n])
		}
		ev := log.all()
		if len(ev) != 2 || !errors.Is(ev[1].Err, ErrTooManyConns) {
			t.Fatalf("inbound events: %+v", ev)
		}
	})
	t.Run("MaxConns: a TCP connection too many is closed", func(t *testing.T) {
		g := newFakeGuest(t)
		var log inboundLog
		h := New(Options{Guest: testGuest, Dial: g.dial, OnInbound: log.add, MaxConns: 1})
		defer h.Close()
		_, port := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
		a := dialHost(t, "tcp", port)
		a.Write([]byte("1"))
		if _, err := io.ReadFull(a, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		b := dialHost(t, "tcp", port)
		if n, err := b.Read(make([]byte, 1)); err == nil {
			t.Fatalf("second connection got %d bytes", n)
		}
		var refused int
		for _, e := range log.all() {
			if errors.Is(e.Err, ErrTooManyConns) {
				refused++
			}
		}
		if refused != 1 {
			t.Fatalf("inbound events: %+v", log.all())
		}
	})
}

func TestForwarderClose(t *testing.T) {
	g := newFakeGuest(t)
	h := New(Options{Guest: testGuest, Dial: g.dial})
	_, tport := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
	_, uport := addFwd(t, h, Rule{Proto: "udp", GuestPort: 53})
	c := dialHost(t, "tcp", tport)
	c.Write([]byte("x"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	u := dialHost(t, "udp", uport)
	u.Write([]byte("x"))
	if _, err := u.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the relays")
	}
	// The established TCP connection was ended too.
	if _, err := io.ReadAll(c); err != nil && !isReset(err) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := h.Add(Rule{Proto: "tcp", HostAddr: loopback, HostPort: tport, GuestPort: 80}); err == nil {
		t.Fatal("Add after Close succeeded")
	}
	if len(h.List()) != 0 {
		t.Fatal("forwards left after Close")
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "reset")
}

// TestForwarderUDPWorkerCannotKeepFlowAlive: a UDP flow's peer is whatever
// source address its first datagram carried, which a sender can forge.
// The worker's own datagrams must not keep the flow open: else one forged
// datagram let the worker send to that address, past the policy, for as
// long as it kept sending. A flow ends after UDPIdle without a datagram
// from its client, however busy the worker is.
func TestForwarderUDPWorkerCannotKeepFlowAlive(t *testing.T) {
	const udpIdle = 200 * time.Millisecond
	ended := make(chan struct{})
	sent := make(chan struct{}, 1)
	dial := func(ctx context.Context, proto string, _, addr netip.AddrPort) (net.Conn, error) {
		fwd, worker := net.Pipe()
		go func() { // the worker: streams to the client without pause
			defer close(ended)
			for {
				if _, err := worker.Write([]byte("exfil")); err != nil {
					return
				}
				select {
				case sent <- struct{}{}:
				default:
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		go io.Copy(io.Discard, worker) // the client's datagrams
		return fwd, nil
	}
	h := New(Options{Guest: testGuest, Dial: dial, UDPIdle: udpIdle})
	defer h.Close()
	_, port := addFwd(t, h, Rule{Proto: "udp", GuestPort: 53})
	c := dialHost(t, "udp", port)
	if _, err := c.Write([]byte("one datagram, then silence")); err != nil {
		t.Fatal(err)
	}
	<-sent
	go io.Copy(io.Discard, c)
	select {
	case <-ended:
	case <-time.After(10 * time.Second): // far past UDPIdle: the flow was kept open
		t.Fatal("the worker kept a UDP flow open by sending to a silent client")
	}
}
