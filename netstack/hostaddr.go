package netstack

import (
	"sync"

	"github.com/nsgate/nsgate/policy"
)

// hostWatch keeps the host's own addresses (ReadHostAddrs) for the
// gateway's policy guard (policy.Policy.WithHostAddrs). They are read when
// the gateway starts, and again by the first flow decided after the
// kernel announced an address change: each load asks a netlink socket
// subscribed to address changes, without blocking, whether one came, so
// a change the kernel made before a flow is decided is in that flow's
// set. Without a subscription, every load reads them. A read that fails
// makes the set unknown (policy.UnknownHostAddrs: every address is
// guarded as the host's own) until one succeeds.
type hostWatch struct {
	mu  sync.Mutex
	cur *policy.HostAddrs
	// changed reports whether the kernel announced a change since the
	// last call (or lost track of them); nil: no subscription, read on
	// every load.
	changed func() bool
	read    func() (*policy.HostAddrs, error)
	// stale: a change was announced and reading it failed; the next
	// load reads again.
	stale bool
	stop  func()
}

// load returns the current set, read again first when it may be stale.
// After a failed read it returns an unknown set, and the next load tries
// again.
func (w *hostWatch) load() *policy.HostAddrs {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed == nil || w.changed() {
		w.stale = true
	}
	if !w.stale {
		return w.cur
	}
	h, err := w.read()
	if err != nil {
		// The last set may lack the address the host just gained: until
		// a read succeeds, any address may be the host's own (fail
		// closed), and each load tries again.
		h = policy.UnknownHostAddrs("reading them again after an address change: " + err.Error())
	} else {
		w.stale = false
	}
	if !h.Equal(w.cur) {
		w.cur = h // a new pointer: the gateway makes a new guarded policy
	}
	return w.cur
}

// close releases the subscription, if any.
func (w *hostWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop != nil {
		w.stop()
		w.stop = nil
		w.changed = nil
	}
}
