package netstack

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// heapInUse is the process's heap in use after a collection.
func heapInUse() int {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int(m.HeapInuse)
}

// freshEnv names the test that runs alone in a child test process (see
// inFreshProcess).
const freshEnv = "NSGATE_TEST_FRESH_PROCESS"

// inFreshProcess runs the calling test again, alone, in a new process of
// the test binary and reports true in the parent, which then returns: the
// child's result and output are the test's. In the child it reports false
// and the test runs. A heap measurement is then the test's own: in a shared
// process the heap a test before it freed (and a GC has not yet returned)
// made the growth come out negative.
func inFreshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(freshEnv) == t.Name() {
		return false
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), freshEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("%s in a process of its own:\n%s", t.Name(), out)
	if err != nil {
		t.Fatalf("%s in a process of its own: %v", t.Name(), err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a process of its own did not report a pass", t.Name())
	}
	return true
}

// settledHeap waits until the heap in use stops growing (the same to the
// MiB for a second) and returns it.
func settledHeap() int {
	last, still := -1, 0
	for still < 10 {
		time.Sleep(100 * time.Millisecond)
		s := heapInUse() >> 20
		if s == last {
			still++
		} else {
			last, still = s, 0
		}
	}
	return heapInUse()
}

// stallHarness is a harness for many flows whose reader stalls (dials
// may wait), with workerOpts set on the worker's TCP; its servers stop
// when stop is closed, at the test's end.
func stallHarness(t *testing.T, workerOpts ...tcpip.SettableTransportProtocolOption) (*harness, chan struct{}) {
	t.Helper()
	h := newHarness(t, withLimits(Limits{DialTimeout: 5 * time.Second, MaxPendingDials: 1024}))
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for _, o := range workerOpts {
		if err := h.worker.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
			t.Fatal(err)
		}
	}
	return h, stop
}

func TestNonReadingWorkerBoundsHeldBytes(t *testing.T) {
	if inFreshProcess(t) {
		return
	}
	// A worker opens many flows to an allowed server that streams, and
	// never reads (its window closes). Each flow's data then waits in
	// the gateway's stack: what it holds must stay within the buffer
	// budget (bufferedFlows flows with a large buffer, the others a
	// small one), not grow by a megabyte or more per flow.
	// The worker's own stack keeps small receive buffers, so what the
	// heap gains is the gateway's.
	off := tcpip.TCPModerateReceiveBufferOption(false)
	h, stop := stallHarness(t,
		&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: 16 << 10, Max: 16 << 10}, &off)
	base := settledHeap()
	h.dialer.route("tcp", "203.0.113.10:8080", serveTCP(t, func(c *net.TCPConn) {
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			c.Write(buf)
		}
	}))
	// Enough flows that the stack's own buffers (about 1.25 MiB a flow
	// here) would hold well over the bound.
	const flows = 6 * bufferedFlows
	for range flows {
		c, err := h.dialTCP("203.0.113.10:8080")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	// The budget, and as much again for everything else a flow costs
	// (the worker's small buffers, the relay's, the endpoints').
	bound := 2 * (bufferedFlows*bufferedSendBuf + (flows-bufferedFlows)*smallFlowBuf)
	// Wait until what the stack holds stops growing (every window has
	// closed and every send buffer is as full as it gets).
	grew := settledHeap() - base
	t.Logf("%d non-reading flows: the heap grew by %d MiB (bound %d MiB)", flows, grew>>20, bound>>20)
	if grew > bound {
		t.Fatalf("%d flows whose worker never reads: the heap grew by %d MiB, more than the budget's %d MiB", flows, grew>>20, bound>>20)
	}
}

func TestNonReadingServerBoundsHeldBytes(t *testing.T) {
	if inFreshProcess(t) {
		return
	}
	// The other way: the worker sends on many flows to an allowed server
	// that never reads. Once the host sockets are full the data waits in
	// the gateway's receive buffers, which must stay within the budget
	// (before it, 96 such flows grew the heap by 133 MiB).
	// The worker's own stack keeps small send buffers, so what the heap
	// gains is the gateway's.
	h, stop := stallHarness(t, &tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: 16 << 10, Max: 16 << 10})
	base := settledHeap()
	h.dialer.route("tcp", "203.0.113.10:8080", serveTCP(t, func(c *net.TCPConn) {
		c.SetReadBuffer(4096)
		<-stop
	}))
	const flows = 6 * bufferedFlows
	for range flows {
		c, err := h.dialTCP("203.0.113.10:8080")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			buf := make([]byte, 64<<10)
			for {
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	// The budget, the relay's bulk buffers (16 MiB in all) and a 32 KiB
	// relay buffer per flow, and as much again for everything else.
	bound := 2 * (bufferedFlows*bufferedSendBuf + (flows-bufferedFlows)*(smallFlowBuf+32<<10) + 16<<20)
	grew := settledHeap() - base
	t.Logf("%d flows whose server never reads: the heap grew by %d MiB (bound %d MiB)", flows, grew>>20, bound>>20)
	if grew > bound {
		t.Fatalf("%d flows whose server never reads: the heap grew by %d MiB, more than the budget's %d MiB", flows, grew>>20, bound>>20)
	}
}

func TestStalledInboundBoundsHeldBytes(t *testing.T) {
	if inFreshProcess(t) {
		return
	}
	// Inbound connections (--publish) are the gateway's own endpoints:
	// when the host-side client stops reading what the worker sends, or
	// the worker stops reading what the client sends, the data waits in
	// their buffers. Those start at smallFlowBuf and grow only with a
	// flow's rate, so a stalled one must not hold a MiB or more.
	for _, dir := range []string{"worker sends", "client sends"} {
		t.Run(strings.ReplaceAll(dir, " ", "-"), func(t *testing.T) {
			h := newHarness(t)
			// The worker's own stack keeps small buffers, so what the
			// heap gains is the gateway's.
			for _, o := range []tcpip.SettableTransportProtocolOption{
				&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: 16 << 10, Max: 16 << 10},
				&tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: 16 << 10, Max: 16 << 10},
				func() *tcpip.TCPModerateReceiveBufferOption {
					v := tcpip.TCPModerateReceiveBufferOption(false)
					return &v
				}(),
			} {
				if err := h.worker.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
					t.Fatal(err)
				}
			}
			fa, p := fullAddr(ap(Guest4 + ":8080"))
			ln, err := gonet.ListenTCP(h.worker, fa, p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			stream := func(c net.Conn) {
				buf := make([]byte, 64<<10)
				for {
					c.SetWriteDeadline(time.Now().Add(5 * time.Second))
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					t.Cleanup(func() { c.Close() })
					if dir == "worker sends" {
						go stream(c)
					}
				}
			}()
			// The heap once what an earlier subtest held is gone.
			base := settledHeap()
			const conns = 96
			for range conns {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, err := h.g.DialGuest(ctx, "tcp", netip.MustParseAddr("127.0.0.1"), ap(Guest4+":8080"))
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				if dir == "client sends" {
					go stream(c)
				}
			}
			// Two small buffers and the endpoints' own, well below the
			// MiB or more a connection's buffers held before.
			const bound = conns * 256 << 10
			grew := settledHeap() - base
			t.Logf("%s, nobody reads, %d connections: the heap grew by %d MiB (bound %d MiB)", dir, conns, grew>>20, bound>>20)
			if grew > bound {
				t.Fatalf("%d stalled inbound connections (%s): the heap grew by %d MiB, more than %d MiB", conns, dir, grew>>20, bound>>20)
			}
		})
	}
}
