package netstack

import (
	"io"
	"sync"
	"sync/atomic"
)

// pcapSnapLen is the most of each packet the capture keeps: all of it, for
// any MTU nsgate supports.
const pcapSnapLen = 256 << 10

// pcapBuffer is how much of the capture pcapWriter holds before it writes.
const pcapBuffer = 1 << 20

// pcapWriter serializes the sniffer's writes (it writes from the receive
// and send paths at once, without locking), buffers them and stops at the
// first error: gVisor's sniffer panics when a write fails, and a full disk
// must not take the gateway down. It counts the writes it could not make,
// the ones lost in a buffer that failed to go out included, so that the
// exit record's pcap_dropped says what the file lacks. Flush writes the
// rest (Gateway.Close calls it, before anyone reads Stats).
//
// With max > 0 the capture stops at max bytes: the worker decides how many
// packets cross its link (a refused UDP flood is hundreds of MB a second),
// so without a bound it could fill the disk the capture is on. The sniffer
// writes one packet per write, so the capture keeps whole packets, and the
// ones past the bound are counted as lost.
type pcapWriter struct {
	mu      sync.Mutex
	w       io.Writer
	max     int64  // bound in bytes (0: none)
	size    int64  // bytes taken so far; guarded by mu
	reached bool   // a write was refused for the bound; guarded by mu
	buf     []byte // guarded by mu
	n       uint64 // writes in buf; guarded by mu
	err     error  // first write error; guarded by mu
	failed  atomic.Uint64
}

func (p *pcapWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && p.max > 0 && p.size+int64(len(b)) > p.max {
		p.reached = true // this packet and every later one
	}
	if p.err != nil || p.reached {
		p.failed.Add(1)
		return len(b), nil
	}
	p.size += int64(len(b))
	p.buf = append(p.buf, b...)
	p.n++
	if len(p.buf) >= pcapBuffer {
		p.flushLocked()
	}
	return len(b), nil
}

func (p *pcapWriter) flushLocked() {
	if len(p.buf) == 0 || p.err != nil {
		return
	}
	if _, err := p.w.Write(p.buf); err != nil {
		p.err = err
		p.failed.Add(p.n)
	}
	p.buf, p.n = p.buf[:0], 0
}

// Flush writes what is buffered and returns the first write error, if any.
func (p *pcapWriter) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	return p.err
}

// Reached reports whether the capture stopped at its bound.
func (p *pcapWriter) Reached() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reached
}

// Err returns the first write error, if any.
func (p *pcapWriter) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
