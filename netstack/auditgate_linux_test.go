package netstack

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// failingSink is the harness's fakeSink with a log that can fail
// (audit.Failer), as audit.Logger's does.
type failingSink struct {
	*fakeSink
	failed chan struct{}
	once   sync.Once
}

func (f *failingSink) Failed() <-chan struct{} { return f.failed }
func (f *failingSink) fail()                   { f.once.Do(func() { close(f.failed) }) }

// withFailingAudit makes the harness's sink one that can fail.
func withFailingAudit(h **failingSink) harnessOpt {
	return func(c *Config) {
		s := &failingSink{fakeSink: c.Audit.(*fakeSink), failed: make(chan struct{})}
		*h = s
		c.Audit = s
	}
}

// TestAuditFailureAdmitsNoNewFlow: once the audit log has failed, the
// gateway refuses every new flow, TCP and UDP, without dialling anything,
// and every inbound forward; flows already admitted are not its business
// (the caller ends the worker).
func TestAuditFailureAdmitsNoNewFlow(t *testing.T) {
	var sink *failingSink
	h := newHarness(t, withFailingAudit(&sink))
	const dst = "203.0.113.10:8080"
	h.dialer.route("tcp", dst, tcpServer(t, "hello\n"))
	h.dialer.route("udp", "203.0.113.10:7", udpEcho(t))

	c, err := h.dialTCP(dst)
	if err != nil {
		t.Fatalf("before the failure: %v", err)
	}
	greeting := make([]byte, 6)
	if _, err := io.ReadFull(c, greeting); err != nil {
		t.Fatalf("before the failure: %v", err)
	}
	dials := len(h.dialer.list())

	sink.fail()
	if c2, err := h.dialTCP(dst); err == nil {
		c2.Close()
		t.Fatal("a new TCP flow was admitted after the audit log failed")
	}
	u := h.dialUDP(t, "203.0.113.10:7")
	u.Write([]byte("hello?"))
	if icmp := h.rec.wait(2*time.Second, func(b []byte) bool {
		typ, code, ok := icmpInfo(b)
		return ok && typ == 3 && code == 13
	}); icmp == nil {
		t.Error("a new UDP flow got no ICMP administratively prohibited after the audit log failed")
	}
	if d := h.dialer.list(); len(d) != dials {
		t.Errorf("dialled %v after the audit log failed; want nothing dialled", d[dials:])
	}
	if _, err := h.g.DialGuest(context.Background(), "tcp", netip.Addr{}, ap("10.0.2.100:80")); err == nil || !strings.Contains(err.Error(), "audit log failed") {
		t.Errorf("DialGuest after the failure: %v; want a refusal naming the audit log", err)
	}
	// The flow admitted before still works: ending it is the caller's job.
	c.Write([]byte("still here"))
	buf := make([]byte, 10)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "still here" {
		t.Errorf("the admitted flow: %q, %v", buf, err)
	}
	c.Close()
	if st := h.g.Stats(); st.TCPDenied != 1 || st.UDPDenied != 1 {
		t.Errorf("stats %+v; want one refused flow of each", st)
	}
}

// TestAuditFailureDuringDial: a flow whose dial was under way when the log
// failed is refused after the dial, not admitted unrecorded.
func TestAuditFailureDuringDial(t *testing.T) {
	var sink *failingSink
	failDuringDial := func(c *Config) {
		dial := c.Dial // the harness's dialer
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			sink.fail() // the log fails while this flow is being dialled
			return dial(ctx, network, addr)
		}
	}
	h := newHarness(t, withFailingAudit(&sink), failDuringDial)
	const dst = "203.0.113.10:8080"
	h.dialer.route("tcp", dst, tcpServer(t, "hello\n"))
	c, err := h.dialTCP(dst)
	if err == nil {
		// The handshake must not complete; if the stack says it did,
		// the connection must be dead.
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := c.Read(make([]byte, 6)); err == nil {
			t.Fatalf("the flow was admitted (read %d bytes) though the log failed during its dial", n)
		}
		c.Close()
	}
	if d := h.dialer.list(); len(d) != 1 {
		t.Errorf("dials %v; want the one that was under way", d)
	}
	if st := h.g.Stats(); st.TCPAllowed != 0 || st.TCPDenied != 1 {
		t.Errorf("stats %+v; want the flow refused", st)
	}
}
