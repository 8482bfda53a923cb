package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// allEvents has one event of every type, in the order a run might log them.
var allEvents = []Event{
	Start{Version: "0.1.0", PolicySHA256: strings.Repeat("ab", 32), Argv: []string{"nsgate", "run", "--", "curl"}, PID: 42, Degraded: []string{"landlock"}},
	DNS{QName: "app.test", QType: "A", Action: "allow", Answer: []string{"198.18.0.1"}, Rule: "allow[0]"},
	Flow{Action: "allow", Proto: "tcp", Src: "10.0.2.100:41234", Dst: "198.18.0.1:443", Host: "app.test", Upstream: "127.0.0.1:443", Rule: "allow[0]", Reason: "host app.test port 443"},
	L7{Action: "allow", FlowSeq: 3, Host: "app.test", SNI: "app.test"},
	FlowEnd{FlowSeq: 3, BytesOut: 517, BytesIn: 4096, DurationMS: 12},
	denyFlow(41235),
	Packet{Action: "deny", Proto: "icmp", Src: "10.0.2.100", Dst: "203.0.113.9", Reason: "icmp echo to a non-gateway address"},
	Exec{Action: "deny", Path: "/bin/sh", PID: 7, Reason: "not in the exec allowlist"},
	Inbound{Action: "allow", Listen: "127.0.0.1:8080", Dst: "10.0.2.100:80", Src: "127.0.0.1:50000"},
	Policy{Action: "refuse", Error: "policy.yaml:3:5: unknown key"},
	Exit{Code: 0},
}

func TestRoundTrip(t *testing.T) {
	for _, key := range [][]byte{nil, []byte("0123456789abcdef-key")} {
		t.Run(fmt.Sprintf("key=%v", key != nil), func(t *testing.T) {
			path := tempLog(t)
			clock := newFakeClock()
			l := mustOpen(t, path, Options{Key: key, Now: clock.Now})
			for i, ev := range allEvents {
				if got := l.Log(ev); got != uint64(i+1) {
					t.Fatalf("Log(%s) = %d, want %d", ev.EventName(), got, i+1)
				}
				clock.Advance(time.Millisecond)
			}
			head := mustClose(t, l)

			lines := readLines(t, path)
			if len(lines) != len(allEvents) {
				t.Fatalf("%d lines, want %d", len(lines), len(allEvents))
			}
			if want := hashHex(lines[len(lines)-1]); head != want {
				t.Errorf("Close head %s, want sha256 of last line %s", head, want)
			}
			n, vhead, err := Verify(bytes.NewReader(joinLines(lines)), key)
			if err != nil || n != len(allEvents) || vhead != head {
				t.Errorf("Verify = %d, %s, %v; want %d, %s, nil", n, vhead, err, len(allEvents), head)
			}
			prev := zeroHash
			for i, line := range lines {
				ev := allEvents[i]
				names := memberNames(t, line)
				if !reflect.DeepEqual(names[:3], []string{"seq", "time", "event"}) {
					t.Errorf("line %d starts with %v, want seq, time, event", i+1, names[:3])
				}
				tail := []string{"prev"}
				if key != nil {
					tail = []string{"prev", "mac"}
				}
				if got := names[len(names)-len(tail):]; !reflect.DeepEqual(got, tail) {
					t.Errorf("line %d ends with %v, want %v", i+1, got, tail)
				}
				// The middle members are the event's own, in its order.
				evJSON, _ := json.Marshal(ev)
				if want := memberNames(t, evJSON); !reflect.DeepEqual(names[3:len(names)-len(tail)], want) {
					t.Errorf("line %d event members %v, want %v", i+1, names[3:len(names)-len(tail)], want)
				}
				m := decode(t, line)
				wantTime := clock.t.Add(-time.Duration(len(allEvents)-i) * time.Millisecond).Format(time.RFC3339Nano)
				if m["seq"] != float64(i+1) || m["event"] != ev.EventName() || m["prev"] != prev || m["time"] != wantTime {
					t.Errorf("line %d = %s; want seq %d event %s time %s prev %s", i+1, line, i+1, ev.EventName(), wantTime, prev)
				}
				var evm map[string]any
				json.Unmarshal(evJSON, &evm)
				for k, v := range evm {
					if !reflect.DeepEqual(m[k], v) {
						t.Errorf("line %d member %s = %v, want %v", i+1, k, m[k], v)
					}
				}
				prev = hashHex(line)
			}
		})
	}
}

