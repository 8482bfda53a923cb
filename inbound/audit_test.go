package inbound

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

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
	log.mu.Lock() // the forward's own record: TestForwarderAuditsForwards
	log.recs, log.order = nil, nil
	log.mu.Unlock()

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

// fields is e's record as the log writes it, with its event name.
func fields(t *testing.T, e audit.Event) map[string]any {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["event"] = e.EventName()
	return m
}

// failedLog is an audit sink whose log has failed (audit.Failer).
type failedLog struct {
	auditLog
	failed chan struct{}
}

func (l *failedLog) Failed() <-chan struct{} { return l.failed }

// TestForwarderAuditsForwards: opening a forward is a decision that
// exposes the worker on a host port, so it is recorded when it happens,
// not only once a connection arrives (an add_hostfwd on the API socket
// used to leave no record at all): a "forward" record for each forward
// added (its ID, listen and dst), refused (why) and removed. A forward
// that cannot be recorded is not opened: the audit fails closed.
func TestForwarderAuditsForwards(t *testing.T) {
	g := newFakeGuest(t)
	var log auditLog
	h := New(Options{Guest: testGuest, Dial: g.dial, Audit: &log})
	defer h.Close()
	id, port := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
	listen := netip.AddrPortFrom(loopback, port).String() + "/tcp"
	if _, err := h.Add(Rule{Proto: "tcp", HostAddr: loopback, HostPort: port, GuestPort: 81}); err == nil {
		t.Fatal("a taken port was forwarded twice")
	}
	if err := h.Remove(id); err != nil {
		t.Fatal(err)
	}
	recs, _ := log.snapshot()
	var got []map[string]any
	for _, r := range recs {
		if r.EventName() == "forward" {
			got = append(got, fields(t, r))
		}
	}
	want := []map[string]any{
		{"event": "forward", "action": "add", "id": float64(id), "listen": listen, "dst": "10.0.2.100:80"},
		{"event": "forward", "action": "deny", "listen": listen, "dst": "10.0.2.100:81"},
		{"event": "forward", "action": "remove", "id": float64(id), "listen": listen, "dst": "10.0.2.100:80"},
	}
	if len(got) != len(want) {
		t.Fatalf("forward records %v, want %d like %v", got, len(want), want)
	}
	for i, w := range want {
		if i == 1 {
			if e, _ := got[i]["error"].(string); e == "" {
				t.Errorf("refused forward's record %v has no error", got[i])
			}
			delete(got[i], "error")
		}
		if !reflect.DeepEqual(got[i], w) {
			t.Errorf("forward record %d = %v, want %v", i, got[i], w)
		}
	}

	// The log has failed: no forward opens, and the port stays free.
	fl := &failedLog{failed: make(chan struct{})}
	close(fl.failed)
	h2 := New(Options{Guest: testGuest, Dial: g.dial, Audit: fl})
	defer h2.Close()
	p := freePort(t, "tcp")
	if fw, err := h2.Add(Rule{Proto: "tcp", HostAddr: loopback, HostPort: p, GuestPort: 80}); err == nil {
		t.Errorf("a forward was opened (ID %d) with the audit log down", fw.ID)
	}
	if n := len(h2.List()); n != 0 {
		t.Errorf("%d forwards listed with the audit log down", n)
	}
	if c, err := net.Dial("tcp4", netip.AddrPortFrom(loopback, p).String()); err == nil {
		c.Close()
		t.Error("the host port accepts connections with the audit log down")
	}
}

// ends waits until log holds n inbound_end records and returns them as
// the log writes them.
func ends(t *testing.T, log *auditLog, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _ := log.snapshot()
		var out []map[string]any
		for _, r := range recs {
			if r.EventName() == "inbound_end" {
				out = append(out, fields(t, r))
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForwarderAuditsInboundBytes: a published port is a channel between
// the worker and whoever connects, which the policy does not look at; the
// log must at least say how much went through it. Each connection (TCP)
// or flow (UDP) that reached the worker ends with an inbound_end record:
// bytes_out from the worker to the client, bytes_in the other way.
func TestForwarderAuditsInboundBytes(t *testing.T) {
	g := newFakeGuest(t)
	var log auditLog
	h := New(Options{Guest: testGuest, Dial: g.dial, Audit: &log, UDPIdle: 200 * time.Millisecond})
	defer h.Close()
	_, tport := addFwd(t, h, Rule{Proto: "tcp", GuestPort: 80})
	_, uport := addFwd(t, h, Rule{Proto: "udp", GuestPort: 53})

	c := dialHost(t, "tcp", tport)
	c.Write([]byte("secret"))
	c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "secret" {
		t.Fatalf("echo: %q, %v", b, err)
	}
	tsrc := c.LocalAddr().(*net.TCPAddr).AddrPort().String()
	got := ends(t, &log, 1)
	if len(got) != 1 {
		t.Fatalf("inbound_end records after a TCP connection: %v", got)
	}
	want := map[string]any{"event": "inbound_end", "listen": netip.AddrPortFrom(loopback, tport).String() + "/tcp",
		"dst": "10.0.2.100:80", "src": tsrc, "bytes_out": float64(6), "bytes_in": float64(6)}
	delete(got[0], "duration_ms")
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("TCP inbound_end = %v, want %v", got[0], want)
	}

	u := dialHost(t, "udp", uport)
	u.Write([]byte("ab"))
	buf := make([]byte, 100)
	if n, err := u.Read(buf); err != nil || string(buf[:n]) != "echo:ab" {
		t.Fatalf("udp echo: %q, %v", buf[:n], err)
	}
	got = ends(t, &log, 2) // the flow ends after UDPIdle
	if len(got) != 2 {
		t.Fatalf("inbound_end records after a UDP flow went idle: %v", got)
	}
	want = map[string]any{"event": "inbound_end", "listen": netip.AddrPortFrom(loopback, uport).String() + "/udp",
		"dst": "10.0.2.100:53", "src": u.LocalAddr().String(), "bytes_out": float64(7), "bytes_in": float64(2),
		"error": "idle timeout"} // as a UDP flow_end: a UDP flow ends no other way
	delete(got[1], "duration_ms")
	if !reflect.DeepEqual(got[1], want) {
		t.Errorf("UDP inbound_end = %v, want %v", got[1], want)
	}
}
