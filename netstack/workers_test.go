package netstack

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestWorkersKeepBoundedIdleGoroutines(t *testing.T) {
	w := newWorkers(2)
	base := runtime.NumGoroutine()
	// Five functions at once: five goroutines; when they end, only two
	// stay, idle.
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 5 {
		wg.Add(1)
		w.Go(func() { defer wg.Done(); <-release })
	}
	if n := runtime.NumGoroutine() - base; n < 5 {
		t.Fatalf("%d goroutines running five functions, want 5", n)
	}
	close(release)
	wg.Wait()
	waitGoroutines(t, base+2, "two kept idle goroutines after five functions ended")
	// A new function reuses a kept goroutine: no sixth one. (Give the
	// kept ones a moment to reach their wait.)
	time.Sleep(20 * time.Millisecond)
	done := make(chan struct{})
	w.Go(func() { close(done) })
	<-done
	if n := w.started.Load(); n != 5 {
		t.Fatalf("%d goroutines started, want 5: the sixth function should have reused a kept one", n)
	}
	waitGoroutines(t, base+2, "a kept goroutine ran the next function")
	w.Close()
	waitGoroutines(t, base, "Close ends the idle goroutines")
	// Go after Close still runs the function.
	done = make(chan struct{})
	w.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Go after Close did not run the function")
	}
}

func waitGoroutines(t *testing.T, want int, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d goroutines, want %d", why, runtime.NumGoroutine(), want)
		}
		time.Sleep(time.Millisecond)
	}
}
