package netstack

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGoroutinePoolKeepsBoundedIdleGoroutines(t *testing.T) {
	p := newGoroutinePool(2)
	// started counts the goroutines started, live those not ended.
	var started atomic.Int64
	var live atomic.Int32
	p.started = func() { started.Add(1); live.Add(1) }
	p.ended = func() { live.Add(-1) }
	// Five functions at once: five goroutines; when they end, only two
	// stay, idle.
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 5 {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); <-release })
	}
	if n := started.Load(); n != 5 {
		t.Fatalf("%d goroutines started for five functions at once, want 5", n)
	}
	close(release)
	wg.Wait()
	waitFor(t, "two kept idle goroutines after five functions ended", func() bool {
		return live.Load() == 2 && p.idle.Load() == 2
	})
	// A new function reuses a kept goroutine instead of starting one
	// (a kept one may need a moment to reach its wait: try a few times).
	reused := false
	for range 100 {
		before := started.Load()
		done := make(chan struct{})
		p.Go(func() { close(done) })
		<-done
		if started.Load() == before {
			reused = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !reused {
		t.Fatal("every function started a goroutine of its own: the kept ones were not reused")
	}
	p.Close()
	waitFor(t, "Close ends the idle goroutines", func() bool { return live.Load() == 0 })
	// Go after Close still runs the function, on a goroutine that ends.
	var ran atomic.Bool
	p.Go(func() { ran.Store(true) })
	waitFor(t, "Go after Close runs the function and its goroutine ends", func() bool {
		return ran.Load() && live.Load() == 0
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
