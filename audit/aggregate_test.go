package audit

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestFloodIsAggregated(t *testing.T) {
	const events = 100_000
	path := tempLog(t)
	clock := newFakeClock()
	l := mustOpen(t, path, Options{Now: clock.Now})
	step := 5 * time.Second / events
	immediate := 0
	for i := range events {
		if l.Log(denyFlow(1024+i%60000)) != 0 {
			immediate++
		}
		clock.Advance(step)
	}
	mustClose(t, l)

	lines := readLines(t, path)
	if len(lines) > 12 {
		t.Fatalf("%d records for a 5 s flood of one denial; want about 2 per second", len(lines))
	}
	if immediate < 5 || immediate > 6 {
		t.Errorf("%d denials logged at once, want one per window (5 or 6)", immediate)
	}
	var total float64
	for _, line := range lines {
		m := decode(t, line)
		if c, ok := m["count"].(float64); ok {
			total += c
		} else {
			total++
		}
	}
	if total != events {
		t.Errorf("records account for %v denials, want %d", total, events)
	}
	if n, _, err := VerifyFile(path, nil); err != nil || n != len(lines) {
		t.Errorf("VerifyFile = %d, %v", n, err)
	}
}

func TestAggregationWindow(t *testing.T) {
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now}, &buf)
	if s := l.Log(denyFlow(1)); s != 1 {
		t.Fatalf("first denial seq %d, want 1", s)
	}
	for i := range 9 {
		if s := l.Log(denyFlow(2 + i)); s != 0 {
			t.Fatalf("repeat %d logged with seq %d, want folded (0)", i, s)
		}
	}
	clock.Advance(500 * time.Millisecond)
	l.sweep(false) // window not over: nothing to write
	if s := l.Log(denyFlow(20)); s != 0 {
		t.Fatalf("repeat within the window logged with seq %d", s)
	}
	clock.Advance(600 * time.Millisecond)
	l.sweep(false) // window over: the aggregate gets seq 2
	if s := l.Log(denyFlow(21)); s != 3 {
		t.Fatalf("first denial of the next window seq %d, want 3", s)
	}
	mustClose(t, l)

	lines := splitLines(buf.Bytes())
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(lines), buf.String())
	}
	first, agg, next := decode(t, lines[0]), decode(t, lines[1]), decode(t, lines[2])
	if _, ok := first["count"]; ok {
		t.Errorf("first record has a count: %s", lines[0])
	}
	if agg["count"] != float64(10) || agg["src"] != "10.0.2.100:2" || agg["seq"] != float64(2) {
		t.Errorf("aggregate %s; want seq 2, count 10, the first folded event's src", lines[1])
	}
	if agg["time"] != clock.t.Format(time.RFC3339Nano) {
		t.Errorf("aggregate time %v, want the window's end %v", agg["time"], clock.t.Format(time.RFC3339Nano))
	}
	if _, ok := next["count"]; ok || next["src"] != "10.0.2.100:21" {
		t.Errorf("next window's first record %s", lines[2])
	}
}

