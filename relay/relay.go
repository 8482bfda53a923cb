// Package relay copies bytes between the two sides of a flow, in both
// directions: the worker's side (the connection from the sandboxed
// program, e.g. the gateway's endpoint in gVisor) and the upstream side
// (the connection nsgate dialed for it). Every function takes them in that
// order, and Result and Side name them so.
//
// Copy is for streams (TCP): it propagates half-close with CloseWrite, ends
// the relay after a period with no traffic in either direction, counts the
// bytes of each direction and records which side failed first. Packets is
// the same for datagram connections (connected UDP): one Read is one
// datagram, there is no half-close, and transient ICMP-induced errors are
// not fatal.
//
// Both use pooled buffers, so a relay allocates nothing per read, and a
// direction takes its buffer only once its source is readable: an idle
// relay holds no buffer and two parked goroutines, or one when the
// worker's side is a ReadableNotifier (see WaitReadable).
//
// CopyWith is Copy with options, among them a gate on the worker →
// upstream direction: the gate reads and judges the worker's first bytes
// before any of them reaches upstream, while upstream → worker already
// flows (server-first protocols work). A gate may hand the rest of the
// direction to a Filter, which sees every later byte before it goes
// upstream and may hold back an incomplete piece; without one the
// direction is the plain copy loop.
package relay