func TestTimeIsUTCWithNanoseconds(t *testing.T) {
	zone := time.FixedZone("X", 5*3600)
	at := time.Date(2031, 5, 6, 12, 0, 0, 5, zone)
	var buf bytes.Buffer
	l := startMem(Options{Now: func() time.Time { return at }}, &buf)
	l.Log(Exit{Code: 3})
	mustClose(t, l)
	m := decode(t, bytes.TrimSpace(buf.Bytes()))
	if want := "2031-05-06T07:00:00.000000005Z"; m["time"] != want {
		t.Errorf("time = %v, want %s", m["time"], want)
	}
}

func TestReopenAppendContinuesChain(t *testing.T) {
	path := tempLog(t)
	key := []byte("append-key-0123456789")
	l := mustOpen(t, path, Options{Key: key})
	for _, ev := range allEvents[:3] {
		l.Log(ev)
	}
	head1 := mustClose(t, l)

	l = mustOpen(t, path, Options{Key: key})
	if got := l.Head(); got != head1 {
		t.Errorf("Head after reopen = %s, want %s", got, head1)
	}
	if got := l.Log(allEvents[3]); got != 4 {
		t.Errorf("first seq after reopen = %d, want 4", got)
	}
	l.Log(allEvents[4])
	head2 := mustClose(t, l)

	lines := readLines(t, path)
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5", len(lines))
	}
	if m := decode(t, lines[3]); m["seq"] != float64(4) || m["prev"] != head1 {
		t.Errorf("line 4 = %s; want seq 4 and prev %s", lines[3], head1)
	}
	n, head, err := VerifyFile(path, key)
	if err != nil || n != 5 || head != head2 {
		t.Errorf("VerifyFile = %d, %s, %v; want 5, %s, nil", n, head, err, head2)
	}
}

func TestReopenRefusesBrokenLog(t *testing.T) {
	key := []byte("refuse-key-0123456789")
	cases := []struct {
		name   string
		why    string
		key    []byte
		mangle func([][]byte) []byte
		line   int
		msg    string
	}{
		{"deleted line", "a gap in seq is tampering", nil,
			func(ls [][]byte) []byte { return joinLines(append(ls[:1:1], ls[2:]...)) }, 2, "seq 3, want 2"},
		{"changed byte", "a changed record fails its own mac", nil,
			func(ls [][]byte) []byte {
				ls[1] = bytes.Replace(ls[1], []byte("app.test"), []byte("app.tesu"), 1)
				return joinLines(ls)
			}, 2, "mac mismatch"},
		{"truncated", "a crash mid-write leaves half a line", nil,
			func(ls [][]byte) []byte { b := joinLines(ls); return b[:len(b)-10] }, 3, "torn last record"},
		{"wrong key", "appending with another key would mix two chains of trust", []byte("another-key-0123456789"),
			func(ls [][]byte) []byte { return joinLines(ls) }, 1, "mac mismatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tempLog(t)
			l := mustOpen(t, path, Options{Key: key})
			for _, ev := range allEvents[:3] {
				l.Log(ev)
			}
			mustClose(t, l)
			if err := os.WriteFile(path, tc.mangle(readLines(t, path)), 0o600); err != nil {
				t.Fatal(err)
			}
			openKey := key
			if tc.key != nil {
				openKey = tc.key
			}
			before, _ := os.ReadFile(path)
			l, err := Open(path, Options{Key: openKey})
			if err == nil {
				l.Close()
				t.Fatalf("Open accepted a broken log (%s)", tc.why)
			}
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.File != path || ve.Line != tc.line || !strings.Contains(ve.Msg, tc.msg) {
				t.Errorf("Open error %v; want *VerifyError at %s:%d containing %q", err, path, tc.line, tc.msg)
			}
			if want := fmt.Sprintf("%s:%d: ", path, tc.line); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Errorf("refused Open changed the file")
			}
		})
	}
}

func TestOpenRefusesSecondWriter(t *testing.T) {
	path := tempLog(t)
	l := mustOpen(t, path, Options{})
	defer l.Close()
	l2, err := Open(path, Options{})
	if err == nil {
		l2.Close()
		t.Fatal("two Loggers opened the same file; their chains would interleave")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("error %q does not say the file is in use", err)
	}
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	path := tempLog(t)
	l := mustOpen(t, path, Options{})
	mustClose(t, l)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("mode %v; the log must not be readable by others", perm)
	}
}