func TestAggregationKeys(t *testing.T) {
	base := denyFlow(1000)
	with := func(f func(*Flow)) Flow { c := base; f(&c); return c }
	dns := DNS{Action: "deny", QName: "evil.test", QType: "A", Rule: "default"}
	pkt := Packet{Action: "deny", Proto: "icmp", Src: "10.0.2.100", Dst: "203.0.113.1", Reason: "icmp type 8"}
	cases := []struct {
		name   string
		why    string
		a, b   Event
		folded bool
	}{
		{"source port", "a flood from many source ports is one denial", base, with(func(f *Flow) { f.Src = "10.0.2.100:2000" }), true},
		{"source ip", "a different source is a different story", base, with(func(f *Flow) { f.Src = "10.0.2.101:1000" }), false},
		{"ipv6 source port", "ports are stripped from bracketed addresses too",
			with(func(f *Flow) { f.Src = "[fd00::100]:1" }), with(func(f *Flow) { f.Src = "[fd00::100]:2" }), true},
		{"destination", "each refused destination is reported", base, with(func(f *Flow) { f.Dst = "169.254.169.254:81" }), false},
		{"rule", "a different rule is a different reason", base, with(func(f *Flow) { f.Rule = "default" }), false},
		{"host", "each refused name is reported", base, with(func(f *Flow) { f.Host = "evil.test" }), false},
		{"proto", "udp and tcp are reported apart", base, with(func(f *Flow) { f.Proto = "udp" }), false},
		{"allowed flows", "allowed flows fold too (Log then returns the first one's seq)",
			with(func(f *Flow) { f.Action = "allow" }), with(func(f *Flow) { f.Action = "allow"; f.Src = "10.0.2.100:2" }), true},
		{"allowed flows upstream", "an allowed flow dialled elsewhere is another story",
			with(func(f *Flow) { f.Action = "allow"; f.Upstream = "203.0.113.1:80" }), with(func(f *Flow) { f.Action = "allow"; f.Upstream = "203.0.113.2:80" }), false},
		{"dns same", "repeated NXDOMAINs fold", dns, dns, true},
		{"dns qtype", "A and AAAA are reported apart", dns, DNS{Action: "deny", QName: "evil.test", QType: "AAAA", Rule: "default"}, false},
		{"dns qname", "each refused name is reported", dns, DNS{Action: "deny", QName: "evil2.test", QType: "A", Rule: "default"}, false},
		{"dns allow", "repeated allowed answers fold", DNS{Action: "allow", QName: "a.test", QType: "A", Answer: []string{"198.18.0.1"}}, DNS{Action: "allow", QName: "a.test", QType: "A", Answer: []string{"198.18.0.1"}}, true},
		{"dns allow answer", "another answer is another record", DNS{Action: "allow", QName: "a.test", QType: "A", Answer: []string{"198.18.0.1"}}, DNS{Action: "allow", QName: "a.test", QType: "A", Answer: []string{"198.18.0.2"}}, false},
		{"dns allow vs deny", "an answer and a refusal are apart", DNS{Action: "allow", QName: "a.test", QType: "A"}, DNS{Action: "deny", QName: "a.test", QType: "A"}, false},
		{"packet same", "an ICMP flood folds", pkt, pkt, true},
		{"packet reason", "packets have no rule; the reason tells them apart", pkt, Packet{Action: "deny", Proto: "icmp", Src: "10.0.2.100", Dst: "203.0.113.1", Reason: "icmp type 13"}, false},
		{"flow then packet", "event types are keyed apart", Packet{Action: "deny", Proto: "tcp", Src: base.Src, Dst: base.Dst}, Flow{Action: "deny", Proto: "tcp", Src: base.Src, Dst: base.Dst}, false},
		{"l7 same flow", "l7 records of folded flows (one flow record) fold", L7{Action: "deny", FlowSeq: 1, Host: "a.test", SNI: "b.test"}, L7{Action: "deny", FlowSeq: 1, Host: "a.test", SNI: "b.test"}, true},
		{"l7 flows", "l7 records of distinct flows are apart", L7{Action: "deny", FlowSeq: 1, Host: "a.test", SNI: "b.test"}, L7{Action: "deny", FlowSeq: 2, Host: "a.test", SNI: "b.test"}, false},
		{"exec", "repeated exec attempts fold, whatever the pid", Exec{Action: "deny", Path: "/bin/sh", PID: 1}, Exec{Action: "deny", Path: "/bin/sh", PID: 2}, true},
		{"exec path", "each path is recorded", Exec{Action: "deny", Path: "/bin/sh"}, Exec{Action: "deny", Path: "/bin/bash"}, false},
		{"exec action", "an allowed exec is apart from a refused one", Exec{Action: "allow", Path: "/bin/sh"}, Exec{Action: "deny", Path: "/bin/sh"}, false},
		{"flow_end", "flow ends of one flow record fold", FlowEnd{FlowSeq: 3, BytesOut: 1}, FlowEnd{FlowSeq: 3, BytesOut: 2}, true},
		{"flow_end flows", "flow ends of distinct flows are apart", FlowEnd{FlowSeq: 3}, FlowEnd{FlowSeq: 4}, false},
		{"flow_end error", "a different error is a different story", FlowEnd{FlowSeq: 3}, FlowEnd{FlowSeq: 3, Error: "idle timeout"}, false},
		{"inbound source port", "connections from one client to one forward fold, whatever the source port",
			Inbound{Action: "allow", Listen: "l", Dst: "d", Src: "192.0.2.7:1"}, Inbound{Action: "allow", Listen: "l", Dst: "d", Src: "192.0.2.7:2"}, true},
		{"inbound client", "each client is recorded",
			Inbound{Action: "allow", Listen: "l", Dst: "d", Src: "192.0.2.7:1"}, Inbound{Action: "allow", Listen: "l", Dst: "d", Src: "192.0.2.8:1"}, false},
		{"inbound listen", "each forward is recorded",
			Inbound{Action: "deny", Listen: "l", Dst: "d", Src: "s"}, Inbound{Action: "deny", Listen: "l2", Dst: "d", Src: "s"}, false},
		{"inbound_end", "ends of one client's connections to one forward fold, bytes summed",
			InboundEnd{Listen: "l", Dst: "d", Src: "192.0.2.7:1", BytesOut: 1}, InboundEnd{Listen: "l", Dst: "d", Src: "192.0.2.7:2", BytesOut: 2}, true},
		{"inbound_end client", "each client's ends are apart",
			InboundEnd{Listen: "l", Dst: "d", Src: "192.0.2.7:1"}, InboundEnd{Listen: "l", Dst: "d", Src: "192.0.2.8:1"}, false},
		{"forward", "forwards are opened by the operator, not the worker or a client: never folded",
			Forward{Action: "add", Listen: "l", Dst: "d"}, Forward{Action: "add", Listen: "l", Dst: "d"}, false},
		{"pointer", "a pointer to an event is the same event", &dns, dns, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// No burst: a repeat folds at once.
			l := newLogger(Options{Now: newFakeClock().Now, Burst: -1})
			if s := l.Log(tc.a); s != 1 {
				t.Fatalf("first event seq %d, want 1", s)
			}
			s := l.Log(tc.b)
			// A folded event gets no seq of its own: 0, or the first
			// one's for an allowed flow.
			if folded := s != 2; folded != tc.folded {
				t.Errorf("second event seq %d: folded = %v, want %v (%s)", s, folded, tc.folded, tc.why)
			}
		})
	}
}

