package netstack

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/nsgate/nsgate/l7"
)

// workerConn is the worker's side of a TCP flow: gonet's net.Conn over the
// stack's endpoint, plus WaitReadable, so the relay (relay.WaitReadable)
// and the L7 gate take a buffer only when the worker has sent something.
type workerConn struct {
	*gonet.TCPConn
	ep    tcpip.Endpoint
	wq    *waiter.Queue
	spawn func(func()) // runs NotifyReadable's function on a goroutine
	// first, when set (before the relay starts), keeps the first bytes
	// written to the worker: the server's answer to the first request,
	// which the L7 gate needs to know whether a WebSocket upgrade
	// switched protocols.
	first *serverStart
}

// Write writes the server's bytes to the worker, after first (if set)
// has kept those it still wants: so the gate knows them before the worker
// can have read them.
func (c *workerConn) Write(b []byte) (int, error) {
	if f := c.first; f != nil && !f.done.Load() {
		f.keep(b)
	}
	return c.TCPConn.Write(b)
}

// serverStart is the start of what the server sent on a flow: enough
// bytes for a status line's version and code.
type serverStart struct {
	mu   sync.Mutex
	buf  [13]byte
	n    int
	done atomic.Bool // buf is full
}

func (f *serverStart) keep(b []byte) {
	f.mu.Lock()
	f.n += copy(f.buf[f.n:], b)
	if f.n == len(f.buf) {
		f.done.Store(true)
	}
	f.mu.Unlock()
}

// answer reports whether the server's first bytes have come, and whether
// they are a 101 status line (l7.HTTPStream.WatchUpgrade).
func (f *serverStart) answer() (answered, switched bool) {
	if !f.done.Load() {
		return false, false
	}
	return true, l7.SwitchingProtocols(f.buf[:])
}

func newWorkerConn(wq *waiter.Queue, ep tcpip.Endpoint, spawn func(func())) *workerConn {
	return &workerConn{TCPConn: gonet.NewTCPConn(wq, ep), ep: ep, wq: wq, spawn: spawn}
}

// readable are the events after which a Read does not block: data, the
// peer's FIN, a reset or error, or the endpoint closed.
const readable = waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr

// WaitReadable is relay.WaitReadable for the worker's endpoint: it blocks
// until a Read would not block (io.EOF when that Read would find the end
// of the stream), or until deadline (zero: none), when it returns
// os.ErrDeadlineExceeded. It reads nothing. Close wakes it.
func (c *workerConn) WaitReadable(deadline time.Time) error {
	if c.ep.Readiness(readable) != 0 {
		return c.ready()
	}
	e, ch := waiter.NewChannelEntry(readable)
	c.wq.EventRegister(&e)
	defer c.wq.EventUnregister(&e)
	if c.ep.Readiness(readable) != 0 {
		return c.ready()
	}
	if deadline.IsZero() {
		<-ch
		return c.ready()
	}
	d := time.Until(deadline)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return c.ready()
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}

// ready tells, for a readable endpoint, io.EOF when the worker has sent
// its FIN and nothing is left to read; otherwise nil, and the Read that
// follows returns the data or the error.
func (c *workerConn) ready() error {
	if c.ep.Readiness(waiter.EventErr) != 0 {
		return nil // reset or closed: Read reports it
	}
	if n, err := c.ep.GetSockOptInt(tcpip.ReceiveQueueSizeOption); err == nil && n == 0 {
		return io.EOF
	}
	return nil
}

// NotifyReadable implements relay.ReadableNotifier with a callback entry
// on the endpoint's waiter queue: no goroutine waits for an idle worker.
func (c *workerConn) NotifyReadable(f func()) (stop func() bool) {
	const (
		waiting = iota
		fired
		stopped
	)
	var state atomic.Int32
	var e waiter.Entry
	// The queue calls back with its lock held: only claim the call
	// there; unregistering and f run on a goroutine from c.spawn.
	fire := func() {
		if state.CompareAndSwap(waiting, fired) {
			c.spawn(func() {
				c.wq.EventUnregister(&e)
				f()
			})
		}
	}
	e = waiter.NewFunctionEntry(readable, func(waiter.EventMask) { fire() })
	c.wq.EventRegister(&e)
	if c.ep.Readiness(readable) != 0 {
		fire()
	}
	return func() bool {
		if state.CompareAndSwap(waiting, stopped) {
			c.wq.EventUnregister(&e)
			return true
		}
		return false
	}
}