import (
	"github.com/nsgate/nsgate/internal/diag/hoptrace"

	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrIdle is the Result.Err of a relay that ended because no byte moved in
// either direction for the idle duration.
var ErrIdle = errors.New("idle timeout")

// StreamBufferSize is the size of each direction's buffer in Copy.
const StreamBufferSize = 32 << 10

// PacketBufferSize is the size of each direction's buffer in Packets: large
// enough for any UDP datagram, so none is truncated.
const PacketBufferSize = 64 << 10

// BulkBufferSize is the buffer a stream direction moves up to once a read
// has filled its StreamBufferSize buffer (a bulk transfer): a download
// then takes a tenth of the reads and of the writes into the worker's
// stack. At most MaxBulkBuffers are in use at once, so however many
// flows a worker keeps busy, bulk buffers hold at most 16 MiB; a flow
// that finds none free keeps its small buffer.
const BulkBufferSize = 256 << 10

// MaxBulkBuffers bounds the bulk buffers in use at once, process-wide.
const MaxBulkBuffers = 64

// Buffer pools. Pools hold *[]byte so that Put does not allocate.
var (
	streamBufs = sync.Pool{New: func() any { b := make([]byte, StreamBufferSize); return &b }}
	packetBufs = sync.Pool{New: func() any { b := make([]byte, PacketBufferSize); return &b }}
	bulkBufs   = sync.Pool{New: func() any { b := make([]byte, BulkBufferSize); return &b }}
	bulkInUse  atomic.Int32
)

// takeBulk returns a bulk buffer if fewer than MaxBulkBuffers are in use;
// give it back with putBulk.
func takeBulk() *[]byte {
	if bulkInUse.Add(1) > MaxBulkBuffers {
		bulkInUse.Add(-1)
		return nil
	}
	return bulkBufs.Get().(*[]byte)
}

func putBulk(bp *[]byte) {
	bulkBufs.Put(bp)
	bulkInUse.Add(-1)
}

// GetPacketBuffer returns a pooled buffer of PacketBufferSize bytes. Give it
// back with PutPacketBuffer once nothing refers to it.
func GetPacketBuffer() *[]byte { return packetBufs.Get().(*[]byte) }

// PutPacketBuffer returns a buffer from GetPacketBuffer to the pool.
func PutPacketBuffer(b *[]byte) {
	if b != nil && len(*b) == PacketBufferSize {
		packetBufs.Put(b)
	}
}

// Side names one of the two sides of a relay.
type Side uint8

const (
	// SideNone: no connection failed (clean end, idle, or cancelled).
	SideNone Side = iota
	// SideWorker is the worker's side (the first connection argument).
	SideWorker
	// SideUpstream is the upstream side (the second connection argument).
	SideUpstream
)

// String returns "worker", "upstream" or "none".
func (s Side) String() string {
	switch s {
	case SideWorker:
		return "worker"
	case SideUpstream:
		return "upstream"
	}
	return "none"
}

// Result is what a relay observed.
type Result struct {
	// ToUpstream counts bytes read from the worker's side and written
	// upstream; ToWorker bytes read from upstream and written to the
	// worker's side.
	ToUpstream, ToWorker int64
	// Err is the first error that ended the relay: nil when both
	// directions reached EOF (streams), ErrIdle after the idle timeout,
	// the context's error when ctx was cancelled, otherwise the failing
	// Read or Write error of the side named in Failed.
	Err error
	// Failed is the side whose Read or Write returned Err first.
	Failed Side
}

// Copy relays between the worker's side and the upstream side until both
// directions are finished, one side fails, nothing moves for idle (0: no
// idle timeout), or ctx is done. It takes ownership of both connections
// and closes both before it returns; it blocks until both copying
// goroutines have ended.
//
// When one direction reads EOF, Copy half-closes the other connection's
// write side if it has a CloseWrite method (*net.TCPConn, gonet.TCPConn and
// *net.UnixConn do) and keeps the opposite direction running; a connection
// without CloseWrite is closed instead, which ends the relay.
func Copy(ctx context.Context, worker, upstream net.Conn, idle time.Duration) Result {
	return run(ctx, worker, upstream, Options{Idle: idle}, false)
}

// A Gate judges the start of the worker → upstream direction of CopyWith.
// It runs on that direction's goroutine, after upstream → worker has
// started, and reads from the worker's side itself (WaitReadable lets it
// wait for data before taking a buffer). It returns the bytes it read, to
// be written upstream before the relay goes on, or an error that ends the
// relay: Result.Err is then that error, with Failed SideNone, and held
// bytes are dropped. A gate that refuses should itself do what the refusal
// needs (reset the worker's connection, say) before returning; the relay
// then closes both connections.
//
// A gate must return when the worker's side is closed (the relay closes it
// when upstream → worker fails or the whole flow idles out). It leaves the
// worker's read deadline cleared.
//
// A gate that allows may also return a Filter: the held bytes and every
// later byte of the direction then go through it. With no Filter the
// direction is a plain copy from then on.
type Gate func(worker net.Conn) (held []byte, f Filter, err error)

// A Filter judges every byte of the worker → upstream direction after a
// Gate let its first ones through, and may hold back an incomplete piece
// until it can judge it. It runs on that direction's goroutine only.
type Filter interface {
	// Next is given the bytes of the direction not yet forwarded: those
	// it kept last time, then those read since (on the first call, the
	// gate's held bytes). It returns how many leading bytes of b to
	// write upstream now; the relay keeps the rest, which must be at
	// most MaxKeep bytes, and gives them again at the start of the
	// next call. An error ends the relay as a Gate's does (the filter
	// has done what the refusal needs; nothing of b is written). b is
	// the relay's buffer: Next must not retain it.
	Next(b []byte) (n int, err error)
	// End is called when the worker's side ended its stream while kept
	// bytes were not forwarded. An error ends the relay as Next's
	// does; nil drops them and half-closes upstream as usual.
	End(kept []byte) error
}

// MaxKeep is the most bytes a Filter may keep between reads: half a
// stream buffer, so that every read has at least as much room again.
const MaxKeep = StreamBufferSize / 2

// errFilterKept ends a relay whose Filter kept more than MaxKeep bytes.
var errFilterKept = errors.New("relay: filter kept more than MaxKeep bytes")

// Options are the optional parts of CopyWith.
type Options struct {
	// Idle ends the relay when nothing moved either way for this long
	// (0: never).
	Idle time.Duration
	// Gate, if set, runs first on the worker → upstream direction (see
	// Gate). Result.ToUpstream counts the held bytes once written
	// upstream.
	Gate Gate
	// Go, if set, runs the upstream → worker copying once upstream has
	// data, on a goroutine of its choosing (a pool of goroutines whose
	// stacks have grown): the goroutine that waited for upstream's first
	// bytes stays parked, and small, until the relay ends. A relay that
	// never moves a byte then never holds a grown stack.
	Go func(func())

	// bufferTaken, if set, is called each time a direction takes a
	// buffer from the pool: a hook for this package's tests, never set
	// in production (nothing outside the package can set it).
	bufferTaken func()
}

// CopyWith is Copy with Options.
func CopyWith(ctx context.Context, worker, upstream net.Conn, opts Options) Result {
	return run(ctx, worker, upstream, opts, false)
}

// Packets relays datagrams between two connected datagram connections, the
// worker's side (for example a gonet.UDPConn) and the upstream side (a
// connected *net.UDPConn), until one side fails, nothing moves for idle
// (0: none), or ctx is done. Each Read is written as one datagram.
// ECONNREFUSED and similar errors that a connected UDP socket reports after
// an ICMP error are skipped, not fatal. It takes ownership of both
// connections and closes both before it returns.
func Packets(ctx context.Context, worker, upstream net.Conn, idle time.Duration) Result {
	return run(ctx, worker, upstream, Options{Idle: idle}, true)
}

// relay is the state shared by the two directions of one run.
type relay struct {
	worker, upstream net.Conn
	idle             time.Duration
	packets          bool
	start            time.Time
	spawn            func(func()) // Options.Go
	bufferTaken      func()       // Options.bufferTaken
	// last is the time of the latest successful read or write in either
	// direction, in nanoseconds since start.
	last atomic.Int64
	// idleTimer is the flow's one idle timer (nil: no idle timeout). It
	// fires at the flow's expiry as last stood when it was set; finding
	// the expiry moved it waits again, else it ends the relay.
	idleTimer *time.Timer
	// upRaw is the upstream host socket's RawConn (nil: upstream is not
	// a host stream socket), for small writes without the scheduler's
	// system-call bookkeeping (rawIOMax).
	upRaw syscall.RawConn

	// mu guards the first-failure record and the closed flag.
	mu     sync.Mutex
	err    error
	failed Side
	closed bool
}

// ReadableNotifier is a connection that can call a function when it turns
// readable, without a goroutine waiting for it. Copy and CopyWith use it
// on the worker's side so that a flow whose worker has not sent anything
// yet costs one parked goroutine, not two.
type ReadableNotifier interface {
	// NotifyReadable arranges for f to be called once, on a goroutine of
	// its own, when a Read would not block (as WaitReadable would
	// return). stop cancels that; it reports true when f was not called
	// and now never will be.
	NotifyReadable(f func()) (stop func() bool)
}

func run(ctx context.Context, worker, upstream net.Conn, opts Options, packets bool) Result {
	r := &relay{
		worker: worker, upstream: upstream,
		idle: opts.Idle, packets: packets, start: time.Now(),
		spawn: opts.Go, bufferTaken: opts.bufferTaken,
	}
	if !packets && rawIOMax > 0 {
		r.upRaw = hostRaw(upstream)
	}
	gate := opts.Gate
	stop := context.AfterFunc(ctx, func() { r.fail(ctx.Err(), SideNone) })
	if r.idle > 0 {
		r.idleTimer = time.AfterFunc(r.idle, r.idleCheck)
	}
	var toUpstream, toWorker int64
	if n, ok := worker.(ReadableNotifier); ok && !packets {
		// Upstream → worker on the caller's goroutine; worker →
		// upstream starts on a goroutine of its own once the worker
		// has something to say. If upstream → worker ends first (the
		// server finished, or the flow failed or idled out) and worker
		// → upstream has not started, the caller's goroutine runs it.
		done := make(chan struct{})
		stopNotify := n.NotifyReadable(func() {
			defer close(done)
			toUpstream = r.pump(worker, upstream, SideWorker, SideUpstream, gate, false)
		})
		toWorker = r.pump(upstream, worker, SideUpstream, SideWorker, nil, true)
		if stopNotify() {
			toUpstream = r.pump(worker, upstream, SideWorker, SideUpstream, gate, false)
		} else {
			<-done
		}
	} else {
		// Upstream → worker on a new goroutine, worker → upstream on
		// the caller's.
		done := make(chan struct{})
		go func() {
			defer close(done)
			toWorker = r.pump(upstream, worker, SideUpstream, SideWorker, nil, true)
		}()
		toUpstream = r.pump(worker, upstream, SideWorker, SideUpstream, gate, false)
		<-done
	}
	stop()
	if r.idleTimer != nil {
		r.idleTimer.Stop()
	}
	r.closeBoth()
	r.mu.Lock()
	defer r.mu.Unlock()
	return Result{ToUpstream: toUpstream, ToWorker: toWorker, Err: r.err, Failed: r.failed}
}

// fail records err (the first one wins) and closes both connections so the
// other direction stops too.
func (r *relay) fail(err error, side Side) {
	r.mu.Lock()
	if r.err == nil && !r.closed {
		r.err, r.failed = err, side
	}
	r.mu.Unlock()
	r.closeBoth()
}

func (r *relay) closeBoth() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	// The relay sets no deadlines, but a gate may have (gonet's deadline
	// timers outlive Close): clear the worker's side before closing it.
	r.worker.SetDeadline(time.Time{})
	r.worker.Close()
	r.upstream.Close()
}

