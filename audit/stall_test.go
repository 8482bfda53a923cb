package audit

import (
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watchClock is the watch's clock in a test: it moves only when told.
type watchClock struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *watchClock) read() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *watchClock) add(d time.Duration) {
	c.mu.Lock()
	c.now += d
	c.mu.Unlock()
}

// startHooked is startMem with the watch's clock and the writer thread's
// state injected (nil: the real ones).
func startHooked(opts Options, w io.Writer, mono func() time.Duration, runnable func() bool) *Logger {
	l := newLogger(opts)
	l.mono, l.runnable = mono, runnable
	l.setOutput(w, opts.Key, zeroHash, 0)
	go l.run()
	return l
}

// TestWatchStarvedIsNotStuck drives the watch's looks by hand. A write
// whose thread waits for a CPU is starved, not stuck, however long the
// wall clock says it took; looks that come late (the process got no
// CPU) count a tick each, not their wall time; a write that returns is
// fine. A write that sleeps on its sink while the looks come on time
// fails the log at the timeout, not a tick before.
func TestWatchStarvedIsNotStuck(t *testing.T) {
	runtime.LockOSThread() // arm and disarm pair up on this goroutine's thread
	defer runtime.UnlockOSThread()
	clock := &watchClock{}
	var runnable atomic.Bool
	// An hour's timeout: the real timer never fires; the looks are ours.
	l := startHooked(Options{Timeout: time.Hour, Delay: -1}, io.Discard, clock.read, runnable.Load)
	defer l.Close()
	tick := l.period()

	// Starved: the writer's thread wants a CPU; a day of wall time passes.
	l.arm(&l.name, nil)
	runnable.Store(true)
	for range 24 {
		clock.add(time.Hour)
		l.stalled()
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a write whose thread waited for a CPU failed the log: %v", err)
	}
	// Asleep, but every look came an hour late: the process was off the
	// CPU, the timer's goroutine with it. Nine late looks are nine ticks.
	runnable.Store(false)
	for range stallTicks - 1 {
		clock.add(time.Hour)
		l.stalled()
	}
	if err := l.Err(); err != nil {
		t.Fatalf("%d late looks failed the log: %v", stallTicks-1, err)
	}
	l.disarm() // the write returned: it drained, slowly
	clock.add(time.Hour)
	l.stalled() // a look left from that watch
	if err := l.Err(); err != nil {
		t.Fatalf("a write that returned failed the log: %v", err)
	}

	// Never drains: the writer sleeps, the looks come on time.
	l.arm(&l.name, nil)
	for range stallTicks - 1 {
		clock.add(tick)
		l.stalled()
	}
	if err := l.Err(); err != nil {
		t.Fatalf("failed before the timeout: %v", err)
	}
	clock.add(tick)
	l.stalled()
	err := l.Err()
	if err == nil || !strings.Contains(err.Error(), "blocked for 1h0m0s (is anything reading it?)") {
		t.Fatalf("a write asleep on its sink for the timeout: Err() = %v, want it blocked for the timeout", err)
	}
	l.disarm()
}

// slowWriter drains: each Write returns after delay.
type slowWriter struct {
	delay time.Duration
	n     atomic.Int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// TestSlowSinkUnderStarvation, with the real timers: a sink whose writes
// each take four timeouts of wall time while the writer's thread waits
// for a CPU (the injected thread state: what a burst of sandbox starts
// on two cores does to a write to tmpfs) does not fail the log, and every
// record arrives; the same writes with the thread asleep on the sink do.
func TestSlowSinkUnderStarvation(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, starved := range []bool{true, false} {
		w := &slowWriter{delay: 4 * timeout}
		l := startHooked(Options{Timeout: timeout, Delay: -1}, w, nil, func() bool { return starved })
		for i := range 3 {
			l.Log(Forward{Action: "add", Listen: itoa(i), Dst: "d"})
			time.Sleep(timeout / 2)
		}
		_, err := l.Close()
		switch {
		case starved && err != nil:
			t.Errorf("starved, draining sink: the log failed: %v", err)
		case starved && w.n.Load() == 0:
			t.Errorf("starved, draining sink: nothing was written")
		case !starved && (err == nil || !strings.Contains(err.Error(), "is anything reading it?")):
			t.Errorf("a sink asleep for four timeouts a write: Close = %v, want the stuck verdict", err)
		}
	}
}