func TestHMACKeys(t *testing.T) {
	right := []byte("the-right-key-0123456789")
	wrong := []byte("the-wrong-key-0123456789")
	cases := []struct {
		name      string
		why       string
		writeKey  []byte
		verifyKey []byte
		wantLine  int // 0 = ok
		wantMsg   string
	}{
		{"right key", "the key that wrote the log verifies it", right, right, 0, ""},
		{"wrong key", "a log written with another key fails on its first line", right, wrong, 1, "mac mismatch"},
		{"no key to verify", "the chain alone can be checked without the key", right, nil, 0, ""},
		{"missing mac", "with a key every record must carry a mac", nil, right, 1, "mac is missing"},
		{"no key at all", "a log without macs verifies without a key", nil, nil, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := startMem(Options{Key: tc.writeKey}, &buf)
			for _, ev := range allEvents {
				l.Log(ev)
			}
			head := mustClose(t, l)
			hasMac := bytes.Contains(buf.Bytes(), []byte(`"mac":"`))
			if hasMac != (tc.writeKey != nil) {
				t.Errorf("mac present = %v with key %v", hasMac, tc.writeKey != nil)
			}
			n, vhead, err := Verify(bytes.NewReader(buf.Bytes()), tc.verifyKey)
			if tc.wantLine == 0 {
				if err != nil || n != len(allEvents) || vhead != head {
					t.Errorf("Verify = %d, %s, %v; want ok (%s)", n, vhead, err, tc.why)
				}
				return
			}
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Line != tc.wantLine || ve.Msg != tc.wantMsg {
				t.Errorf("Verify error %v; want line %d %q (%s)", err, tc.wantLine, tc.wantMsg, tc.why)
			}
		})
	}
}

func TestConcurrentLogKeepsSeqContiguous(t *testing.T) {
	const goroutines, each = 50, 200
	path := tempLog(t)
	// A small queue makes callers wait for room and the writer swap often.
	// A clock that stands still: no window ends before Close, so every
	// aggregate comes after the returned seqs.
	l := mustOpen(t, path, Options{QueueLen: 16, Now: newFakeClock().Now})
	var (
		mu   sync.Mutex
		seqs = map[uint64]int{}
		wg   sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Forward records are never aggregated: each gets its seq.
				var ev Event = Forward{Action: "add", ID: g + 1, Listen: "127.0.0.1:8080/tcp", Dst: "10.0.2.100:80"}
				if i%10 == 0 {
					// Distinct denials: each is the first of its key.
					ev = Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: fmt.Sprintf("203.0.113.%d:%d", g, i), Rule: "default"}
				}
				s := l.Log(ev)
				mu.Lock()
				seqs[s]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	mustClose(t, l)
	total := goroutines * each
	// Denials that met a full queue were folded (seq 0); every other event
	// got its own seq, and together they are 1..N without a gap.
	folded := seqs[0]
	delete(seqs, 0)
	for s := uint64(1); s <= uint64(len(seqs)); s++ {
		if seqs[s] != 1 {
			t.Fatalf("seq %d returned %d times", s, seqs[s])
		}
	}
	if folded > total/10 {
		t.Errorf("%d events folded; only the %d denials may be", folded, total/10)
	}
	lines := readLines(t, path)
	if n, _, err := VerifyFile(path, nil); err != nil || n != len(lines) {
		t.Errorf("VerifyFile = %d, %v", n, err)
	}
	// The records account for every event: the seqs returned, then one
	// aggregate per folded key.
	var accounted int
	for i, line := range lines {
		m := decode(t, line)
		if c, ok := m["count"].(float64); ok {
			accounted += int(c)
		} else {
			accounted++
			if i >= len(seqs) {
				t.Errorf("record %d past the returned seqs is not an aggregate: %s", i+1, line)
			}
		}
	}
	if accounted != total {
		t.Errorf("records account for %d events, want %d", accounted, total)
	}
}

