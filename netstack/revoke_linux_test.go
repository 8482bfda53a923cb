package netstack

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// revokeBefore allows three destinations; revokeAfter, the narrowed
// reload, keeps only 203.0.113.11.
const revokeBefore = `
version: 1
allow:
  - cidr: 203.0.113.10/32
    ports: [8080]
  - cidr: 203.0.113.11/32
    ports: [8080]
  - cidr: 203.0.113.10/32
    ports: [7]
    proto: udp
  - host: app.test
    ports: [80]
tls: {verify_sni: false}
http: {verify_host: false}
`

const revokeAfter = `
version: 1
allow:
  - cidr: 203.0.113.11/32
    ports: [8080]
`

// countingServer is a loopback TCP server that echoes and counts the bytes
// it reads; closed is set when its peer closed or reset the connection.
type countingServer struct {
	addr   string
	read   atomic.Int64
	closed atomic.Int32
}

func newCountingServer(t *testing.T) *countingServer {
	s := &countingServer{}
	s.addr = serveTCP(t, func(c *net.TCPConn) {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			s.read.Add(int64(n))
			if n > 0 {
				c.Write(buf[:n])
			}
			if err != nil {
				s.closed.Add(1)
				return
			}
		}
	})
	return s
}

// countingUDP is a loopback UDP echo server that counts the datagrams it
// receives.
func countingUDP(t *testing.T) (string, *atomic.Int64) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var got atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			got.Add(1)
			c.WriteTo(buf[:n], from)
		}
	}()
	return c.LocalAddr().String(), &got
}

func echoOnce(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo: got " + string(buf))
	}
	return nil
}

// TestReloadCutsRefusedFlows: after the policy in force changes, Revoke
// re-decides every open flow under it. A flow it now refuses is cut: the
// worker's TCP connection is reset, the server's closed, a UDP flow's
// server sees nothing more, and each flow_end says the flow was revoked
// and by what. A flow it still allows goes on.
func TestReloadCutsRefusedFlows(t *testing.T) {
	before, after := mustPolicy(t, revokeBefore), mustPolicy(t, revokeAfter)
	var cur atomic.Pointer[policy.Policy]
	cur.Store(before)
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.5"): "app.test"},
		answers: map[string][]netip.Addr{"app.test": {mustAddr("203.0.113.12")}},
	}
	h := newHarness(t, withNames(names), func(c *Config) { c.Policy = cur.Load })
	cut, kept, named := newCountingServer(t), newCountingServer(t), newCountingServer(t)
	h.dialer.route("tcp", "203.0.113.10:8080", cut.addr)
	h.dialer.route("tcp", "203.0.113.11:8080", kept.addr)
	h.dialer.route("tcp", "203.0.113.12:80", named.addr)
	udpAddr, udpGot := countingUDP(t)
	h.dialer.route("udp", "203.0.113.10:7", udpAddr)

	cc, err := h.dialTCP("203.0.113.10:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kc, err := h.dialTCP("203.0.113.11:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	nc, err := h.dialTCP("198.18.0.5:80")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	uc := h.dialUDP(t, "203.0.113.10:7")
	for _, c := range []net.Conn{cc, kc, nc, uc} {
		if err := echoOnce(c, "before"); err != nil {
			t.Fatalf("under the first policy: %v", err)
		}
	}
	_, cutSeq := h.sink.flow(t, "203.0.113.10:8080")
	_, keptSeq := h.sink.flow(t, "203.0.113.11:8080")
	_, namedSeq := h.sink.flow(t, "198.18.0.5:80")
	_, udpSeq := h.sink.flow(t, "203.0.113.10:7")

	cur.Store(after)
	if n := h.g.Revoke(); n != 3 {
		t.Errorf("Revoke cut %d flows, want 3 (two TCP, one UDP)%s", n, h.sink.dump())
	}

	// The worker's side of each cut TCP flow is reset.
	for _, c := range []net.Conn{cc, nc} {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if err == nil || errors.Is(err, io.EOF) || isTimeout(err) {
			t.Errorf("worker's read on a revoked flow: %v, want a reset", err)
		}
	}
	// Their servers saw the connection end, and no more bytes.
	waitFor(t, "the revoked flows' servers to see the end", func() bool {
		return cut.closed.Load() == 1 && named.closed.Load() == 1
	})
	if n := cut.read.Load(); n != int64(len("before")) {
		t.Errorf("the revoked flow's server read %d bytes, want only the %d before", n, len("before"))
	}
	// The UDP flow's server gets nothing more; the worker's next
	// datagram is a new flow, which the new policy refuses.
	uc.Write([]byte("after"))
	time.Sleep(200 * time.Millisecond)
	if n := udpGot.Load(); n != 1 {
		t.Errorf("the revoked UDP flow's server got %d datagrams, want only the 1 before", n)
	}
	// Each flow_end says why.
	for _, seq := range []uint64{cutSeq, namedSeq, udpSeq} {
		e := h.sink.flowEnd(t, seq)
		if !strings.HasPrefix(e.Error, "revoked: ") || !strings.Contains(e.Error, "rule=default") {
			t.Errorf("flow_end of revoked flow %d: error %q, want it revoked by rule=default", seq, e.Error)
		}
	}
	// The flow the new policy still allows goes on.
	if err := echoOnce(kc, "after"); err != nil {
		t.Fatalf("the flow the reload still allows: %v", err)
	}
	if kept.closed.Load() != 0 {
		t.Fatal("the still-allowed flow's server saw its connection end")
	}
	if h.sink.hasFlowEnd(keptSeq) {
		t.Fatalf("the still-allowed flow ended: %s", h.sink.dump())
	}
	// A second Revoke under the same policy cuts nothing.
	if n := h.g.Revoke(); n != 0 {
		t.Errorf("a second Revoke cut %d flows, want 0", n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// hasFlowEnd reports whether the flow with record seq has ended.
func (s *fakeSink) hasFlowEnd(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		if f, ok := ev.(audit.FlowEnd); ok && f.FlowSeq == seq {
			return true
		}
	}
	return false
}
