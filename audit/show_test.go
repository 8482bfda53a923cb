package audit

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// showSample writes a small run: start, an allowed flow and its end, two
// metadata denials folded into one, a denied name, an exec denial, a
// $PATH miss, an l7 refusal and exit.
func showSample(t *testing.T) (string, time.Time) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a.jsonl")
	clock := newFakeClock()
	l := mustOpen(t, path, Options{Now: clock.Now})
	l.Log(Start{Version: "test"})
	seq := l.Log(Flow{Action: "allow", Proto: "tcp", Src: "10.0.2.100:1", Dst: "198.18.0.1:443", Host: "app.test", Rule: "allow[0]"})
	l.Log(FlowEnd{FlowSeq: seq, BytesOut: 100, BytesIn: 2000})
	l.Log(denyFlow(1))
	l.Log(denyFlow(2))
	clock.Advance(2 * time.Second)
	l.sweep(false)
	l.Log(DNS{Action: "deny", QName: "evil.test", QType: "A", Rule: "default"})
	l.Log(Exec{Action: "deny", Path: "/usr/bin/nc", PID: 9, Reason: "/usr/bin/nc is not in the exec allowlist"})
	l.Log(Exec{Action: "deny", Path: "/usr/local/bin/nc", PID: 9, Reason: "no such file", Missing: true})
	l.Log(L7{Action: "deny", FlowSeq: seq, Host: "app.test", SNI: "evil.test", Reason: "sni does not match"})
	l.Log(Exit{Code: 0})
	mustClose(t, l)
	return path, clock.Now()
}

func TestShow(t *testing.T) {
	path, _ := showSample(t)
	show := func(f Filter) []string {
		t.Helper()
		file, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		var b bytes.Buffer
		if err := Show(&b, file, f); err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	}
	all := show(Filter{})
	if len(all) != 10 || !strings.Contains(all[0], "#1  start version=test") || !strings.Contains(all[len(all)-1], "exit code=0") {
		t.Errorf("show of every record: %d lines\n%s", len(all), strings.Join(all, "\n"))
	}
	denies := show(Filter{Action: "deny"})
	for _, l := range denies {
		if !strings.Contains(l, "  deny ") {
			t.Errorf("--action deny shows %q", l)
		}
	}
	if len(denies) != 6 {
		t.Errorf("--action deny: %d lines, want 6 (the first flow, the folded record of the second, dns, two execs, l7):\n%s", len(denies), strings.Join(denies, "\n"))
	}
	if got := show(Filter{Event: "dns"}); len(got) != 1 || !strings.Contains(got[0], "deny dns evil.test A rule=default") {
		t.Errorf("--event dns: %q", got)
	}
	if got := show(Filter{Since: newFakeClock().Now().Add(time.Second)}); len(got) != 6 {
		t.Errorf("--since: %d lines, want the 6 written after the clock moved:\n%s", len(got), strings.Join(got, "\n"))
	}
}

func TestShowBadLine(t *testing.T) {
	var b bytes.Buffer
	err := Show(&b, strings.NewReader("{\"seq\":1}\nnot json\n"), Filter{})
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("Show of a bad log: %v, want an error naming the line", err)
	}
}

func TestStats(t *testing.T) {
	path, _ := showSample(t)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	s, err := ReadStats(file)
	if err != nil {
		t.Fatal(err)
	}
	if s.Runs != 1 || s.BytesOut != 100 || s.BytesIn != 2000 {
		t.Errorf("runs %d, bytes %d/%d", s.Runs, s.BytesOut, s.BytesIn)
	}
	if got := s.ByEvent["flow deny"]; got != 2 {
		t.Errorf("flow deny counts %d events, want 2 (the first, and the folded record of the second)", got)
	}
	if s.Rules["builtin:metadata"] != 2 || s.DeniedNames["evil.test"] != 1 || s.L7Reasons["sni does not match"] != 1 {
		t.Errorf("rules %v names %v l7 %v", s.Rules, s.DeniedNames, s.L7Reasons)
	}
	if len(s.DeniedExecs) != 1 || s.DeniedExecs["/usr/bin/nc"] != 1 {
		t.Errorf("denied programs %v: want /usr/bin/nc only (a $PATH miss is not a refusal)", s.DeniedExecs)
	}
	if tl := s.Dests["tcp app.test:443"]; tl == nil || tl.Allow != 1 {
		t.Errorf("destinations %v: want app.test:443 allowed once (by name, not fake address)", s.Dests)
	}
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10 records standing for 10 events in 1 run(s)", "flow deny  ", "tcp 169.254.169.254:80  0        2", "Flows by destination", "tcp app.test:443", "builtin:metadata", "/usr/bin/nc"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("stats output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFollow(t *testing.T) {
	path, _ := showSample(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, &out, path, Filter{Event: "dns"}, 10*time.Millisecond) }()
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == 1 })

	// Another run appends; its record is shown once its line is whole.
	l := mustOpen(t, path, Options{})
	l.Log(Start{Version: "second"})
	l.Log(DNS{Action: "deny", QName: "late.test", QType: "AAAA", Rule: "default"})
	mustClose(t, l)
	waitFor(t, func() bool { return strings.Contains(out.String(), "late.test") })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Follow: %v", err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("followed %d lines, want the two dns records:\n%s", n, out.String())
	}

	// A log cut short ends it with an error.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { done <- Follow(ctx2, &syncBuffer{}, path, Filter{}, 10*time.Millisecond) }()
	time.Sleep(50 * time.Millisecond)
	if err := os.Truncate(path, 10); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "shrank") {
			t.Errorf("Follow of a truncated file: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not notice the truncation")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// countingBuffer is a syncBuffer that counts its writes.
type countingBuffer struct {
	syncBuffer
	writes atomic.Int64
}

func (c *countingBuffer) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.syncBuffer.Write(p)
}

// TestFollowWritesInBatches: `audit show --follow` of a long log made one
// write per record (a system call each on a terminal or pipe) and moved
// the rest of its 64 KiB buffer down after every line: 17 s of CPU to
// show a log of a million short records, against 3 s now. It writes what
// one read brought in one go.
func TestFollowWritesInBatches(t *testing.T) {
	path := tempLog(t)
	const n = 5000
	line := `{"seq":1,"time":"2026-12-01T00:00:00Z","event":"exit","code":0}` + "\n"
	if err := os.WriteFile(path, []byte(strings.Repeat(line, n)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out countingBuffer
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, &out, path, Filter{}, 10*time.Millisecond) }()
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == n })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w := out.writes.Load(); w > n/50 {
		t.Errorf("%d writes for %d records; want them batched", w, n)
	}
}
