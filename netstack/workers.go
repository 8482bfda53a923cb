package netstack

import (
	"sync"
	"sync/atomic"
)

// workers runs functions on goroutines that are kept, up to a bound, once
// their function returns, so that the next function starts on a stack
// that has already grown. A new goroutine starts with a small stack and
// grows it by copying, doubling at a time; the gateway's per-flow work
// (dialing, gVisor's handshake and send paths) is deep enough that this
// copying was a tenth of nsgate's CPU in a connection-rate profile.
//
// Only idle goroutines are bounded: Go never waits for one. A flow that
// holds its goroutine for long (an idle connection) takes it out of the
// pool; the pool then starts fresh, small goroutines, so many idle flows
// do not each keep a grown stack.
type workers struct {
	tasks chan func()
	stop  chan struct{}
	once  sync.Once
	idle  atomic.Int32
	max   int32
	// started counts the goroutines started, live those not ended (for
	// tests).
	started atomic.Int64
	live    atomic.Int32
}

func newWorkers(max int) *workers {
	return &workers{tasks: make(chan func()), stop: make(chan struct{}), max: int32(max)}
}

// Close ends the idle goroutines; Go still works after it, on new
// goroutines that end with their function.
func (w *workers) Close() {
	w.once.Do(func() { close(w.stop) })
}

// Go runs f on an idle kept goroutine if there is one, else on a new one.
func (w *workers) Go(f func()) {
	select {
	case w.tasks <- f:
	default:
		w.started.Add(1)
		w.live.Add(1)
		go w.run(f)
	}
}

func (w *workers) run(f func()) {
	defer w.live.Add(-1)
	for {
		f()
		if w.idle.Add(1) > w.max {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.tasks:
			w.idle.Add(-1)
		case <-w.stop:
			w.idle.Add(-1)
			return
		}
	}
}
