package netstack

import (
	"sync"
	"sync/atomic"
)

// goroutinePool runs functions on goroutines that are kept, up to a bound,
// once their function returns, so that the next function starts on a
// stack that has already grown. A new goroutine starts with a small stack
// and grows it by copying, doubling at a time; the gateway's per-flow work
// (dialing, gVisor's handshake and send paths) is deep enough that this
// copying was a tenth of nsgate's CPU in a connection-rate profile.
//
// Only idle goroutines are bounded: Go never waits for one. A flow that
// holds its goroutine for long (an idle connection) takes it out of the
// pool; the pool then starts fresh, small goroutines, so many idle flows
// do not each keep a grown stack.
type goroutinePool struct {
	tasks chan func()
	stop  chan struct{}
	once  sync.Once
	idle  atomic.Int32
	max   int32

	// started and ended, if set, are called when a goroutine of the
	// pool starts and when it ends: hooks for tests, set before the
	// pool's first Go and never in production.
	started, ended func()
}

func newGoroutinePool(max int) *goroutinePool {
	return &goroutinePool{tasks: make(chan func()), stop: make(chan struct{}), max: int32(max)}
}

// Close ends the idle goroutines; Go still works after it, on new
// goroutines that end with their function.
func (p *goroutinePool) Close() {
	p.once.Do(func() { close(p.stop) })
}

// Go runs f on an idle kept goroutine if there is one, else on a new one.
func (p *goroutinePool) Go(f func()) {
	select {
	case p.tasks <- f:
	default:
		if p.started != nil {
			p.started()
		}
		go p.run(f)
	}
}

func (p *goroutinePool) run(f func()) {
	if p.ended != nil {
		defer p.ended()
	}
	for {
		f()
		if p.idle.Add(1) > p.max {
			p.idle.Add(-1)
			return
		}
		select {
		case f = <-p.tasks:
			p.idle.Add(-1)
		case <-p.stop:
			p.idle.Add(-1)
			return
		}
	}
}