func TestAggregationTableIsBounded(t *testing.T) {
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now, AggKeys: 4}, &buf)
	seqs := 0
	for i := range 10 {
		if l.Log(Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: fmt.Sprintf("203.0.113.%d:80", i), Rule: "default"}) != 0 {
			seqs++
		}
	}
	l.mu.Lock()
	size := len(l.agg)
	l.mu.Unlock()
	if size > 5 {
		t.Errorf("table holds %d keys with AggKeys 4 (+1 overflow)", size)
	}
	mustClose(t, l)
	// 4 keys logged at once, the 5th opens the overflow entry and is
	// logged, the other 5 fold into it.
	if seqs != 5 {
		t.Errorf("%d denials logged at once, want 5", seqs)
	}
	lines := splitLines(buf.Bytes())
	if len(lines) != 6 {
		t.Fatalf("%d records, want 6:\n%s", len(lines), buf.String())
	}
	m := decode(t, lines[5])
	if m["count"] != float64(5) || m["dst"] != "" || !strings.Contains(m["reason"].(string), "bound") {
		t.Errorf("overflow record %s; want count 5, no dst, a reason naming the bound", lines[5])
	}
}

func TestFullQueueFoldsDenials(t *testing.T) {
	clock := newFakeClock()
	l := newLogger(Options{Now: clock.Now, QueueLen: 4})
	var buf bytes.Buffer
	l.setOutput(&buf, nil, zeroHash, 0)
	for i := range 4 {
		if s := l.Log(FlowEnd{FlowSeq: uint64(i)}); s != uint64(i+1) {
			t.Fatalf("seq %d, want %d", s, i+1)
		}
	}
	// The writer is not running: the queue is full. Denials must not wait.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			if s := l.Log(denyFlow(i)); s != 0 {
				t.Errorf("denial on a full queue got seq %d, want folded", s)
			}
		}
		l.Log(DNS{Action: "deny", QName: "x.test", QType: "A", Rule: "default"})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Log of a denial blocked on a full queue")
	}
	if len(l.pending) != 4 {
		t.Errorf("queue grew to %d past its bound 4", len(l.pending))
	}
	go l.run()
	mustClose(t, l)
	lines := splitLines(buf.Bytes())
	if len(lines) != 6 {
		t.Fatalf("%d records, want 4 + 2 aggregates:\n%s", len(lines), buf.String())
	}
	counts := map[string]float64{}
	for _, line := range lines[4:] {
		m := decode(t, line)
		counts[m["event"].(string)] = m["count"].(float64)
	}
	if counts["flow"] != 100 || counts["dns"] != 1 {
		t.Errorf("aggregate counts %v, want flow 100 and dns 1 (every folded denial counted)", counts)
	}
	if n, _, err := Verify(bytes.NewReader(buf.Bytes()), nil); err != nil || n != 6 {
		t.Errorf("Verify = %d, %v", n, err)
	}
}

