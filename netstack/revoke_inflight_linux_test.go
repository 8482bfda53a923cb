package netstack

import (
	"context"
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

// gatedDial wraps the harness dialer: a dial to one of held waits until
// release is closed, and started gets a value once it waits.
type gatedDial struct {
	inner   func(ctx context.Context, network, addr string) (net.Conn, error)
	held    map[string]bool
	started chan string
	release chan struct{}
}

func (d *gatedDial) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.held[network+" "+addr] {
		d.started <- network + " " + addr
		select {
		case <-d.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return d.inner(ctx, network, addr)
}

// TestRevokeFlowsInSetUp: a reload that lands while a TCP flow, a plain
// UDP flow and a QUIC-checked UDP flow are still dialling (admitted under
// the old policy, not yet open) cuts them once they open: the worker's
// TCP connection is reset before any byte reaches the server, and
// neither UDP server sees more than what was sent before.
func TestRevokeFlowsInSetUp(t *testing.T) {
	const before = `
version: 1
allow:
  - cidr: 203.0.113.10/32
    ports: [8080]
  - cidr: 203.0.113.10/32
    ports: [7]
    proto: udp
  - host: quic.test
    ports: [443]
    proto: udp
tls: {verify_sni: true}
`
	const after = `
version: 1
allow:
  - cidr: 203.0.113.11/32
    ports: [8080]
`
	b, a := mustPolicy(t, before), mustPolicy(t, after)
	var cur atomic.Pointer[policy.Policy]
	cur.Store(b)
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.7"): "quic.test"},
		answers: map[string][]netip.Addr{"quic.test": {mustAddr("203.0.113.12")}},
	}
	gd := &gatedDial{
		held: map[string]bool{
			"tcp 203.0.113.10:8080": true,
			"udp 203.0.113.10:7":    true,
			"udp 203.0.113.12:443":  true,
		},
		started: make(chan string, 3),
		release: make(chan struct{}),
	}
	dl := &dialer{}
	gd.inner = dl.Dial
	h := newHarness(t, withNames(names), func(c *Config) {
		c.Policy = cur.Load
		c.Dial = gd.Dial
		c.Limits = Limits{DialTimeout: 10 * time.Second}
	})
	h.dialer = dl
	srv := newCountingServer(t)
	h.dialer.route("tcp", "203.0.113.10:8080", srv.addr)
	udpAddr, udpGot := countingUDP(t)
	h.dialer.route("udp", "203.0.113.10:7", udpAddr)
	quicAddr, quicGot := countingUDP(t)
	h.dialer.route("udp", "203.0.113.12:443", quicAddr)

	type dialRes struct {
		c   net.Conn
		err error
	}
	tcpDone := make(chan dialRes, 1)
	go func() {
		c, err := h.dialTCP("203.0.113.10:8080")
		tcpDone <- dialRes{c, err}
	}()
	uc := h.dialUDP(t, "203.0.113.10:7")
	uc.Write([]byte("first"))
	qc := h.dialUDP(t, "198.18.0.7:443")
	qc.Write(initial(t, 0, 0, clientHello("quic.test")))
	for i := 0; i < 3; i++ {
		select {
		case <-gd.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of the 3 dials started%s", i, h.sink.dump())
		}
	}
	// The reload lands while all three are dialling.
	cur.Store(a)
	h.g.Revoke()
	close(gd.release)

	r := <-tcpDone
	if r.err == nil {
		defer r.c.Close()
		r.c.Write([]byte("after"))
		r.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := r.c.Read(make([]byte, 1))
		if err == nil || isTimeout(err) {
			t.Errorf("worker's read on a flow revoked in set-up: %v, want it cut", err)
		}
	}
	waitFor(t, "the three flows to end revoked", func() bool {
		return h.sink.flowEnds("revoked: ") >= 3
	})
	time.Sleep(100 * time.Millisecond)
	if n := srv.read.Load(); n != 0 {
		t.Errorf("the TCP server read %d bytes of a flow revoked in set-up", n)
	}
	uc.Write([]byte("second"))
	qc.Write(initial(t, 1, 0, clientHello("quic.test")))
	time.Sleep(200 * time.Millisecond)
	if n := udpGot.Load(); n > 1 {
		t.Errorf("the UDP server got %d datagrams, want at most the 1 sent before the reload", n)
	}
	if n := quicGot.Load(); n > 1 {
		t.Errorf("the QUIC server got %d datagrams, want at most the 1 sent before the reload", n)
	}
}

// flowEnds counts the flow_end records whose error starts with prefix.
func (s *fakeSink) flowEnds(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ev := range s.events {
		if e, ok := ev.(audit.FlowEnd); ok && strings.HasPrefix(e.Error, prefix) {
			n++
		}
	}
	return n
}

// TestRevokeStorm: many open flows, flows opening all the while, and a
// reload after every few flows flipping between a policy that allows the
// destination and one that refuses it. When the storm ends under the
// refusing policy, no flow is left open: every worker connection is cut.
func TestRevokeStorm(t *testing.T) {
	const allow = `
version: 1
allow:
  - cidr: 203.0.113.10/32
    ports: [8080]
`
	const deny = `
version: 1
allow:
  - cidr: 203.0.113.11/32
    ports: [8080]
`
	pa, pd := mustPolicy(t, allow), mustPolicy(t, deny)
	var cur atomic.Pointer[policy.Policy]
	cur.Store(pa)
	h := newHarness(t, func(c *Config) { c.Policy = cur.Load })
	srv := newCountingServer(t)
	h.dialer.route("tcp", "203.0.113.10:8080", srv.addr)

	const flows = 200
	var wg sync.WaitGroup
	conns := make(chan net.Conn, flows)
	stop := make(chan struct{})
	var storm sync.WaitGroup
	storm.Add(1)
	go func() {
		defer storm.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				cur.Store(mustPolicy(t, deny))
			} else {
				cur.Store(mustPolicy(t, allow))
			}
			h.g.Revoke()
			time.Sleep(time.Millisecond)
		}
	}()
	for i := 0; i < flows; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.dialTCP("203.0.113.10:8080")
			if err == nil {
				conns <- c
			}
		}()
	}
	wg.Wait()
	close(stop)
	storm.Wait()
	close(conns)
	cur.Store(pd)
	h.g.Revoke()
	open := 0
	var live []net.Conn
	for c := range conns {
		live = append(live, c)
	}
	for _, c := range live {
		defer c.Close()
		c.Write([]byte("x"))
	}
	for _, c := range live {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := io.ReadFull(c, make([]byte, 1))
		if err == nil || isTimeout(err) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d worker connections still open after the refusing reload", open, len(live))
	}
	h.g.openMu.Lock()
	left := len(h.g.open)
	h.g.openMu.Unlock()
	t.Logf("%d connections opened in the storm; %d tracked left", len(live), left)
}

