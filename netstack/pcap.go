package netstack

import (
	"io"
	"sync"
	"sync/atomic"
)

// pcapSnapLen is the most of each packet the capture keeps: all of it, for
// any MTU nsgate supports.
const pcapSnapLen = 256 << 10

// pcapWriter serializes the sniffer's writes (it writes from the receive
// and send paths at once, without locking) and stops at the first error:
// gVisor's sniffer panics when a write fails, and a full disk must not take
// the gateway down. It counts the packets it could not write.
type pcapWriter struct {
	mu     sync.Mutex
	w      io.Writer
	err    error // first write error; guarded by mu
	failed atomic.Uint64
}

func (p *pcapWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		p.failed.Add(1)
		return len(b), nil
	}
	if _, err := p.w.Write(b); err != nil {
		p.err = err
		p.failed.Add(1)
	}
	return len(b), nil
}

// Err returns the first write error, if any.
func (p *pcapWriter) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