func TestWaitingEventIsReleasedByClose(t *testing.T) {
	l := newLogger(Options{QueueLen: 1})
	l.Log(Exit{})
	got := make(chan uint64)
	go func() { got <- l.Log(Exit{}) }() // waits for room
	time.Sleep(10 * time.Millisecond)
	go l.run()
	select {
	case s := <-got:
		if s != 2 {
			t.Errorf("waiting event got seq %d, want 2", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("event waiting for room was never let in")
	}
	mustClose(t, l)
}

func TestHumanLines(t *testing.T) {
	var human bytes.Buffer
	clock := newFakeClock()
	l := mustOpen(t, "", Options{Human: &human, Now: clock.Now})
	l.Log(Start{Version: "x"})
	l.Log(denyFlow(1))
	l.Log(denyFlow(2))
	l.Log(denyFlow(3))
	l.Log(Flow{Action: "allow", Proto: "tcp", Src: "10.0.2.100:5", Dst: "198.18.0.1:443", Rule: "allow[0]"})
	l.Log(L7{Action: "deny", FlowSeq: 9, Host: "app.test", SNI: "evil.test", Reason: "sni does not match"})
	l.Log(L7{Action: "deny", FlowSeq: 9, Host: "app.test", SNI: "evil.test", Reason: "sni does not match"})
	l.Log(Exec{Action: "deny", Path: "/bin/sh", PID: 7})
	l.Log(Exec{Action: "allow", Path: "/usr/bin/curl", PID: 7})
	l.Log(Inbound{Action: "deny", Listen: "127.0.0.1:8080", Dst: "10.0.2.100:80", Src: "127.0.0.1:5000"})
	l.Log(DNS{Action: "deny", QName: "evil.test", QType: "A", Rule: "default"})
	l.Log(Packet{Action: "deny", Proto: "icmp", Src: "10.0.2.100", Dst: "203.0.113.9"})
	clock.Advance(2 * time.Second)
	l.sweep(false)
	l.Log(Exit{})
	mustClose(t, l)
	want := []string{
		"nsgate: deny tcp 10.0.2.100:1 -> 169.254.169.254:80 rule=builtin:metadata: 169.254.169.254 is a cloud metadata address",
		"nsgate: deny l7 flow=9 host=app.test sni=evil.test: sni does not match",
		"nsgate: deny exec /bin/sh pid=7",
		"nsgate: deny inbound 127.0.0.1:5000 -> 127.0.0.1:8080 -> 10.0.2.100:80",
		"nsgate: deny dns evil.test A rule=default",
		"nsgate: deny icmp 10.0.2.100 -> 203.0.113.9",
		// The repeats folded from the first one, summed in the order of
		// the records that stand for them.
		"nsgate: deny tcp 10.0.2.100:2 -> 169.254.169.254:80 rule=builtin:metadata: 169.254.169.254 is a cloud metadata address (2 more like this in the last second)",
		"nsgate: deny l7 flow=9 host=app.test sni=evil.test: sni does not match (1 more like this in the last second)",
	}
	if got := strings.Split(strings.TrimSuffix(human.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("human lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHumanExecLines: an exec refusal is said once per path, and a path
// that names no file (a $PATH lookup) is recorded but not said.
func TestHumanExecLines(t *testing.T) {
	var human, out bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Human: &human, Now: clock.Now}, &out)
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin"} {
		l.Log(Exec{Action: "deny", Path: dir + "/curl", PID: 7, Reason: "cannot resolve: no such file or directory", Missing: true})
	}
	for range 3 {
		l.Log(Exec{Action: "deny", Path: "/usr/bin/curl", PID: 7, Reason: "/usr/bin/curl is not in the exec allowlist"})
		clock.Advance(2 * time.Second)
		l.sweep(false)
	}
	l.Log(Exec{Action: "deny", Path: "/bin/ls", PID: 8, Reason: "/bin/ls is not in the exec allowlist"})
	mustClose(t, l)
	want := "nsgate: deny exec /usr/bin/curl pid=7: /usr/bin/curl is not in the exec allowlist\n" +
		"nsgate: deny exec /bin/ls pid=8: /bin/ls is not in the exec allowlist\n"
	if human.String() != want {
		t.Errorf("human lines:\n%s\nwant:\n%s", human.String(), want)
	}
	if n := strings.Count(out.String(), `"missing":true`); n != 2 || !strings.Contains(out.String(), `"count":2`) {
		t.Errorf("%d records of the missing paths, want 2: the first and an aggregate of the other 2 (recorded, not said)", n)
	}
}

func TestHumanOverflowLine(t *testing.T) {
	var human bytes.Buffer
	l := mustOpen(t, "", Options{Human: &human, AggKeys: 1, Now: newFakeClock().Now})
	for i := range 4 {
		l.Log(DNS{Action: "deny", QName: fmt.Sprintf("n%d.test", i), QType: "A", Rule: "default"})
	}
	mustClose(t, l)
	want := "nsgate: deny dns n0.test A rule=default\n" +
		"nsgate: deny dns n1.test A rule=default\n" +
		"nsgate: deny dns: 2 more of differing kinds in the last second (too many distinct denials to list)\n"
	if human.String() != want {
		t.Errorf("human:\n%s\nwant:\n%s", human.String(), want)
	}
}

// TestExitComesLast: denials folded in the current window are written
// before the exit record, so exit is the log's last record.
func TestExitComesLast(t *testing.T) {
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now}, &buf)
	l.Log(denyFlow(1))
	l.Log(denyFlow(2)) // folded, window still open
	l.Log(Exit{Code: 0})
	mustClose(t, l)
	lines := splitLines(buf.Bytes())
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3 (deny, aggregate, exit):\n%s", len(lines), buf.String())
	}
	if last := decode(t, lines[2]); last["event"] != "exit" {
		t.Errorf("last record %s, want the exit record", lines[2])
	}
	if agg := decode(t, lines[1]); agg["count"] != float64(1) {
		t.Errorf("aggregate %s, want count 1 before the exit", lines[1])
	}
}