func (r *relay) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func (r *relay) touch() {
	if r.idle > 0 {
		r.last.Store(int64(time.Since(r.start)))
	}
}

// expiry returns when the relay goes idle unless something moves first.
func (r *relay) expiry() time.Time {
	return r.start.Add(time.Duration(r.last.Load()) + r.idle)
}

// idleCheck runs when the idle timer fires: if something moved since it
// was set, it waits for the new expiry; otherwise the flow has been quiet
// for the whole idle period and the relay ends with ErrIdle, which closes
// both connections and so wakes every blocked Read, Write and wait. One
// timer per flow replaces a read and a write deadline per direction,
// which cost a timer (gonet) or a poller deadline (net.Conn) each, set
// at the start and cleared at the end of every flow.
func (r *relay) idleCheck() {
	if r.isClosed() {
		return
	}
	if left := time.Until(r.expiry()); left > 0 {
		r.idleTimer.Reset(left)
		return
	}
	r.fail(ErrIdle, SideNone)
}

// pump copies src to dst and returns the bytes written. srcSide and dstSide
// name the connections for the failure record. gate, if not nil, runs
// first (see Gate). With migrate (and Options.Go), the copying moves to a
// goroutine from r.spawn once src first has data; this one waits for it.
func (r *relay) pump(src, dst net.Conn, srcSide, dstSide Side, gate Gate, migrate bool) int64 {
	var total int64
	if gate != nil {
		held, f, err := gate(src)
		if err != nil {
			r.fail(err, SideNone)
			return 0
		}
		if f != nil {
			return r.pumpFiltered(src, dst, dstSide, held, f)
		}
		if len(held) > 0 {
			r.touch()
			w, werr := r.write(dst, held)
			total += int64(w)
			if werr != nil {
				r.writeFailed(werr, dstSide)
				return total
			}
		}
	}

	pool := &streamBufs
	if r.packets {
		pool = &packetBufs
	}
	var bp *[]byte
	bulk := false // bp is a bulk buffer
	defer func() {
		switch {
		case bulk:
			putBulk(bp)
		case bp != nil:
			pool.Put(bp)
		}
	}()
	var buf []byte
	take := func() {
		bp = pool.Get().(*[]byte)
		buf = *bp
		if r.bufferTaken != nil {
			r.bufferTaken()
		}
	}
	migrate = migrate && r.spawn != nil
	// loop runs on this goroutine, or after a migration on the spawned
	// one while this one waits: never on both at once.
	var loop func() int64
	// pending is data the first read left in buf, for the loop to write
	// first (after a migration, on the spawned goroutine).
	pending := 0
	loop = func() int64 {
		for {
			var n int
			var rerr error
			if buf == nil {
				// Take a buffer only once there is something to read.
				read := false
				if rc := hostRaw(src); rc != nil && !r.packets {
					// A host socket: read into a buffer taken only
					// for the system call and given back if it
					// finds nothing (one call fewer than a peek
					// and a Read).
					n, rerr = recvFresh(src, rc, pool, &bp)
					if bp != nil {
						buf = *bp
						if r.bufferTaken != nil {
							r.bufferTaken()
						}
					}
					read = true
				} else if rerr = waitReadable(src, time.Time{}, !r.packets); rerr == nil {
					// Data is waiting: the buffer is taken here, so
					// the loop goes straight to its Read, wherever
					// it runs.
					take()
				}
				if r.isClosed() {
					// Woken by the relay's own close: both
					// connections are closed, nothing can move.
					return total
				}
				if migrate && buf != nil {
					migrate = false
					pending = n
					moved := make(chan struct{})
					r.spawn(func() { defer close(moved); total = loop() })
					<-moved
					return total
				}
				if read && rerr == nil && n == 0 {
					continue
				}
			} else if pending > 0 {
				n, pending = pending, 0
			} else if rc := r.rawSrc(src); rc != nil && !bulk {
				n, rerr = recvInto(src, rc, buf)
			} else {
				n, rerr = src.Read(buf)
			}
			if n > 0 {
				r.touch()
				hoptrace.Mark(readHop(srcSide))
				w, werr := r.write(dst, buf[:n])
				hoptrace.Mark(writtenHop(dstSide))
				total += int64(w)
				if werr != nil {
					r.writeFailed(werr, dstSide)
					return total
				}
				if n == len(buf) && !bulk && !r.packets {
					// A full read: a bulk transfer. Move to a
					// bulk buffer if one is free.
					if big := takeBulk(); big != nil {
						pool.Put(bp)
						bp, buf, bulk = big, *big, true
					}
				}
			}
			if rerr == nil || r.readFailed(rerr, dst, srcSide) {
				continue
			}
			return total
		}
	}
	return loop()
}

