package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Options configure a Logger. The zero value is valid: no mac, no human
// lines, time.Now, a one-second aggregation window, a 4096-record queue.
type Options struct {
	// Key is the HMAC-SHA256 key; every record then gets a "mac" member.
	// nil (or empty) means no mac. The Logger keeps its own copy.
	Key []byte
	// Human receives one readable line per denial (see FormatHuman), with
	// repeated denials summarized once per window. nil means none. The
	// caller decides when to set it (SPEC §2: when there is no --audit file,
	// unless --quiet). It is written only by the Logger's writer goroutine,
	// so it need not be safe for concurrent use, and a slow Human never
	// blocks Log.
	Human io.Writer
	// Now is the clock for record times and aggregation windows; default
	// time.Now. It is called with the Logger's mutex held.
	Now func() time.Time
	// Window is the aggregation window; default 1s.
	Window time.Duration
	// QueueLen bounds the records waiting for the writer; default 4096.
	QueueLen int
	// AggKeys bounds the aggregation table; default 4096. Past it, new kinds
	// of denial fold into one overflow entry per event type.
	AggKeys int
	// Delay is how long the writer lets records gather after the first
	// of them is queued before it writes them out; default 2ms, negative
	// for none. Waking the writer for every record put it in the way of
	// the gateway's own goroutines (each wake-up is a scheduling event on
	// the connection's path); a batch a few milliseconds old costs one
	// wake-up and one write. A queue half full is written at once.
	Delay time.Duration
}

const (
	defaultWindow   = time.Second
	defaultQueueLen = 4096
	defaultAggKeys  = 4096
	defaultDelay    = 2 * time.Millisecond
	writeBufSize    = 64 << 10
)

// item kinds.
const (
	kindEvent    = iota // an event logged as it came
	kindAggr            // end-of-window aggregate for one key
	kindOverflow        // end-of-window aggregate for an overflow key
)

// item is one record waiting for the writer.
type item struct {
	seq  uint64
	t    time.Time
	ev   Event
	kind uint8
	n    uint64 // kindAggr/kindOverflow: events folded
}

// Logger writes the hash-chained JSON-lines audit log of SPEC §8.
//
// Log is safe for concurrent use and never waits on I/O: it assigns the seq
// and appends to an in-memory queue under a short mutex (so queue order is
// seq order); one writer goroutine marshals, chains, and writes through a
// buffer that is flushed whenever the queue runs empty. When the queue is
// full, aggregated denials (see aggregate.go) are folded into counters
// instead of queued, and other events wait for room: the log never grows
// without bound and never has a gap in seq.
//
// Close must be called to flush and fsync; after Close, Log drops events and
// returns 0.
type Logger struct {
	now      func() time.Time
	window   time.Duration
	queueLen int
	aggKeys  int
	hardCap  int // queue bound for end-of-window aggregates

	// Owned by the writer goroutine until it exits; then by Close.
	out   *bufio.Writer // nil: no JSON log
	file  *os.File      // the file under out when we own it (fsync, close)
	fsync bool          // file is a regular file: fsync on Close
	chain *chain        // nil when out is nil
	human io.Writer
	werr  error // first write error; writing stops after it

	wake     chan struct{} // cap 1: the queue has records to write
	delay    time.Duration
	kick     *time.Timer   // wakes the writer delay after the queue became non-empty
	done     chan struct{} // closed by Close
	finished chan struct{} // closed when the writer goroutine returns

	// mu guards seq, pending, agg and closed. It is held only for
	// bookkeeping, never across I/O.
	mu      sync.Mutex
	room    sync.Cond // on mu: signalled when the writer takes the queue or on Close
	seq     uint64    // last seq assigned
	pending []item
	agg     map[aggKey]*aggEntry
	closed  bool

	// headMu guards head and err, published by the writer.
	headMu sync.Mutex
	head   string
	err    error

	closeOnce sync.Once
	closeHead string
	closeErr  error
}

// Open starts a Logger.
//
// path "" means no JSON log (only Options.Human lines); "-" means JSON lines
// on stderr. Otherwise the file is opened with O_APPEND|O_CREATE, mode 0600,
// and locked against a second nsgate appending to it. A non-empty regular
// file is first verified with opts.Key; the new records continue its seq and
// prev. A broken chain is refused with an error that wraps a *VerifyError
// naming FILE:LINE.
func Open(path string, opts Options) (*Logger, error) {
	l := newLogger(opts)
	switch path {
	case "":
	case "-":
		l.setOutput(os.Stderr, opts.Key, zeroHash, 0)
	default:
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open audit log: %w", err)
		}
		n, head, err := prepareFile(f, path, opts.Key)
		if err != nil {
			f.Close()
			return nil, err
		}
		fi, _ := f.Stat()
		l.file = f
		l.fsync = fi != nil && fi.Mode().IsRegular()
		l.setOutput(f, opts.Key, head, uint64(n))
	}
	go l.run()
	return l, nil
}

