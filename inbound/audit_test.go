package inbound

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/nsgate/nsgate/audit"
)

// auditLog is an audit.Sink that keeps its records, and notes in order
// where OnInbound was called.
type auditLog struct {
	mu    sync.Mutex
	recs  []audit.Event
	order []string // "audit" or "hook"
}

func (l *auditLog) Log(e audit.Event) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, e)
	l.order = append(l.order, "audit")
	return uint64(len(l.recs))
}

func (l *auditLog) hook(Event) {
	l.mu.Lock()
	l.order = append(l.order, "hook")
	l.mu.Unlock()
}

func (l *auditLog) snapshot() ([]audit.Event, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]audit.Event(nil), l.recs...), append([]string(nil), l.order...)
}

// TestForwarderAudit: every connection through a forward is one inbound
// record, allow when the worker was reached and deny otherwise, written
// before OnInbound hears of it.
func TestForwarderAudit(t *testing.T) {
	g := newFakeGuest(t)
	var log auditLog
	h := New(Options{Guest: testGuest, Dial: g.dial, Audit: &log, OnInbound: log.hook})
	defer h.Close()
	_, port := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})

	c := dialHost(t, "tcp", port)
	c.Write([]byte("x"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	src := c.LocalAddr().(*net.TCPAddr).AddrPort()

	g.mu.Lock()
	g.fail = errors.New("refused by the guest")
	g.mu.Unlock()
	d := dialHost(t, "tcp", port)
	if b, _ := io.ReadAll(d); len(b) != 0 {
		t.Fatalf("a connection the worker refused got %q", b)
	}
	// ReadAll returned: the connection was closed after the deny record.
	recs, order := log.snapshot()
	listen := netip.AddrPortFrom(loopback, port).String() + "/tcp"
	want := []audit.Inbound{
		{Action: "allow", Listen: listen, Dst: "10.0.2.100:80", Src: src.String()},
		{Action: "deny", Listen: listen, Dst: "10.0.2.100:80", Src: d.LocalAddr().(*net.TCPAddr).AddrPort().String()},
	}
	if len(recs) != len(want) {
		t.Fatalf("records %+v, want %+v", recs, want)
	}
	for i := range want {
		if recs[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, recs[i], want[i])
		}
	}
	if len(order) != 4 || order[0] != "audit" || order[1] != "hook" || order[2] != "audit" || order[3] != "hook" {
		t.Errorf("audit and OnInbound calls: %q, want each record before its hook", order)
	}
}

func TestRuleStrings(t *testing.T) {
	r := Rule{Proto: "udp", HostAddr: netip.MustParseAddr("0.0.0.0"), HostPort: 5353, GuestAddr: testGuest, GuestPort: 53}
	if got := r.Listen(); got != "0.0.0.0:5353/udp" {
		t.Errorf("Listen = %q", got)
	}
	if got := r.Guest().String(); got != "10.0.2.100:53" {
		t.Errorf("Guest = %q", got)
	}
}