func TestHostOnly(t *testing.T) {
	cases := []struct{ in, want, why string }{
		{"10.0.2.100:4242", "10.0.2.100", "IPv4 with a port"},
		{"[fd00::100]:4242", "fd00::100", "bracketed IPv6 with a port"},
		{"[::1]", "::1", "bracketed IPv6 without a port (a Host header)"},
		{"app.test:8080", "app.test", "a name with a port (a Host header)"},
		{"app.test", "app.test", "a name alone is unchanged"},
		{"fd00::100", "fd00::100", "bare IPv6 is unchanged, not cut at a colon"},
		{"", "", "empty stays empty"},
	}
	for _, tc := range cases {
		if got := HostOnly(tc.in); got != tc.want {
			t.Errorf("%s: HostOnly(%q) = %q, want %q", tc.why, tc.in, got, tc.want)
		}
	}
}

// countLines counts the records written through it.
type countLines struct {
	mu sync.Mutex
	n  int
	b  bytes.Buffer
}

func (c *countLines) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += bytes.Count(p, []byte{'\n'})
	return c.b.Write(p)
}

// accounted returns how many events the records stand for: 1 for a record
// without count, count for an aggregate.
func accounted(t *testing.T, log []byte) (records int, events uint64) {
	t.Helper()
	for _, line := range splitLines(log) {
		records++
		if c, ok := decode(t, line)["count"].(float64); ok {
			events += uint64(c)
		} else {
			events++
		}
	}
	return records, events
}

// TestAllowedDNSFloodIsBounded: a worker repeating `A app.test` and `AAAA
// app.test` (allowed) as fast as it can gets a log bounded by windows ×
// (burst + 2 × keys), and the records still account for every answer.
func TestAllowedDNSFloodIsBounded(t *testing.T) {
	const events, secs = 100_000, 5
	var out countLines
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now, QueueLen: 1 << 20}, &out)
	a := DNS{QName: "app.test", QType: "A", Action: "allow", Answer: []string{"198.18.0.1"}, Rule: "allow[0]"}
	aaaa := DNS{QName: "app.test", QType: "AAAA", Action: "allow", Answer: []string{"fd6e:7367:6174::1"}, Rule: "allow[0]"}
	step := secs * time.Second / events
	for i := range events {
		if i%2 == 0 {
			l.Log(a)
		} else {
			l.Log(aaaa)
		}
		clock.Advance(step)
		if i%(events/secs/2) == 0 {
			l.sweep(false) // the writer's ticker, every half window
		}
	}
	mustClose(t, l)
	records, total := accounted(t, out.b.Bytes())
	const keys, windows = 2, secs + 1
	bound := windows * (DefaultBurst + 2*keys)
	t.Logf("%d allowed answers in %d s (%d per second): %d records, %d bytes (before: one record each)", events, secs, events/secs, records, out.b.Len())
	if records > bound {
		t.Errorf("%d records; want at most %d (windows %d × (burst %d + 2 × %d keys))", records, bound, windows, DefaultBurst, keys)
	}
	if total != events {
		t.Errorf("the records stand for %d answers, want %d", total, events)
	}
	if n, _, err := Verify(bytes.NewReader(out.b.Bytes()), nil); err != nil || n != records {
		t.Errorf("Verify = %d, %v", n, err)
	}
}