// readFailed handles a failed Read from the srcSide connection: it reports
// whether the copying goes on (a transient datagram error), else it has
// ended the direction (half-closed dst after EOF) or the relay. (The relay
// sets no deadlines: its idle timer closes both sides, and the Read's
// error after that is not the relay's error, ErrIdle is.)
func (r *relay) readFailed(rerr error, dst net.Conn, srcSide Side) bool {
	switch {
	case errors.Is(rerr, io.EOF) && !r.packets:
		r.eof(dst)
		return false
	case r.packets && transient(rerr):
		return true
	default:
		if !r.isClosed() {
			r.fail(rerr, srcSide)
		}
		return false
	}
}

// pumpFiltered is pump's worker → upstream copy after a gate that returned
// a Filter: held, then each read, goes through f, and only what f lets
// through is written to dst. It takes its buffer at once (the gate has
// read data) and keeps f's unforwarded bytes at the buffer's start.
func (r *relay) pumpFiltered(src, dst net.Conn, dstSide Side, held []byte, f Filter) int64 {
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	if r.bufferTaken != nil {
		r.bufferTaken()
	}
	if len(held) > MaxKeep {
		r.fail(errFilterKept, SideNone)
		return 0
	}
	var total int64
	kept := copy(buf, held)
	fresh := kept > 0
	for {
		if fresh {
			n, err := f.Next(buf[:kept])
			hoptrace.Mark(hoptrace.Filtered)
			if err == nil && kept-n > MaxKeep {
				err = errFilterKept
			}
			if err != nil {
				r.fail(err, SideNone)
				return total
			}
			if n > 0 {
				w, werr := r.write(dst, buf[:n])
				hoptrace.Mark(writtenHop(dstSide))
				total += int64(w)
				if werr != nil {
					r.writeFailed(werr, dstSide)
					return total
				}
				kept = copy(buf, buf[n:kept])
			}
		}
		n, rerr := src.Read(buf[kept:])
		if n > 0 {
			hoptrace.Mark(hoptrace.RelayFromWork)
			r.touch()
			kept += n
		}
		fresh = n > 0
		if rerr == nil {
			continue
		}
		if fresh {
			// Judge and forward what came with the error first.
			// Only EOF can come with data on a stream; the loop
			// then reads EOF again.
			continue
		}
		if errors.Is(rerr, io.EOF) && kept > 0 {
			if err := f.End(buf[:kept]); err != nil {
				r.fail(err, SideNone)
				return total
			}
		}
		if !r.readFailed(rerr, dst, SideWorker) {
			return total
		}
	}
}

