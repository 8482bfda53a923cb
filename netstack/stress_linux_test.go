package netstack

import (
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// endingServer answers each connection by the first byte it reads:
// 'a' answer and close at once; 'b' answer after the client's FIN;
// 'r' reset; 'q' read until the client goes away, saying nothing.
func endingServer(t *testing.T) string {
	t.Helper()
	return serveTCP(t, func(c *net.TCPConn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		switch b[0] {
		case 'a':
			c.Write([]byte("answer"))
		case 'b':
			io.Copy(io.Discard, c)
			c.Write([]byte("answer"))
		case 'r':
			c.SetLinger(0)
		case 'q':
			io.Copy(io.Discard, c)
		}
	})
}

func TestManyFlowsAllEnd(t *testing.T) {
	// Hundreds of concurrent flows ending every way there is (server
	// first, worker first, reset from either side, a worker that never
	// speaks) must all end: each with its flow_end record, none left
	// active, and the gateway's goroutines back to a handful. This is
	// the relay's callback start, kept goroutines and moving copies
	// under the race detector. (Pending dials are raised above the
	// flows: 300 SYNs at once would otherwise meet the default 256.)
	h := newHarness(t, withLimits(Limits{DialTimeout: 5 * time.Second, TCPIdle: 2 * time.Second, MaxPendingDials: 1024}))
	h.dialer.route("tcp", "203.0.113.10:8080", endingServer(t))
	base := runtime.NumGoroutine()
	const flows = 300
	var wg sync.WaitGroup
	errs := make(chan error, flows)
	for i := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.dialTCP("203.0.113.10:8080")
			if err != nil {
				errs <- err
				return
			}
			c.SetDeadline(time.Now().Add(15 * time.Second))
			switch i % 5 {
			case 0: // server answers and closes first
				c.Write([]byte("a"))
				io.ReadAll(c)
				c.Close()
			case 1: // worker half-closes first, then reads the answer
				c.Write([]byte("b"))
				c.CloseWrite()
				io.ReadAll(c)
				c.Close()
			case 2: // the server resets
				c.Write([]byte("r"))
				io.ReadAll(c)
				c.Close()
			case 3: // the worker closes with the answer unread (a reset) or mid-flow
				c.Write([]byte("aq"[rand.IntN(2):][:1]))
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				c.Close()
			case 4: // the worker never speaks; the relay idles out
				io.ReadAll(c)
				c.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("dial: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.g.Stats().ActiveTCP != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d flows still active long after every worker side ended", h.g.Stats().ActiveTCP)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ends := 0
	h.sink.mu.Lock()
	for _, ev := range h.sink.events {
		if _, ok := ev.(audit.FlowEnd); ok {
			ends++
		}
	}
	h.sink.mu.Unlock()
	if ends != flows {
		t.Fatalf("%d flow_end records for %d flows", ends, flows)
	}
	// What may stay: the kept idle goroutines, and the test server's
	// goroutines still closing.
	for runtime.NumGoroutine() > base+keptGoroutines+8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after every flow ended, %d before (at most %d kept goroutines)", runtime.NumGoroutine(), base, keptGoroutines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