// setOutput makes the Logger write JSON lines to w, continuing a chain whose
// last record had seq seq and hash prev. Call before the writer starts.
func (l *Logger) setOutput(w io.Writer, key []byte, prev string, seq uint64) {
	if len(key) > 0 {
		key = append([]byte{}, key...)
	} else {
		key = nil
	}
	l.out = bufio.NewWriterSize(w, writeBufSize)
	l.chain = newChain(key, prev)
	l.head = prev
	l.seq = seq
}

// prepareFile locks f and verifies what it already holds. It returns the
// number of records and the head to continue from.
func prepareFile(f *os.File, path string, key []byte) (int, string, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, "", fmt.Errorf("stat audit log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		// A pipe or device: nothing to read back or to lock.
		return 0, zeroHash, nil
	}
	if err := lockFile(f); err != nil {
		return 0, "", fmt.Errorf("audit log %s: %w", path, err)
	}
	// Read only under the lock: a writer that held it may have appended
	// since the Stat above. An empty file verifies as 0 records.
	n, head, err := Verify(f, key)
	if err != nil {
		var ve *VerifyError
		if errors.As(err, &ve) {
			ve.File = path
			return 0, "", fmt.Errorf("refusing to append to a broken audit log: %w", ve)
		}
		return 0, "", fmt.Errorf("audit log %s: %w", path, err)
	}
	return n, head, nil
}

// newLogger applies defaults; it does not start the writer.
func newLogger(opts Options) *Logger {
	l := &Logger{
		now:      opts.Now,
		window:   opts.Window,
		queueLen: opts.QueueLen,
		aggKeys:  opts.AggKeys,
		human:    opts.Human,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
		agg:      make(map[aggKey]*aggEntry),
		delay:    opts.Delay,
	}
	if l.delay == 0 {
		l.delay = defaultDelay
	}
	l.kick = time.AfterFunc(time.Hour, l.wakeWriter)
	l.kick.Stop()
	if l.now == nil {
		l.now = time.Now
	}
	if l.window <= 0 {
		l.window = defaultWindow
	}
	if l.queueLen <= 0 {
		l.queueLen = defaultQueueLen
	}
	if l.aggKeys <= 0 {
		l.aggKeys = defaultAggKeys
	}
	// End-of-window aggregates may overshoot QueueLen by at most one
	// record per table entry (plus the overflow entries).
	l.hardCap = l.queueLen + l.aggKeys + 8
	l.room.L = &l.mu
	return l
}

// Log records ev and returns its seq, or 0 when ev was folded into an
// aggregate (a repeated denial within the window, or a denial that met a
// full queue), when ev is nil, or after Close. It does no I/O. Aggregated
// denials (Flow, Packet, DNS with Action "deny") never wait; other events
// wait only while the queue is full, that is while the writer is QueueLen
// records behind.
//
// ev must not be changed after the call; a pointer to one of this package's
// event types is copied.
func (l *Logger) Log(ev Event) uint64 {
	ev = normalize(ev)
	if ev == nil {
		return 0
	}
	k, aggregated := aggKeyOf(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0
	}
	if aggregated {
		return l.logDenyLocked(ev, k, l.now())
	}
	for len(l.pending) >= l.queueLen && !l.closed {
		l.room.Wait()
	}
	if l.closed {
		return 0
	}
	if _, last := ev.(Exit); last {
		// The exit record is the run's last word: write out the folded
		// denials first so that nothing follows it.
		l.sweepLocked(true)
	}
	return l.enqueueLocked(item{ev: ev, t: l.now()})
}

// logDenyLocked applies the aggregation rules to one aggregated denial.
func (l *Logger) logDenyLocked(ev Event, k aggKey, now time.Time) uint64 {
	room := len(l.pending) < l.queueLen
	e := l.agg[k]
	if e == nil && len(l.agg) >= l.aggKeys {
		k = overflowKey(k)
		e = l.agg[k]
	}
	if e != nil && room && now.Sub(e.start) >= l.window {
		// This key's window is over: write its aggregate, start a new one.
		if e.count > 0 {
			l.enqueueAggLocked(k, e, now)
		}
		e.start, e.count, e.first = now, 0, nil
		return l.enqueueLocked(item{ev: ev, t: now})
	}
	if e == nil {
		e = &aggEntry{start: now}
		l.agg[k] = e
		if room {
			return l.enqueueLocked(item{ev: ev, t: now})
		}
	}
	e.count++
	if e.first == nil {
		e.first = ev
	}
	return 0
}

// enqueueLocked assigns the next seq to it and queues it.
func (l *Logger) enqueueLocked(it item) uint64 {
	l.seq++
	it.seq = l.seq
	switch {
	case l.delay < 0 || len(l.pending) == l.queueLen/2:
		l.wakeWriter()
	case len(l.pending) == 0:
		l.kick.Reset(l.delay)
	}
	l.pending = append(l.pending, it)
	return it.seq
}