// TestWorstCaseRecordsPerWindow measures what a worker that varies every
// record it causes can get written: a new key every time, each repeated
// once more (so that it also gets an aggregate), denials and other kinds
// mixed, as fast as it likes. The bound is Burst + 2 × AggKeys records per
// window, plus two per overflow key, whatever the rate.
func TestWorstCaseRecordsPerWindow(t *testing.T) {
	var out countLines
	clock := newFakeClock()
	// A queue that always has room: the worst case (a full queue folds more).
	// The timeout is long: under -race on a busy machine the writer takes
	// seconds to drain 200,000 records, and this test is about counts.
	l := startMem(Options{Now: clock.Now, QueueLen: 1 << 22, Timeout: time.Minute}, &out)
	const windows, perWindow = 5, 40_000
	step := time.Second / perWindow
	var counts []int
	last := 0
	for w := range windows {
		for i := range perWindow {
			var ev Event
			name := fmt.Sprintf("n%d-%d.test", w, i/2) // each key twice
			switch i / 2 % 4 {
			case 0:
				ev = DNS{QName: name, QType: "A", Action: "deny", Rule: "default"}
			case 1:
				ev = DNS{QName: name, QType: "A", Action: "allow", Answer: []string{"198.18.0.1"}, Rule: "allow[0]"}
			case 2:
				ev = Exec{Action: "deny", Path: "/tmp/" + name, Reason: "not in the exec allowlist"}
			case 3:
				ev = Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: name + ":80", Rule: "default"}
			}
			l.Log(ev)
			clock.Advance(step)
			if i%(perWindow/2) == 0 {
				l.sweep(false)
			}
		}
		l.mu.Lock()
		n := l.seq
		l.mu.Unlock()
		counts = append(counts, int(n)-last)
		last = int(n)
	}
	mustClose(t, l)
	bound := DefaultBurst + 2*defaultAggKeys + 2*12
	worst := 0
	for _, c := range counts[1:] { // the first window starts with an empty table
		worst = max(worst, c)
	}
	t.Logf("records per 1 s window with %d distinct events per second: %v (bound %d); %d bytes in all, %d per record", perWindow, counts, bound, out.b.Len(), out.b.Len()/max(out.n, 1))
	if worst > bound {
		t.Errorf("a window got %d records; the bound is %d", worst, bound)
	}
	if n, _, err := Verify(bytes.NewReader(out.b.Bytes()), nil); err != nil {
		t.Errorf("Verify = %d, %v", n, err)
	}
}

// TestFoldedFlowsStandForTheirRecord: folded allowed flows get the seq of
// the record that stands for them, so their flow_end and l7 records name a
// real flow record; the flow_end records fold too, with exact totals.
func TestFoldedFlowsStandForTheirRecord(t *testing.T) {
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now, Burst: -1}, &buf)
	flow := func(port int) Flow {
		return Flow{Action: "allow", Proto: "tcp", Src: fmt.Sprintf("10.0.2.100:%d", port), Dst: "198.18.0.1:443", Host: "app.test",
			Upstream: "203.0.113.10:443", Rule: "allow[0]", Reason: "host app.test"}
	}
	s1 := l.Log(flow(1000))
	s2 := l.Log(flow(1001))
	s3 := l.Log(flow(1002))
	if s1 != 1 || s2 != s1 || s3 != s1 {
		t.Fatalf("seqs %d %d %d; want every folded flow to get the first one's (1)", s1, s2, s3)
	}
	for i, port := range []int{1000, 1001, 1002} {
		l.Log(L7{Action: "allow", FlowSeq: s1, Host: "app.test", SNI: "app.test"})
		l.Log(FlowEnd{FlowSeq: s1, BytesOut: int64(100 * (i + 1)), BytesIn: int64(1000 * (i + 1)), DurationMS: int64(port - 990)})
	}
	mustClose(t, l)
	lines := splitLines(buf.Bytes())
	var got []map[string]any
	for _, line := range lines {
		got = append(got, decode(t, line))
	}
	if len(got) != 6 {
		t.Fatalf("%d records, want 6 (flow, l7, flow_end, and the aggregate of each):\n%s", len(got), buf.String())
	}
	byEvent := map[string][]map[string]any{}
	for _, m := range got {
		byEvent[m["event"].(string)] = append(byEvent[m["event"].(string)], m)
	}
	aggFlow := byEvent["flow"][1]
	if aggFlow["count"] != float64(2) || aggFlow["flow"] != float64(1) || aggFlow["src"] != "10.0.2.100:1001" {
		t.Errorf("flow aggregate %v; want count 2, flow 1 (the record that stands for them), the first folded src", aggFlow)
	}
	first, agg := byEvent["flow_end"][0], byEvent["flow_end"][1]
	if first["flow"] != float64(1) || first["bytes_out"] != float64(100) {
		t.Errorf("first flow_end %v", first)
	}
	if agg["flow"] != float64(1) || agg["count"] != float64(2) || agg["bytes_out"] != float64(200+300) ||
		agg["bytes_in"] != float64(2000+3000) || agg["duration_ms"] != float64(12) {
		t.Errorf("flow_end aggregate %v; want flow 1, count 2, bytes summed (500 out, 5000 in), the longest duration (12)", agg)
	}
	if l7 := byEvent["l7"]; len(l7) != 2 || l7[1]["count"] != float64(2) {
		t.Errorf("l7 records %v; want the first and an aggregate of 2", l7)
	}
	if n, _, err := Verify(bytes.NewReader(buf.Bytes()), nil); err != nil || n != 6 {
		t.Errorf("Verify = %d, %v", n, err)
	}
}