func TestCloseFlushesEverything(t *testing.T) {
	path := tempLog(t)
	clock := newFakeClock()
	l := mustOpen(t, path, Options{Now: clock.Now})
	const n = 1000
	for i := range n {
		l.Log(FlowEnd{FlowSeq: uint64(i)})
	}
	// Two pending aggregates: one seen, three folded each.
	for range 4 {
		l.Log(denyFlow(1))
		l.Log(DNS{Action: "deny", QName: "evil.test", QType: "A", Rule: "default"})
	}
	head := mustClose(t, l)
	lines := readLines(t, path)
	if want := n + 2 + 2; len(lines) != want {
		t.Fatalf("%d lines after Close, want %d", len(lines), want)
	}
	for _, line := range lines[n+2:] {
		if m := decode(t, line); m["count"] != float64(3) {
			t.Errorf("aggregate %s, want count 3", line)
		}
	}
	if head != hashHex(lines[len(lines)-1]) {
		t.Errorf("head does not match the last line")
	}
	head2, err := l.Close()
	if head2 != head || err != nil {
		t.Errorf("second Close = %s, %v; want %s, nil", head2, err, head)
	}
	if s := l.Log(Exit{}); s != 0 {
		t.Errorf("Log after Close = %d, want 0", s)
	}
}

func TestNoJSONLogStillNumbers(t *testing.T) {
	var human bytes.Buffer
	l := mustOpen(t, "", Options{Human: &human})
	if s := l.Log(Start{}); s != 1 {
		t.Errorf("seq %d, want 1", s)
	}
	if s := l.Log(denyFlow(1)); s != 2 {
		t.Errorf("seq %d, want 2", s)
	}
	head := mustClose(t, l)
	if head != "" {
		t.Errorf("head %q without a JSON log, want empty", head)
	}
	if want := FormatHuman(denyFlow(1)) + "\n"; human.String() != want {
		t.Errorf("human = %q, want %q", human.String(), want)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteErrorIsReported(t *testing.T) {
	l := startMem(Options{}, failWriter{})
	l.Log(Start{})
	_, err := l.Close()
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close error %v, want the write error", err)
	}
	if l.Err() == nil {
		t.Errorf("Err() = nil after a write error")
	}
}

func TestPointerEventsAreCopied(t *testing.T) {
	var buf bytes.Buffer
	l := startMem(Options{}, &buf)
	ev := &Exec{Action: "deny", Path: "/bin/sh", PID: 1}
	l.Log(ev)
	ev.Path = "/changed"
	if s := l.Log((*Exec)(nil)); s != 0 {
		t.Errorf("Log(nil pointer) = %d, want 0", s)
	}
	if s := l.Log(nil); s != 0 {
		t.Errorf("Log(nil) = %d, want 0", s)
	}
	mustClose(t, l)
	if !strings.Contains(buf.String(), `"path":"/bin/sh"`) || strings.Contains(buf.String(), "/changed") {
		t.Errorf("log %s; want the event as it was when logged", buf.String())
	}
}

// TestLogAllocs measures the caller side of Log with the writer stopped.
func TestLogAllocs(t *testing.T) {
	l := newLogger(Options{QueueLen: 1 << 20})
	l.pending = make([]item, 0, 1<<20)
	var allow Event = allEvents[2]
	if a := testing.AllocsPerRun(1000, func() { l.Log(allow) }); a != 0 {
		t.Errorf("Log(allow flow) allocates %v times per call, want 0", a)
	}
	var deny Event = denyFlow(1)
	l.Log(deny)
	if a := testing.AllocsPerRun(1000, func() { l.Log(deny) }); a != 0 {
		t.Errorf("Log(repeated denial) allocates %v times per call, want 0", a)
	}
}

func TestRecordsAreWrittenAfterTheDelay(t *testing.T) {
	// Records are written in batches a few milliseconds old, not only at
	// Close or at the aggregation sweep: with a 10 s window (a 5 s
	// sweep), a record must still reach the file within the delay.
	cases := []struct {
		name  string
		why   string
		delay time.Duration
	}{
		{"default", "the default delay batches for milliseconds, not seconds", 0},
		{"none", "a negative delay writes each record at once", -1},
		{"long", "a set delay is honoured", 30 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tempLog(t)
			l := mustOpen(t, path, Options{Window: 10 * time.Second, Delay: tc.delay})
			defer l.Close()
			start := time.Now()
			l.Log(FlowEnd{FlowSeq: 1})
			for len(readLines(t, path)) == 0 {
				if time.Since(start) > time.Second {
					t.Fatalf("%s: the record was not written within 1 s", tc.why)
				}
				time.Sleep(time.Millisecond)
			}
			if took := time.Since(start); tc.delay > 0 && took < tc.delay {
				t.Fatalf("%s: written after %v, before the %v delay", tc.why, took, tc.delay)
			}
		})
	}
}