// readHop and writtenHop name the hoptrace hops of a direction.
func readHop(src Side) hoptrace.Hop {
	if src == SideWorker {
		return hoptrace.RelayFromWork
	}
	return hoptrace.RelayFromUp
}

func writtenHop(dst Side) hoptrace.Hop {
	if dst == SideUpstream {
		return hoptrace.UpWritten
	}
	return hoptrace.WorkWritten
}

// writeFailed records a failed write to dstSide.
func (r *relay) writeFailed(err error, dstSide Side) {
	switch {
	case err == ErrIdle:
		r.fail(ErrIdle, SideNone)
	case !r.isClosed():
		r.fail(err, dstSide)
	}
}

// WaitReadable blocks until c has data to read, has reached the end of the
// stream or failed (the next Read returns at once), or until deadline
// (zero: none), when it returns an error that is a timeout
// (os.ErrDeadlineExceeded). It reads nothing. It returns io.EOF when the
// peer has finished sending and nothing is left to read (so a relay at its
// end takes no buffer), and the connection's error when the peek consumed
// one (a reset): the caller treats any error as the Read's. A connection
// with a WaitReadable(time.Time) error method is asked directly; for a
// syscall.Conn it peeks at the socket in the runtime's poller, which also
// honours the connection's own read deadline; for any other connection it
// returns nil at once.
func WaitReadable(c net.Conn, deadline time.Time) error {
	return waitReadable(c, deadline, true)
}