// TestRevokeAliasAndIPv6: a reload that drops the rule opening the
// host's loopback cuts a flow through the host alias (decided again as
// 127.0.0.1, the address dialled), and one that drops an IPv6 rule cuts
// the IPv6 flow; a flow a different rule of the new policy still allows
// goes on.
func TestRevokeAliasAndIPv6(t *testing.T) {
	const alias = "169.254.1.2"
	const before = `
version: 1
allow:
  - cidr: 127.0.0.1/32
    ports: [8080]
  - cidr: "2001:db8::10/128"
    ports: [8080]
  - cidr: 203.0.113.10/32
    ports: [8080]
`
	const after = `
version: 1
allow:
  - cidr: 203.0.113.0/24
    ports: [8080]
`
	var cur atomic.Pointer[policy.Policy]
	cur.Store(mustPolicy(t, before))
	h := newHarness(t, func(c *Config) {
		c.Policy = cur.Load
		c.Network.HostAlias4 = netip.MustParseAddr(alias)
	})
	local, v6, kept := newCountingServer(t), newCountingServer(t), newCountingServer(t)
	h.dialer.route("tcp", "127.0.0.1:8080", local.addr)
	h.dialer.route("tcp", "[2001:db8::10]:8080", v6.addr)
	h.dialer.route("tcp", "203.0.113.10:8080", kept.addr)
	var conns []net.Conn
	for _, dst := range []string{alias + ":8080", "[2001:db8::10]:8080", "203.0.113.10:8080"} {
		c, err := h.dialTCP(dst)
		if err != nil {
			t.Fatalf("%s: %v", dst, err)
		}
		defer c.Close()
		if err := echoOnce(c, "before"); err != nil {
			t.Fatalf("%s under the first policy: %v", dst, err)
		}
		conns = append(conns, c)
	}
	cur.Store(mustPolicy(t, after))
	if n := h.g.Revoke(); n != 2 {
		t.Errorf("Revoke cut %d flows, want 2 (the host alias and the IPv6 one)", n)
	}
	for _, c := range conns[:2] {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("worker's read on a revoked flow: %v, want it cut", err)
		}
	}
	if err := echoOnce(conns[2], "after"); err != nil {
		t.Errorf("the flow allowed by another rule of the new policy: %v", err)
	}
}
