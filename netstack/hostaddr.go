package netstack

import (
	"sync"
	"sync/atomic"

	"github.com/nsgate/nsgate/policy"
)

// hostWatch keeps the host's own addresses (ReadHostAddrs) for the
// gateway's policy guard (policy.Policy.WithHostAddrs). They are read when
// the gateway starts and again after the kernel announces an address
// change (a netlink subscription sets stale; the next flow re-reads before
// it is decided). When the subscription fails or ends unasked (its socket
// overflowed, say), every flow re-reads them: slower, never stale.
type hostWatch struct {
	cur   atomic.Pointer[policy.HostAddrs]
	stale atomic.Bool // an address changed since cur was read
	poll  atomic.Bool // no subscription: read on every load
	mu    sync.Mutex  // serializes re-reads
	read  func() (*policy.HostAddrs, error)
	stop  func()
}

// load returns the current set, re-reading it first when it may be stale.
// A failed re-read keeps the last set and stays stale, so the next flow
// tries again.
func (w *hostWatch) load() *policy.HostAddrs {
	if !w.stale.Load() && !w.poll.Load() {
		return w.cur.Load()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stale.Swap(false) && !w.poll.Load() {
		return w.cur.Load()
	}
	h, err := w.read()
	if err != nil {
		w.stale.Store(true)
		return w.cur.Load()
	}
	if !h.Equal(w.cur.Load()) {
		w.cur.Store(h)
	}
	return w.cur.Load()
}

// close stops the subscription, if any.
func (w *hostWatch) close() {
	if w.stop != nil {
		w.stop()
	}
}