// waitReadable is WaitReadable; stream says a zero-byte peek is the end of
// the stream (for a datagram socket it is an empty datagram).
func waitReadable(c net.Conn, deadline time.Time, stream bool) error {
	if w, ok := c.(interface{ WaitReadable(time.Time) error }); ok {
		return w.WaitReadable(deadline)
	}
	rc := hostRaw(c)
	if rc == nil {
		return nil
	}
	var peek [1]byte
	var sockErr error
	eof := false
	err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return false
		}
		eof = stream && n == 0 && err == nil
		// A pending socket error is consumed even by a peek: report
		// it here, as the Read would have.
		sockErr = err
		return true
	})
	switch {
	case eof:
		return io.EOF
	case sockErr != nil:
		return readError(c, os.NewSyscallError("recvfrom", sockErr))
	case err != nil && !isTimeout(err):
		// Closed: the Read that follows reports it.
		return nil
	}
	return err
}

// hostRaw returns the raw connection of c when the relay waits on and
// reads it with system calls of its own: a host socket (syscall.Conn)
// that has no WaitReadable method of its own; nil otherwise.
func hostRaw(c net.Conn) syscall.RawConn {
	if _, ok := c.(interface{ WaitReadable(time.Time) error }); ok {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// readError wraps err as c's Read would have.
func readError(c net.Conn, err error) error {
	return &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// recvFresh reads the first bytes of a stream socket that the relay
// holds no buffer for, waiting in the runtime's poller until there are
// some. Each attempt takes a buffer from pool for the read(2) alone and
// gives it back when the read finds nothing, so a waiting direction
// holds none; the buffer of a read that returned data is left in *bp.
// It returns io.EOF at the end of the stream, and the read's error, as
// the connection's Read would, otherwise.
func recvFresh(c net.Conn, rc syscall.RawConn, pool *sync.Pool, bp **[]byte) (int, error) {
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		b := pool.Get().(*[]byte)
		// A read of a non-blocking socket only copies what is
		// queued: made as RawSyscall (see rawIOMax).
		m, e := rawRead(fd, *b)
		switch {
		case e == syscall.EAGAIN || e == syscall.EINTR:
			pool.Put(b)
			return false
		case e != 0:
			pool.Put(b)
			rerr = os.NewSyscallError("read", e)
		case m == 0:
			pool.Put(b)
			rerr = io.EOF
		default:
			*bp, n = b, m
		}
		return true
	})
	if rerr == nil && err != nil {
		rerr = err // closed, or a deadline someone else set
	}
	if rerr != nil && rerr != io.EOF {
		rerr = readError(c, rerr)
	}
	return n, rerr
}

// rawSrc is src's RawConn when src is the upstream host stream socket
// (reads of it go as RawSyscall, see rawIOMax), else nil.
func (r *relay) rawSrc(src net.Conn) syscall.RawConn {
	if r.upRaw != nil && src == r.upstream {
		return r.upRaw
	}
	return nil
}

// recvInto is c's Read into buf for a stream socket, its read(2) made as
// RawSyscall (a non-blocking read only copies what is queued), waiting in
// the runtime's poller until there is something to read.
func recvInto(c net.Conn, rc syscall.RawConn, buf []byte) (int, error) {
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		m, e := rawRead(fd, buf)
		switch {
		case e == syscall.EAGAIN || e == syscall.EINTR:
			return false
		case e != 0:
			rerr = os.NewSyscallError("read", e)
		case m == 0:
			rerr = io.EOF
		default:
			n = m
		}
		return true
	})
	if rerr == nil && err != nil {
		rerr = err
	}
	if rerr != nil && rerr != io.EOF {
		rerr = readError(c, rerr)
	}
	return n, rerr
}