// wakeWriter tells the writer goroutine there are records to write.
func (l *Logger) wakeWriter() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// enqueueAggLocked queues the aggregate record for entry e.
func (l *Logger) enqueueAggLocked(k aggKey, e *aggEntry, now time.Time) {
	kind := uint8(kindAggr)
	if k.overflow {
		kind = kindOverflow
	}
	l.enqueueLocked(item{ev: aggregateEvent(e.first, e.count, k.overflow), t: now, kind: kind, n: e.count})
}

// sweep ends the windows that are over (all of them when final) and queues
// their aggregates. Outside Close it leaves an entry to keep counting when
// the queue is at its hard bound; the entry's count is written later.
func (l *Logger) sweep(final bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(final)
}

func (l *Logger) sweepLocked(final bool) {
	now := l.now()
	for k, e := range l.agg {
		if !final && now.Sub(e.start) < l.window {
			continue
		}
		if e.count > 0 {
			if !final && len(l.pending) >= l.hardCap {
				continue
			}
			l.enqueueAggLocked(k, e, now)
		}
		delete(l.agg, k)
	}
}

// run is the writer goroutine.
func (l *Logger) run() {
	defer close(l.finished)
	period := l.window / 2
	if period < time.Millisecond {
		period = time.Millisecond
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	var batch []item
	for {
		select {
		case <-l.wake:
		case <-tick.C:
			l.sweep(false)
		case <-l.done:
			l.drain(&batch)
			return
		}
		l.drain(&batch)
		l.flush()
	}
}

// drain writes queued records until the queue is empty. *batch is a spare
// slice swapped with the queue, so steady state does not allocate.
func (l *Logger) drain(batch *[]item) {
	for {
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.mu.Unlock()
			return
		}
		b := l.pending
		l.pending = (*batch)[:0]
		l.room.Broadcast()
		l.mu.Unlock()
		for i := range b {
			l.write(&b[i])
		}
		clear(b) // drop references to events
		*batch = b
	}
}

// write emits one record: the JSON line, then the human line.
func (l *Logger) write(it *item) {
	if l.out != nil && l.werr == nil {
		line := l.chain.record(it.seq, it.t, it.ev)
		l.out.Write(line)
		if err := l.out.WriteByte('\n'); err != nil {
			l.setErr(fmt.Errorf("write audit log: %w", err))
		}
		l.headMu.Lock()
		l.head = l.chain.prev
		l.headMu.Unlock()
	}
	if l.human == nil {
		return
	}
	var s string
	switch it.kind {
	case kindEvent:
		if !isDeny(it.ev) {
			return
		}
		s = FormatHuman(it.ev)
	case kindAggr:
		s = "nsgate: " + humanBody(it.ev) + fmt.Sprintf(" (%d more like this in the last %s)", it.n, windowWords(l.window))
	case kindOverflow:
		s = fmt.Sprintf("nsgate: %s %s: %d more of differing kinds in the last %s (too many distinct denials to list)",
			actionOf(it.ev), it.ev.EventName(), it.n, windowWords(l.window))
	}
	io.WriteString(l.human, s+"\n")
}

// flush pushes buffered lines to the file (the queue is idle).
func (l *Logger) flush() {
	if l.out == nil || l.werr != nil {
		return
	}
	if err := l.out.Flush(); err != nil {
		l.setErr(fmt.Errorf("write audit log: %w", err))
	}
}

func (l *Logger) setErr(err error) {
	l.werr = err
	l.headMu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.headMu.Unlock()
}

// Head returns the hash of the last record written so far (hex SHA-256 of its
// line), which lags Log by the queue; 64 zeros before the first record; ""
// when there is no JSON log. Safe for concurrent use.
func (l *Logger) Head() string {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.head
}

// Err returns the first error met writing the log, or nil. After a write
// error the Logger stops writing JSON lines (the chain on disk would be
// broken anyway) but keeps accepting events. Safe for concurrent use.
func (l *Logger) Err() error {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.err
}

// Close writes pending aggregates and every queued record, flushes, fsyncs
// and closes the file (not stderr), and returns the last record's hash (see
// Head) and the first error met. It waits for the writer. Safe to call more
// than once; later calls return the same results.
func (l *Logger) Close() (head string, err error) {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.sweepLocked(true)
		l.room.Broadcast()
		l.mu.Unlock()
		close(l.done)
		<-l.finished
		l.kick.Stop()
		l.flush()
		if l.file != nil {
			if l.fsync && l.werr == nil {
				if err := l.file.Sync(); err != nil {
					l.setErr(fmt.Errorf("sync audit log: %w", err))
				}
			}
			if err := l.file.Close(); err != nil && l.werr == nil {
				l.setErr(fmt.Errorf("close audit log: %w", err))
			}
		}
		l.closeHead, l.closeErr = l.Head(), l.Err()
	})
	return l.closeHead, l.closeErr
}

// windowWords renders the aggregation window for human lines.
func windowWords(d time.Duration) string {
	if d == time.Second {
		return "second"
	}
	return d.String()
}
