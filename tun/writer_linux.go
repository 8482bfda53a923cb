package tun

import (
	"github.com/nsgate/nsgate/internal/diag/hoptrace"

	"runtime"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Bounds of the transmit queue. A producer that finds it full waits until
// the writer takes what is queued.
const (
	txQueueLen   = 1024
	txQueueBytes = 4 << 20
)

// txQueue hands outbound packets to a writer goroutine, so that the
// goroutine that produced a packet (often holding a TCP endpoint's lock)
// does not also run the worker's side of the delivery, which the kernel
// does inside the write(2) to the TUN. Without it, gVisor's TCP processor
// spins on the locked endpoint while that write runs (see
// docs/performance.md).
//
// The queue is bounded and applies backpressure rather than dropping: the
// link is lossless, and a drop would cost gVisor's TCP a retransmission
// and half its window (downloads fell from 8.5 to 3 Gbit/s with a
// dropping queue). The writer takes the whole queue at once, so producers
// wait only while it is writing a full batch and the next one is full too;
// at most about twice the bound is held.
//
// When the link is idle (nothing queued, nobody writing) a small batch
// is written by its producer at once (inlineMax): the wake-up of the
// writer goroutine was one of the hand-offs on a small response's way to
// the worker. Busy or bulk traffic still goes through the queue.
type txQueue struct {
	e *Endpoint

	// mu guards q, bytes and closed.
	mu     sync.Mutex
	q      []*stack.PacketBuffer
	bytes  int
	closed bool
	// busy is set while a producer writes inline or the writer writes a
	// batch: at most one of them writes at a time, in queue order.
	busy bool
	// room is signalled (with mu) when the writer has taken the queue or
	// the queue is closed.
	room sync.Cond

	wake chan struct{} // capacity 1: "the queue is not empty"
	done chan struct{} // closed when the writer goroutine returns
}

func newTxQueue(e *Endpoint) *txQueue {
	q := &txQueue{
		e:    e,
		q:    make([]*stack.PacketBuffer, 0, 64),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	q.room.L = &q.mu
	go q.run()
	return q
}

// enqueue queues the packets (taking a reference to each), waiting for
// room when the queue is full. It never waits on the device. It reports
// false when the queue is closed; packets not queued by then are dropped.
func (q *txQueue) enqueue(pkts []*stack.PacketBuffer) bool {
	q.mu.Lock()
	if !q.closed && !q.busy && len(q.q) == 0 && smallBatch(pkts) {
		q.busy = true
		q.mu.Unlock()
		for _, pkt := range pkts {
			q.e.writeCounted(pkt)
		}
		q.mu.Lock()
		q.busy = false
		more := len(q.q) > 0
		q.room.Broadcast()
		q.mu.Unlock()
		if more {
			q.kick()
		}
		return true
	}
	for i, pkt := range pkts {
		size := pkt.Size()
		for !q.closed && len(q.q) > 0 && (len(q.q) >= txQueueLen || q.bytes+size > txQueueBytes) {
			q.kick()
			q.room.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			q.e.stats.txDropped.Add(uint64(len(pkts) - i))
			return false
		}
		q.q = append(q.q, pkt.IncRef())
		q.bytes += size
	}
	q.mu.Unlock()
	q.kick()
	return true
}

// inlineMax bounds a batch a producer writes itself on an idle link: a
// few small packets (ACKs, a small response), never bulk.
const (
	inlineMaxPackets = 2
	inlineMaxBytes   = 4096
)

func smallBatch(pkts []*stack.PacketBuffer) bool {
	if len(pkts) > inlineMaxPackets {
		return false
	}
	n := 0
	for _, pkt := range pkts {
		if pkt.Data().Size() == 0 {
			// A bare ACK (or SYN, FIN) is not what anyone waits
			// for: written inline it would delay the wake-up of
			// the reader of the data it acknowledges.
			return false
		}
		n += pkt.Size()
	}
	return n <= inlineMaxBytes
}

// bareOnly reports whether everything queued is a bare TCP ACK: no data,
// and no SYN, FIN or RST (a SYN-ACK is what the worker's connect waits
// for: it is not held back).
func (q *txQueue) bareOnly() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, pkt := range q.q {
		if !bareACK(pkt) {
			return false
		}
	}
	return len(q.q) > 0
}

// bareACK reports whether pkt is a TCP segment with no data and only the
// ACK flag (PSH aside).
func bareACK(pkt *stack.PacketBuffer) bool {
	if pkt.TransportProtocolNumber != header.TCPProtocolNumber || pkt.Data().Size() != 0 {
		return false
	}
	th := pkt.TransportHeader().Slice()
	if len(th) < header.TCPMinimumSize {
		return false
	}
	return header.TCP(th).Flags()&^header.TCPFlagPsh == header.TCPFlagAck
}

// kick wakes the writer if it sleeps.
func (q *txQueue) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run is the writer goroutine: it takes everything queued and writes it,
// one writev per packet, until the queue is closed.
func (q *txQueue) run() {
	defer close(q.done)
	var batch []*stack.PacketBuffer
	for range q.wake {
		if q.bareOnly() {
			// Only bare ACKs are queued: they were
			// queued by a TCP processor that, in the same run, woke
			// the reader of the data they acknowledge, and the
			// scheduler runs the goroutine woken last (this one)
			// first. Let that reader run first: its request goes
			// upstream before the worker's kernel takes the ACK,
			// which the writev below runs (docs/performance.md,
			// session 12).
			runtime.Gosched()
		}
		q.mu.Lock()
		for q.busy {
			// A producer writes inline; it kicks again if it
			// finds packets queued when done.
			q.room.Wait()
		}
		batch, q.q = q.q, batch[:0]
		q.bytes = 0
		closed := q.closed
		q.busy = !closed
		q.room.Broadcast()
		q.mu.Unlock()
		for i, pkt := range batch {
			if !closed {
				q.e.writeCounted(pkt)
			} else {
				q.e.stats.txDropped.Add(1)
			}
			pkt.DecRef()
			batch[i] = nil
		}
		if closed {
			return
		}
		q.mu.Lock()
		q.busy = false
		more := len(q.q) > 0
		q.room.Broadcast()
		q.mu.Unlock()
		if more {
			q.kick()
		}
	}
}

// close stops the writer after it has dropped what is queued, and waits
// for it: afterwards nothing writes to the descriptor.
func (q *txQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.done
		return
	}
	q.closed = true
	q.room.Broadcast()
	q.mu.Unlock()
	q.kick()
	<-q.done
}

// writeCounted writes one packet and counts the outcome; it reports
// whether the error (if any) was more than a full device.
func (e *Endpoint) writeCounted(pkt *stack.PacketBuffer) unix.Errno {
	size, super, errno := e.writePacket(pkt)
	switch errno {
	case 0:
		hoptrace.Mark(hoptrace.TunWritten)
		e.stats.txPackets.Add(1)
		e.stats.txBytes.Add(uint64(size))
		if super {
			e.stats.txSuper.Add(1)
		}
	case unix.EAGAIN, unix.ENOBUFS:
		e.stats.txDropped.Add(1)
		return 0
	default:
		e.stats.txErrors.Add(1)
	}
	return errno
}
