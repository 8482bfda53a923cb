package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/dns"
	"github.com/nsgate/nsgate/policy"
)

// testPolicy is the policy most tests use.
const testPolicy = `
version: 1
allow:
  - cidr: 203.0.113.0/24      # allow[0]
    ports: [8080]
  - cidr: 203.0.113.0/24      # allow[1]
    ports: [7]
    proto: udp
  - cidr: 2001:db8::/32       # allow[2]
    ports: [8080, 7]
    proto: any
  - host: app.test            # allow[3]
    ports: [80]
  - host: private.test        # allow[4]
    ports: [80]
  - host: mixed.test          # allow[5]
    ports: [80]
  - cidr: 0.0.0.0/0           # allow[6]: all of IPv4 on one port
    ports: [9999]
deny:
  - cidr: 203.0.113.66/32     # deny[0]
`

// fakeSink is an audit.Sink that keeps every event.
type fakeSink struct {
	mu     sync.Mutex
	events []audit.Event
	seqs   []uint64
	seq    uint64
}

func (s *fakeSink) Log(ev audit.Event) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.events = append(s.events, ev)
	s.seqs = append(s.seqs, s.seq)
	return s.seq
}

// waitEvent waits for an event matching pred and returns it with its seq.
func (s *fakeSink) waitEvent(t *testing.T, what string, pred func(audit.Event) bool) (audit.Event, uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		for i, ev := range s.events {
			if pred(ev) {
				seq := s.seqs[i]
				s.mu.Unlock()
				return ev, seq
			}
		}
		s.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no audit event: %s; have %s", what, s.dump())
	return nil, 0
}

func (s *fakeSink) flow(t *testing.T, dst string) (audit.Flow, uint64) {
	t.Helper()
	ev, seq := s.waitEvent(t, "flow to "+dst, func(ev audit.Event) bool {
		f, ok := ev.(audit.Flow)
		return ok && f.Dst == dst
	})
	return ev.(audit.Flow), seq
}

func (s *fakeSink) flowEnd(t *testing.T, seq uint64) audit.FlowEnd {
	t.Helper()
	ev, _ := s.waitEvent(t, fmt.Sprint("flow_end of ", seq), func(ev audit.Event) bool {
		f, ok := ev.(audit.FlowEnd)
		return ok && f.FlowSeq == seq
	})
	return ev.(audit.FlowEnd)
}

func (s *fakeSink) packet(t *testing.T, dst, reason string) audit.Packet {
	t.Helper()
	ev, _ := s.waitEvent(t, "packet to "+dst, func(ev audit.Event) bool {
		p, ok := ev.(audit.Packet)
		return ok && p.Dst == dst && strings.Contains(p.Reason, reason)
	})
	return ev.(audit.Packet)
}

func (s *fakeSink) dump() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, ev := range s.events {
		fmt.Fprintf(&b, "\n  %s %+v", ev.EventName(), ev)
	}
	return b.String()
}

// dialer is the Dial hook: it records every dial and connects only the
// worker-visible addresses in routes to their loopback stand-ins.
type dialer struct {
	mu     sync.Mutex
	dials  []string
	routes map[string]string // "tcp 203.0.113.10:8080" -> "127.0.0.1:port"
}

func (d *dialer) route(network, from, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.routes == nil {
		d.routes = map[string]string{}
	}
	d.routes[network+" "+from] = to
}

func (d *dialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, network+" "+addr)
	to, ok := d.routes[network+" "+addr]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("test dialer: %s %s is not routed: %w", network, addr, syscall.ECONNREFUSED)
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

func (d *dialer) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dials...)
}

func mustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p.WithLocal(netip.MustParsePrefix(DefaultPrefix4), netip.MustParsePrefix(DefaultPrefix6))
}

// tcpServer serves on loopback: it writes greeting, then echoes until EOF.
func tcpServer(t testing.TB, greeting string) string {
	t.Helper()
	return serveTCP(t, func(c *net.TCPConn) {
		c.Write([]byte(greeting))
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				c.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	})
}

// serveTCP is a loopback TCP server that runs handle on each connection,
// on a goroutine of its own, and closes the connection after it.
func serveTCP(t testing.TB, handle func(*net.TCPConn)) string {
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
			go func() {
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

// udpEcho is a loopback UDP echo server.
func udpEcho(t testing.TB) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
	return c.LocalAddr().String()
}

// fakeNames is a Names with fixed fake addresses and answers.
type fakeNames struct {
	mu       sync.Mutex
	fake     map[netip.Addr]string
	answers  map[string][]netip.Addr
	gateway  map[string][]netip.Addr // Answer.Gateway, by name
	resolved []string
}

func (n *fakeNames) NameOf(a netip.Addr) (string, bool) {
	name, ok := n.fake[a]
	return name, ok
}

func (n *fakeNames) ResolveName(ctx context.Context, name string) (dns.Answer, error) {
	n.mu.Lock()
	n.resolved = append(n.resolved, name)
	n.mu.Unlock()
	a, ok := n.answers[name]
	if !ok {
		return dns.Answer{}, errors.New("no such host")
	}
	return dns.Answer{Addrs: a, Gateway: n.gateway[name]}, nil
}

// ServeDNS answers "re:" + the query; the query "drop" is dropped.
func (n *fakeNames) ServeDNS(msg []byte, tcp bool) []byte {
	if string(msg) == "drop" {
		return nil
	}
	proto := "udp:"
	if tcp {
		proto = "tcp:"
	}
	return append([]byte("re:"+proto), msg...)
}

func (n *fakeNames) resolvedNames() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.resolved...)
}

func withNames(n *fakeNames) harnessOpt { return func(c *Config) { c.Names = n } }

func withLimits(l Limits) harnessOpt { return func(c *Config) { c.Limits = l } }

func withPolicy(t testing.TB, src string) harnessOpt {
	p := mustPolicy(t, src)
	return func(c *Config) { c.Policy = func() *policy.Policy { return p } }
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b...)
}

// failAfter accepts n writes, then fails every one.
type failAfter struct {
	mu sync.Mutex
	n  int
}

func (f *failAfter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n <= 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}