// TestBurst: identical records other than allowed flows fold from their
// first repeat (the first is written, the rest counted), so a worker's
// cost on the disk is per distinct event; allowed flows are written one
// by one while the window's burst lasts, then keyed and folded; the next
// window has a burst of its own. The burst also writes distinct records
// that find the key table full.
func TestBurst(t *testing.T) {
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now, Burst: 3, AggKeys: 4}, &buf)
	ev := DNS{QName: "app.test", QType: "A", Action: "allow", Answer: []string{"198.18.0.1"}, Rule: "allow[0]"}
	var seqs []uint64
	for range 6 {
		seqs = append(seqs, l.Log(ev))
	}
	if want := []uint64{1, 0, 0, 0, 0, 0}; fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Errorf("identical allowed answers: seqs %v, want %v: the first written, folded from the first repeat", seqs, want)
	}
	flow := Flow{Action: "allow", Proto: "tcp", Src: "10.0.2.100:40000", Dst: "203.0.113.10:443", Rule: "allow[0]"}
	seqs = nil
	for range 6 {
		seqs = append(seqs, l.Log(flow))
	}
	if want := []uint64{2, 3, 4, 5, 5, 5}; fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Errorf("allowed flows: seqs %v, want %v: three in the burst, then the key's first, which stands for the rest", seqs, want)
	}
	clock.Advance(1100 * time.Millisecond)
	if s := l.Log(flow); s != 6 {
		t.Errorf("next window: seq %d, want 6 (a new burst; the last window's aggregates come with the sweep)", s)
	}
	// Denials of names are keyed from the first too.
	deny := DNS{QName: "evil.test", QType: "A", Action: "deny", Rule: "default"}
	if s1, s2 := l.Log(deny), l.Log(deny); s1 == 0 || s2 != 0 {
		t.Errorf("denials: %d %d; want the first written and the second folded", s1, s2)
	}
	mustClose(t, l)
	if _, total := accounted(t, buf.Bytes()); total != 15 {
		t.Errorf("records stand for %d events, want 15", total)
	}
}

// TestLongFieldsAreClipped: the strings a worker chooses freely are cut at
// MaxField bytes, so a record cannot be made huge.
func TestLongFieldsAreClipped(t *testing.T) {
	long := "/tmp/" + strings.Repeat("é", 3000) // 2-byte runes: the cut must not split one
	var buf bytes.Buffer
	l := startMem(Options{}, &buf)
	l.Log(Exec{Action: "deny", Path: long, Reason: "cannot resolve " + long})
	l.Log(&L7{Action: "deny", FlowSeq: 1, Host: "app.test", HTTPHost: long})
	short := Exec{Action: "deny", Path: "/bin/sh"}
	l.Log(short)
	mustClose(t, l)
	lines := splitLines(buf.Bytes())
	for _, line := range lines[:2] {
		if len(line) > 3*MaxField+400 {
			t.Errorf("record of %d bytes: %.120s", len(line), line)
		}
	}
	m := decode(t, lines[0])
	path := m["path"].(string)
	if !strings.HasPrefix(long, strings.SplitN(path, "…", 2)[0]) || !strings.HasSuffix(path, " more bytes)") || !utf8.ValidString(path) {
		t.Errorf("clipped path %q", path)
	}
	if m := decode(t, lines[2]); m["path"] != "/bin/sh" {
		t.Errorf("a short path changed: %v", m["path"])
	}
	var ev Event = short
	if a := testing.AllocsPerRun(100, func() { normalize(ev) }); a != 0 {
		t.Errorf("normalize of a short exec allocates %v times", a)
	}
}

