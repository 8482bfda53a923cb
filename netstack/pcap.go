package netstack

import (
	"fmt"
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

// PcapLimiter is a capture writer with a bound (LimitPcap).
type PcapLimiter struct {
	mu      sync.Mutex
	w       io.Writer
	max     int64
	n       int64
	reached bool
}

// LimitPcap returns a writer for Config.Pcap that passes writes to w until
// the next one would take the capture past max bytes, and refuses that one
// and every later one. The worker decides how many packets cross its link
// (a refused UDP flood is hundreds of MB a second), so without a bound it
// could fill the disk the capture is on. The sniffer writes one packet per
// write, so the capture keeps whole packets; the gateway counts the rest in
// Stats.PcapDropped.
func LimitPcap(w io.Writer, max int64) *PcapLimiter {
	return &PcapLimiter{w: w, max: max}
}

func (p *PcapLimiter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reached || p.n+int64(len(b)) > p.max {
		p.reached = true
		return 0, fmt.Errorf("the capture reached its bound of %d bytes", p.max)
	}
	n, err := p.w.Write(b)
	p.n += int64(n)
	return n, err
}

// Reached reports whether a write was refused for the bound.
func (p *PcapLimiter) Reached() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reached
}