// write writes all of p to dst. A slow dst blocks it for as long as the
// flow as a whole is not idle (the idle timer's expiry moves with either
// direction); a flow idle for the whole period is closed by the timer,
// which ends the write.
func (r *relay) write(dst net.Conn, p []byte) (int, error) {
	var n int
	var err error
	if r.upRaw != nil && dst == r.upstream && len(p) <= rawIOMax {
		n, err = sendSmall(r.upRaw, dst, p)
	} else {
		n, err = dst.Write(p)
	}
	if n > 0 {
		r.touch()
	}
	if err != nil && r.packets && transient(err) {
		err = nil
	}
	return n, err
}

// sendSmall writes all of p (at most rawIOMax bytes) to the stream
// socket behind rc, as RawSyscall, waiting in the runtime's poller while
// the socket is full. Its errors are those dst's Write would return.
func sendSmall(rc syscall.RawConn, dst net.Conn, p []byte) (int, error) {
	n := 0
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, e := rawSend(fd, p[n:])
			switch e {
			case 0:
				n += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				werr = os.NewSyscallError("write", e)
				return true
			}
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	if werr != nil {
		return n, &net.OpError{Op: "write", Net: dst.LocalAddr().Network(), Source: dst.LocalAddr(), Addr: dst.RemoteAddr(), Err: werr}
	}
	return n, nil
}

// eof half-closes dst after its source reached EOF; without CloseWrite
// support the relay ends.
func (r *relay) eof(dst net.Conn) {
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err == nil {
			return
		}
	}
	r.closeBoth()
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// transient reports errors a connected datagram socket returns after an
// ICMP error for an earlier datagram; the socket keeps working.
func transient(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EMSGSIZE)
}