// The sweep's timer runs only while a window is open; once a window is
// swept, a new one must arm it again, or its aggregate would wait for
// Close.
func TestSweepRearmsAfterIdle(t *testing.T) {
	path := tempLog(t)
	l := mustOpen(t, path, Options{Window: 20 * time.Millisecond})
	waitRecords := func(n int) {
		t.Helper()
		for range 500 {
			if len(readLines(t, path)) >= n {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%d records after 5 s, want %d (an aggregate was not swept):\n%s", len(readLines(t, path)), n, bytes.Join(readLines(t, path), []byte("\n")))
	}
	for round := range 2 {
		for i := range 5 {
			l.Log(denyFlow(100*round + i))
		}
		// The first denial and the aggregate of the four folded ones.
		waitRecords(2 * (round + 1))
		for range 500 {
			if !l.aggregating() {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if l.aggregating() {
			t.Fatal("a window is still open long after its aggregate was written")
		}
	}
	mustClose(t, l)
	lines := readLines(t, path)
	if len(lines) != 4 {
		t.Fatalf("%d records, want 4:\n%s", len(lines), bytes.Join(lines, []byte("\n")))
	}
	for _, i := range []int{1, 3} {
		if c := decode(t, lines[i])["count"]; c != float64(4) {
			t.Errorf("record %d count %v, want the aggregate of 4: %s", i, c, lines[i])
		}
	}
}

// TestInboundFloodIsBounded: whoever can reach a published port (the LAN,
// for a forward on 0.0.0.0) causes one inbound record per TCP connection
// and per new UDP source port, allowed or refused at the forward's limit.
// Like the worker's flows, a flood of them is folded, or a client could
// fill the disk and so stop the gateway (the audit fails closed).
func TestInboundFloodIsBounded(t *testing.T) {
	const events, secs = 100_000, 5
	var out countLines
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now, QueueLen: 1 << 20}, &out)
	step := secs * time.Second / events
	for i := range events {
		action := "allow"
		if i%2 == 1 {
			action = "deny" // e.g. past MaxUDPFlows: one per datagram
		}
		l.Log(Inbound{Action: action, Listen: "0.0.0.0:5353/udp", Dst: "10.0.2.100:53", Src: "192.0.2.7:" + itoa(1024+i%60000)})
		clock.Advance(step)
		if i%(events/secs/2) == 0 {
			l.sweep(false)
		}
	}
	mustClose(t, l)
	records, total := accounted(t, out.b.Bytes())
	const keys, windows = 2, secs + 1
	bound := windows * (DefaultBurst + 2*keys)
	t.Logf("%d inbound connections in %d s: %d records", events, secs, records)
	if records > bound {
		t.Errorf("%d records; want at most %d (windows %d × (burst %d + 2 × %d keys))", records, bound, windows, DefaultBurst, keys)
	}
	if total != events {
		t.Errorf("the records stand for %d connections, want %d", total, events)
	}
	if n, _, err := Verify(bytes.NewReader(out.b.Bytes()), nil); err != nil || n != records {
		t.Errorf("Verify = %d, %v", n, err)
	}
}

// TestPathMissesFold: the misses of one $PATH lookup (one pid, one name,
// each directory in turn) make one record and one aggregate, not one
// record each; another command's misses are its own.
func TestPathMissesFold(t *testing.T) {
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Now: clock.Now}, &buf)
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		l.Log(Exec{Action: "deny", Path: d + "/curl", PID: 7, Reason: "cannot resolve " + d + "/curl: no such file or directory", Missing: true})
	}
	l.Log(Exec{Action: "deny", Path: "/usr/local/bin/wget", PID: 8, Missing: true})
	clock.Advance(1100 * time.Millisecond)
	l.sweep(false)
	mustClose(t, l)
	var execs []map[string]any
	for _, line := range splitLines(buf.Bytes()) {
		if r := decode(t, line); r["event"] == "exec" {
			execs = append(execs, r)
		}
	}
	if len(execs) != 3 {
		t.Fatalf("%d exec records, want 3 (curl's first miss, its aggregate, wget's):\n%s", len(execs), buf.String())
	}
	var agg map[string]any
	for _, r := range execs {
		if r["count"] != nil {
			agg = r
		}
	}
	if agg == nil || agg["count"] != float64(5) || agg["path"] != "curl" || agg["missing"] != true || agg["pid"] != float64(7) {
		t.Errorf("aggregate %v: want curl's 5 further misses, path curl, missing", agg)
	}
}
