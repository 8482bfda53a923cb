package audit

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"github.com/nsgate/nsgate/internal/hostpath"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"sync/atomic"
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
	// caller decides when to set it (nsgate run: unless --quiet or
	// --audit -). It is written only by the Logger's writer goroutine,
	// so it need not be safe for concurrent use, and a slow Human never
	// blocks Log; one that blocks for Timeout fails the log. Its write
	// errors are ignored (it is a view for people, not the record).
	Human io.Writer
	// Copy, when set, names a second place every JSON line is written to,
	// after the log's own write succeeded (see OpenCopy for what it may
	// be): `nsgate run --audit FILE --audit /dev/stdout`, for a
	// container's log pipeline. The copy holds the same lines (seq, prev,
	// mac), written in whole lines of at most PIPE_BUF bytes a write. It
	// fails closed like the log: a copy that cannot be written, or blocks
	// for Timeout, fails the log. It needs a JSON log (a path).
	Copy string
	// Paths decides the log's and the copy's paths (internal/hostpath):
	// the trees the worker may write. nil: hostpath.Default (links owned
	// by other users, and a link in the last component, still refused).
	Paths *hostpath.Checker
	// Now is the clock for record times and aggregation windows; default
	// time.Now. It is called with the Logger's mutex held. (Timeouts use
	// the real clock.)
	Now func() time.Time
	// Window is the aggregation window; default 1s.
	Window time.Duration
	// QueueLen bounds the records waiting for the writer; default 4096.
	QueueLen int
	// AggKeys bounds the aggregation table; default 4096. Past it, new kinds
	// of record fold into one overflow entry per event type and action.
	AggKeys int
	// Burst is how many allowed flows are written one by one in each
	// window, as they come, before they are keyed and folded, and how
	// many new records of other kinds are written as they come once the
	// key table is full (see aggregate.go); default 64, negative for
	// none. Every other repeat folds from its first.
	Burst int
	// Delay is how long the writer lets records gather after the first
	// of them is queued before it writes them out; default 2ms, negative
	// for none. Waking the writer for every record put it in the way of
	// the gateway's own goroutines (each wake-up is a scheduling event on
	// the connection's path); a batch a few milliseconds old costs one
	// wake-up and one write. A queue half full is written at once.
	Delay time.Duration
	// LockWait is how long Open waits for another process to let go of
	// the log file (its exclusive lock) before refusing it; 0 refuses at
	// once. A container engine's network helper waits: Podman starts the
	// next helper of a network namespace (same name, same log) as soon as
	// it has sent the last one SIGTERM, before that one has written its
	// exit record. The log then goes on as one chain.
	LockWait time.Duration
	// Timeout bounds how long the log may be stuck before it has failed:
	// one write (or the fsync at Close) to the sink, Log waiting for room
	// in a full queue, and Close waiting for the writer. It counts only
	// time in which the writer could have made progress (stall.go): time
	// the process spent waiting for a CPU is not a stuck sink. Default 3s.
	Timeout time.Duration
	// Reserve is how many bytes a regular log file keeps set aside past
	// its end for the closing records (reserve.go); default
	// DefaultReserve, negative for none.
	Reserve int64
}

const (
	defaultWindow   = time.Second
	defaultQueueLen = 4096
	defaultAggKeys  = 4096
	// DefaultBurst is Options.Burst's default.
	DefaultBurst   = 64
	defaultDelay   = 2 * time.Millisecond
	defaultTimeout = 3 * time.Second
	// closeGrace is how long Close still waits for a writer that is stuck
	// once the log has failed (or its deadline was forced).
	closeGrace   = 250 * time.Millisecond
	writeBufSize = 64 << 10
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

// Logger writes the hash-chained JSON-lines audit log (docs/audit.md).
//
// Log is safe for concurrent use and never waits on I/O: it assigns the seq
// and appends to an in-memory queue under a short mutex (so queue order is
// seq order); one writer goroutine marshals, chains, and writes whole
// records, in batches, whenever the queue runs empty or its buffer fills.
// Repeated records are folded into counters (see aggregate.go); when the
// queue is full, aggregated records are folded instead of queued, and other
// events wait for room, at most Options.Timeout: the log never grows
// without bound and never has a gap in seq.
//
// The log fails closed. The first write that fails (disk full, I/O error, a
// reader that went away), a write or fsync that blocks for Timeout, or a
// queue that does not drain within Timeout makes the Logger failed: Err says
// why, Failed is closed, Log drops every later event (returning 0) and
// nothing more is written. What was written stays verifiable: records are
// written whole, and a regular file that a failed write left with part of a
// record is cut back to the end of the last whole one. The caller stops
// everything the log was recording (the gateway, DNS and the exec audit
// check Failed themselves).
//
// Close must be called to flush and fsync; it is bounded by Timeout
// whatever the sink does. After Close, Log drops events and returns 0.
type Logger struct {
	now      func() time.Time
	window   time.Duration
	queueLen int
	aggKeys  int
	burst    int
	hardCap  int // queue bound for end-of-window aggregates
	timeout  time.Duration

	// The sink. Set before the writer starts; then owned by the writer
	// goroutine until it exits, then by Close.
	out      io.Writer // nil: no JSON log
	name     string    // the sink in messages: the path, "stderr"
	file     *os.File  // out, when it is a file we own (fsync, close)
	regular  bool      // file is a regular file: cut back, fsync, head file
	deadline bool      // file takes write deadlines (a FIFO, a socket)
	head1    *headFile // the head file of a regular file (see headfile.go)
	chain    *chain    // nil when out is nil
	human    io.Writer

	// The copy (Options.Copy): written after out, by the writer goroutine.
	copyOut      *os.File
	copyName     string // the copy in messages: "audit copy on stdout"
	copyOwned    bool   // we opened it: Close closes it
	copyDeadline bool   // it takes write deadlines (a FIFO)

	buf      []byte              // whole lines not yet written
	marks    []string            // the hash of each line in buf
	hbuf     []byte              // human lines not yet written
	execSaid map[string]struct{} // exec paths whose refusal has a human line (writer goroutine only)
	size     int64               // regular: bytes of whole records in the file
	// watch fails the log when one write or fsync makes no progress for
	// timeout while it could have (stall.go); watching names what it
	// watches. returned counts the writes and fsyncs that returned, armed
	// is its value when the watch was armed, inCall says one is under
	// way, writerTid is the thread making it. watchMu guards watchFile,
	// armedAt (the clock at arm) and meter.
	watch     *time.Timer
	watching  atomic.Pointer[string]
	returned  atomic.Uint64
	armed     atomic.Uint64
	inCall    atomic.Bool
	writerTid atomic.Int32
	watchMu   sync.Mutex
	watchFile *os.File
	armedAt   time.Duration
	meter     stallMeter
	// Test hooks: the watch's clock and the writer thread's state.
	mono     func() time.Duration
	runnable func() bool

	wake     chan struct{} // cap 1: the queue has records to write
	delay    time.Duration
	kick     *time.Timer   // wakes the writer delay after the queue became non-empty
	done     chan struct{} // closed by Close
	finished chan struct{} // closed when the writer goroutine returns

	// mu guards seq, pending, agg, free, the burst, closed and broken. It
	// is held only for bookkeeping, never across I/O.
	mu         sync.Mutex
	room       sync.Cond // on mu: signalled when the writer takes the queue, on Close or failure
	seq        uint64    // last seq assigned
	taken      uint64    // batches the writer took from the queue
	pending    []item
	agg        map[aggKey]*aggEntry
	due        []aggDue    // the sweep's scratch: windows it closes
	free       []*aggEntry // entries to reuse
	burstStart time.Time
	burstUsed  int
	closed     bool
	broken     bool // the log has failed

	down   atomic.Bool   // = broken, for the writer's checks
	failed chan struct{} // closed when the log fails

	// headMu guards head, err and headErr.
	headMu  sync.Mutex
	head    string // hash of the last record written whole
	err     error  // why the log failed
	headErr error  // writing the head file failed

	// The reserve (reserve.go). reserve and reserved are set at Open;
	// fullErr and reserveWarn are guarded by headMu.
	reserve     int64
	reserved    bool
	full        chan struct{}
	isFull      atomic.Bool
	fullErr     error
	reserveWarn error

	closeOnce sync.Once
	closeHead string
	closeErr  error
}

// Open starts a Logger.
//
// path "" means no JSON log (only Options.Human lines); "-" means JSON lines
// on stderr. Otherwise the file is opened with O_APPEND|O_CREATE, mode 0600,
// and locked against a second nsgate appending to it. A non-empty regular
// file is first verified with opts.Key, and against its head file
// (path + ".head", see headfile.go) when there is one; the new records
// continue its seq and prev. A log that `nsgate audit verify` would not
// accept is refused with an error that wraps a *VerifyError naming
// FILE:LINE. For a regular file, the head file is written at once (it
// anchors the records already there) and again by Close.
func Open(path string, opts Options) (*Logger, error) {
	l := newLogger(opts)
	if opts.Copy != "" && path == "" {
		return nil, errors.New("an audit copy needs an audit log to copy")
	}
	switch path {
	case "":
	case "-":
		l.setOutput(os.Stderr, opts.Key, zeroHash, 0)
		l.name = "stderr"
	default:
		paths := opts.Paths
		if paths == nil {
			paths = hostpath.Default()
		}
		hp, err := paths.ResolveOutput(path)
		if err != nil {
			return nil, err // it names the path; the caller says it is the log
		}
		var f *os.File
		if hp.IsFIFO() {
			f, err = openFIFO(hp)
		} else {
			f, err = hp.OpenOutput(os.O_RDWR|os.O_APPEND, 0o600, hostpath.Regular|hostpath.CharDevice)
			if err != nil {
				err = fmt.Errorf("open audit log: %w", err)
			}
		}
		if err != nil {
			hp.Close()
			return nil, err
		}
		st, err := prepareFile(f, path, opts.Key, opts.LockWait)
		if err != nil {
			f.Close()
			hp.Close()
			return nil, err
		}
		l.file = f
		l.setOutput(f, opts.Key, st.head, uint64(st.records))
		l.name = path
		if st.regular {
			l.regular = true
			l.size = st.size
			if err := l.openReserve(); err != nil {
				f.Close()
				hp.Close()
				return nil, err
			}
			l.head1 = openHeadFileIn(hp, HeadFile(path))
			l.head1.key = append([]byte(nil), opts.Key...)
			l.headErr = l.head1.writeHead(st.head)
		} else {
			hp.Close()
			// A FIFO or a socket is pollable: a write that no reader
			// takes returns at its deadline instead of blocking.
			l.deadline = f.SetWriteDeadline(time.Time{}) == nil
		}
	}
	if opts.Copy != "" {
		c, err := openCopy(opts.Copy, opts.Paths)
		if err != nil {
			if l.file != nil {
				l.file.Close()
			}
			if l.head1 != nil {
				l.head1.close()
			}
			return nil, err
		}
		l.copyOut, l.copyName, l.copyOwned, l.copyDeadline = c.File, "audit copy on "+c.Name, c.Owned, c.Deadline
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
	l.out = w
	l.chain = newChain(key, prev)
	l.head = prev
	l.seq = seq
}

// fileState is what prepareFile found in a log file.
type fileState struct {
	regular bool
	records int
	head    string
	size    int64
}

// prepareFile locks f and verifies what it already holds, against its head
// file too. It returns where to continue from.
func prepareFile(f *os.File, path string, key []byte, wait time.Duration) (fileState, error) {
	fi, err := f.Stat()
	if err != nil {
		return fileState{}, fmt.Errorf("stat audit log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		// A pipe or device: nothing to read back or to lock.
		return fileState{head: zeroHash}, nil
	}
	if err := lockFileWait(f, wait); err != nil {
		return fileState{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	anchor, anchorMAC, err := readHeadFileMAC(HeadFile(path))
	if err != nil {
		return fileState{}, fmt.Errorf("refusing to append to %s: %w", path, err)
	}
	// Read only under the lock: a writer that held it may have appended
	// since the Stat above. An empty file verifies as 0 records.
	sum, err := scan(f, key, anchor)
	if err != nil {
		var ve *VerifyError
		if errors.As(err, &ve) {
			ve.File = path
			return fileState{}, fmt.Errorf("refusing to append to a broken audit log: %w", ve)
		}
		return fileState{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	sum.AnchorFile = HeadFile(path)
	// A log emptied or moved away starts afresh (rotation); one that lost
	// records from its end, or grew by records nsgate did not write, is
	// refused, so that appending never hides what happened to it.
	if sum.Records > 0 {
		// A keyed log's head file must carry the head's mac: without
		// it, records cut from the end with the head file rewritten
		// would be appended to as if nothing happened.
		if err := checkHeadMAC(sum.AnchorFile, anchor, anchorMAC, key); err != nil {
			return fileState{}, fmt.Errorf("refusing to append to %s: %w", path, err)
		}
		if ve := sum.anchorError(); ve != nil {
			ve.File = path
			return fileState{}, fmt.Errorf("refusing to append to %s: %w", path, ve)
		}
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fileState{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	return fileState{regular: true, records: sum.Records, head: sum.Head, size: size}, nil
}

// newLogger applies defaults; it does not start the writer.
func newLogger(opts Options) *Logger {
	l := &Logger{
		now:      opts.Now,
		window:   opts.Window,
		queueLen: opts.QueueLen,
		aggKeys:  opts.AggKeys,
		burst:    opts.Burst,
		timeout:  opts.Timeout,
		human:    opts.Human,
		name:     "audit log",
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
		failed:   make(chan struct{}),
		full:     make(chan struct{}),
		reserve:  opts.Reserve,
		agg:      make(map[aggKey]*aggEntry),
		delay:    opts.Delay,
	}
	if l.delay == 0 {
		l.delay = defaultDelay
	}
	l.kick = time.AfterFunc(time.Hour, l.wakeWriter)
	l.kick.Stop()
	l.watch = time.AfterFunc(time.Hour, l.stalled)
	l.watch.Stop()
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
	if l.burst == 0 {
		l.burst = DefaultBurst
	}
	if l.timeout <= 0 {
		l.timeout = defaultTimeout
	}
	if l.reserve == 0 {
		l.reserve = DefaultReserve
	}
	// End-of-window aggregates may overshoot QueueLen by at most one
	// record per table entry (plus the overflow entries).
	l.hardCap = l.queueLen + l.aggKeys + 32
	l.room.L = &l.mu
	return l
}

// Log records ev and returns its seq. It returns 0 when ev was folded into
// an aggregate (see aggregate.go) — except for an allowed flow, for which it
// returns the seq of the record that stands for it —, when ev is nil, after
// Close, and once the log has failed. It does no I/O. Aggregated events
// never wait (but for an allowed flow that no record stands for yet: it
// needs one); other events wait only while the queue is full, that is
// while the writer is QueueLen records behind, and at most Timeout: then
// the log has failed and Log returns 0.
//
// ev must not be changed after the call; a pointer to one of this package's
// event types is copied.
func (l *Logger) Log(ev Event) uint64 {
	ev = normalize(ev)
	if ev == nil {
		return 0
	}
	style := aggStyle(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.broken {
		return 0
	}
	if style != aggNone {
		return l.logAggLocked(ev, style)
	}
	if !l.waitRoomLocked() {
		return 0
	}
	if _, last := ev.(Exit); last {
		// The exit record is the run's last word: write out the folded
		// records first so that nothing follows it.
		l.sweepLocked(true)
	}
	return l.enqueueLocked(item{ev: ev, t: l.now()})
}

// waitRoomLocked waits until the queue has room. It reports false when
// the log was closed or has failed meanwhile; a queue that stays full
// while the writer makes no progress for Timeout (counted as the watch
// counts, stall.go: time off the CPU is not counted) fails the log.
func (l *Logger) waitRoomLocked() bool {
	if len(l.pending) < l.queueLen {
		return true
	}
	m := stallMeter{period: l.period()}
	m.reset(l.clock())
	seen := l.progressLocked()
	t := time.AfterFunc(m.period, func() {
		l.mu.Lock()
		l.room.Broadcast()
		l.mu.Unlock()
	})
	defer t.Stop()
	for len(l.pending) >= l.queueLen && !l.closed && !l.broken {
		l.room.Wait()
		now := l.clock()
		if p := l.progressLocked(); p != seen {
			seen = p
			m.reset(now)
			t.Reset(m.period)
			continue
		}
		if now-m.last < m.period {
			continue // not the tick: another waiter's wake-up
		}
		if m.tick(now, true) >= l.timeout {
			l.failLocked(fmt.Errorf("write %s: %d records waited %v for the writer (is anything reading it?)", l.name, len(l.pending), l.timeout))
			return false
		}
		t.Reset(m.period)
	}
	return !l.closed && !l.broken
}

// logAggLocked applies the aggregation rules (aggregate.go) to ev.
func (l *Logger) logAggLocked(ev Event, style int) uint64 {
	now := l.now()
	if style == aggStands && len(l.pending) < l.queueLen && l.takeBurstLocked(now) {
		// An allowed flow within the burst: as it comes, without a key.
		return l.enqueueLocked(item{ev: ev, t: now})
	}
	k := aggKeyOf(ev)
	if style == aggRepeat && len(l.pending) < l.queueLen && len(l.agg) >= l.aggKeys && l.agg[k] == nil && l.takeBurstLocked(now) {
		// Other kinds fold from their first repeat (their key's entry);
		// a new one that finds the table full is written as it comes
		// while the burst lasts, before it would fold into the overflow.
		return l.enqueueLocked(item{ev: ev, t: now})
	}
	for {
		room := len(l.pending) < l.queueLen
		key := k
		e := l.agg[key]
		if e == nil && len(l.agg) >= l.aggKeys {
			key = overflowKey(key)
			e = l.agg[key]
		}
		if e != nil {
			if room && now.Sub(e.start) >= l.window {
				// This key's window is over: write its aggregate, start a new one.
				if e.count > 0 {
					l.enqueueAggLocked(key, e, now)
				}
				e.restart(now)
				e.seq = l.enqueueLocked(item{ev: ev, t: now})
				return e.seq
			}
			e.fold(ev)
			if style == aggStands {
				return e.seq
			}
			return 0
		}
		if room || style != aggStands {
			e = l.newEntryLocked(now)
			l.agg[key] = e
			if room {
				e.seq = l.enqueueLocked(item{ev: ev, t: now})
				return e.seq
			}
			e.fold(ev)
			return 0
		}
		// An allowed flow needs a record that stands for it: wait for room.
		if !l.waitRoomLocked() {
			return 0
		}
		now = l.now()
	}
}

// takeBurstLocked takes one repeat from the window's burst, if any is left.
func (l *Logger) takeBurstLocked(now time.Time) bool {
	if l.burst <= 0 {
		return false
	}
	if now.Sub(l.burstStart) >= l.window {
		l.burstStart, l.burstUsed = now, 0
	}
	if l.burstUsed >= l.burst {
		return false
	}
	l.burstUsed++
	return true
}

// newEntryLocked returns an entry whose window starts at now, reusing one
// the sweep freed.
func (l *Logger) newEntryLocked(now time.Time) *aggEntry {
	var e *aggEntry
	if n := len(l.free); n > 0 {
		e = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		e = new(aggEntry)
	}
	e.restart(now)
	return e
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
	l.enqueueLocked(item{ev: aggregateEvent(e, k.overflow), t: now, kind: kind, n: e.count})
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
	if l.broken {
		return
	}
	now := l.now()
	// Closed windows are written in the order of the records that stand
	// for them (then of when they began), not in the map's order: the
	// log, and the live lines, are the same for the same events.
	due := l.due[:0]
	for k, e := range l.agg {
		if !final && now.Sub(e.start) < l.window {
			continue
		}
		due = append(due, aggDue{k, e})
	}
	slices.SortFunc(due, func(a, b aggDue) int {
		if c := cmp.Compare(a.e.seq, b.e.seq); c != 0 {
			return c
		}
		return a.e.start.Compare(b.e.start)
	})
	for _, d := range due {
		k, e := d.k, d.e
		if e.count > 0 {
			if !final && len(l.pending) >= l.hardCap {
				continue
			}
			l.enqueueAggLocked(k, e, now)
		}
		delete(l.agg, k)
		*e = aggEntry{}
		l.free = append(l.free, e)
	}
	clear(due)
	l.due = due[:0]
}

// aggDue is one aggregation window the sweep closes.
type aggDue struct {
	k aggKey
	e *aggEntry
}

// run is the writer goroutine.
func (l *Logger) run() {
	defer close(l.finished)
	// The sweep's timer runs only while an aggregation window is open,
	// so that an idle log costs no wake-ups (a thousand idle sandboxes
	// each woke twice a second for nothing). A new window comes with a
	// record or with a full queue, and either wakes this goroutine, which
	// then arms the timer.
	period := max(l.window/2, time.Millisecond)
	sweep := time.NewTimer(period)
	sweep.Stop()
	defer sweep.Stop()
	armed := false
	var batch []item
	for {
		select {
		case <-l.wake:
		case <-sweep.C:
			armed = false
			l.sweep(false)
		case <-l.done:
			l.drain(&batch)
			l.flush()
			l.sync()
			return
		}
		l.drain(&batch)
		l.flush()
		if !armed && l.aggregating() {
			sweep.Reset(period)
			armed = true
		}
	}
}

// aggregating reports whether an aggregation window is open.
func (l *Logger) aggregating() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.agg) > 0
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
		l.taken++
		l.room.Broadcast()
		l.mu.Unlock()
		for i := range b {
			l.write(&b[i])
		}
		clear(b) // drop references to events
		*batch = b
	}
}

// write adds one record to the buffers: the JSON line, then the human line.
func (l *Logger) write(it *item) {
	if l.out != nil && !l.down.Load() {
		line := l.chain.record(it.seq, it.t, it.ev)
		l.buf = append(l.buf, line...)
		l.buf = append(l.buf, '\n')
		l.marks = append(l.marks, l.chain.prev)
		if len(l.buf) >= writeBufSize {
			l.flushJSON()
		}
	}
	if l.human == nil || l.down.Load() {
		return
	}
	switch it.kind {
	case kindEvent:
		if !isDeny(it.ev) || !l.humanExecOnce(it.ev) {
			return
		}
		l.hbuf = append(l.hbuf, FormatHuman(it.ev)...)
	case kindAggr:
		if !isDeny(it.ev) || !l.humanExecOnce(it.ev) {
			return
		}
		l.hbuf = append(l.hbuf, "nsgate: "+humanBody(it.ev)+fmt.Sprintf(" (%d more like this in the last %s)", it.n, windowWords(l.window))...)
	case kindOverflow:
		if !isDeny(it.ev) {
			return
		}
		l.hbuf = fmt.Appendf(l.hbuf, "nsgate: %s %s: %d more of differing kinds in the last %s (too many distinct denials to list)",
			actionOf(it.ev), it.ev.EventName(), it.n, windowWords(l.window))
	}
	l.hbuf = append(l.hbuf, '\n')
	if len(l.hbuf) >= writeBufSize {
		l.flushHuman()
	}
}

// flush writes out the buffered lines (the queue is idle).
func (l *Logger) flush() {
	l.flushJSON()
	l.flushHuman()
}

// flushJSON writes the buffered records with one write. When the write
// fails, the records it wrote whole stay; a regular file is cut back to the
// end of the last of them, so that no torn line is left; and the log has
// failed.
func (l *Logger) flushJSON() {
	if len(l.buf) == 0 {
		return
	}
	defer func() {
		l.buf = l.buf[:0]
		clear(l.marks)
		l.marks = l.marks[:0]
	}()
	if l.down.Load() {
		return
	}
	var df *os.File
	if l.deadline {
		df = l.file
	}
	l.arm(&l.name, df)
	n, err := l.out.Write(l.buf)
	l.disarm()
	n = min(max(n, 0), len(l.buf))
	if err == nil && n < len(l.buf) {
		err = io.ErrShortWrite
	}
	whole := len(l.buf)
	if err != nil {
		whole = bytes.LastIndexByte(l.buf[:n], '\n') + 1
	}
	if whole > 0 {
		k := len(l.marks)
		if whole < len(l.buf) {
			k = bytes.Count(l.buf[:whole], []byte{'\n'})
		}
		l.headMu.Lock()
		l.head = l.marks[k-1]
		l.headMu.Unlock()
		l.size += int64(whole)
	}
	if err == nil && l.regular && unlinked(l.file) {
		// Written, but to a file no name reaches any more: the records
		// from here on would be lost, and the head at exit would anchor
		// nothing. Nothing was written to the name, so nothing is cut.
		l.fail(fmt.Errorf("write %s: the log file was removed or replaced while nsgate wrote it: its records reach no file", l.name))
		return
	}
	if err == nil {
		l.keepReserve()
		if l.copyOut != nil {
			if err := l.writeCopy(l.buf); err != nil {
				l.fail(err)
			}
		}
		return
	}
	err = l.writeError(err)
	if l.regular && n > whole {
		if terr := l.file.Truncate(l.size); terr != nil {
			err = fmt.Errorf("%w; cutting its torn last record off failed too: %v", err, terr)
		}
	}
	l.fail(err)
}

var humanName = "human-readable lines"

// flushHuman writes the buffered human lines. A write error drops them; a
// write that blocks for the timeout fails the log (the watch).
func (l *Logger) flushHuman() {
	if len(l.hbuf) == 0 {
		return
	}
	if !l.down.Load() {
		l.arm(&humanName, nil)
		l.human.Write(l.hbuf)
		l.disarm()
	}
	l.hbuf = l.hbuf[:0]
}

// sync fsyncs a regular file, under the watch.
func (l *Logger) sync() {
	if !l.regular || l.down.Load() {
		return
	}
	l.arm(&l.name, nil)
	err := l.file.Sync()
	l.disarm()
	if err != nil {
		l.fail(fmt.Errorf("sync %s: %w", l.name, err))
	}
}

// writeError makes err name the sink.
func (l *Logger) writeError(err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("write %s: blocked for %v (is anything reading it?)", l.name, l.timeout)
	case errors.As(err, &pe):
		return &fs.PathError{Op: pe.Op, Path: l.name, Err: pe.Err}
	}
	return fmt.Errorf("write %s: %w", l.name, err)
}

// fail makes the log failed with err; the first failure is the one kept.
func (l *Logger) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

func (l *Logger) failLocked(err error) {
	if l.broken {
		return
	}
	l.broken = true
	l.down.Store(true)
	clear(l.pending)
	l.pending = l.pending[:0]
	l.room.Broadcast()
	l.headMu.Lock()
	l.err = err
	l.headMu.Unlock()
	close(l.failed)
}

// Failed returns a channel that is closed when the log fails (see Logger).
// Safe for concurrent use.
func (l *Logger) Failed() <-chan struct{} { return l.failed }

// Head returns the hash of the last record written whole so far (hex
// SHA-256 of its line), which lags Log by the queue and the batch; 64 zeros
// before the first record; "" when there is no JSON log. Safe for
// concurrent use.
func (l *Logger) Head() string {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	if l.out == nil {
		return ""
	}
	return l.head
}

// Err returns why the log failed, or nil: the first write, fsync or close
// error, or the stall, that made it fail. The error names the file, e.g.
// "write audit.jsonl: no space left on device". Safe for concurrent use.
func (l *Logger) Err() error {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.err
}

// HeadFileErr returns the error met writing the head file (at Open or at
// Close), or nil. It is not a failure of the log: the records are intact,
// only their anchor could not be written. Safe for concurrent use.
func (l *Logger) HeadFileErr() error {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.headErr
}

// Close writes pending aggregates and every queued record, flushes, fsyncs
// and closes the file (not stderr), writes the head file of a regular file
// (atomically, mode 0600), and returns the last record's hash (see Head) and
// the error that made the log fail, if any. It waits for the writer at
// most Timeout (a quarter of a second once the log has failed, before or
// while it waits); a writer still stuck then, in a write to a FIFO nobody
// reads, say, has its write deadline forced, and the log has failed. Safe to call more than once;
// later calls return the same results.
func (l *Logger) Close() (head string, err error) {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.sweepLocked(true)
		l.room.Broadcast()
		l.mu.Unlock()
		close(l.done)
		l.kick.Stop()
		// Wait for the writer: Timeout, or only closeGrace once the log
		// has failed (before or while waiting).
		wait := l.timeout
		failed := l.failed
		if l.down.Load() {
			wait, failed = closeGrace, nil
		}
		// The Timeout is counted as the watch counts (stall.go): only
		// while the writer is in no watched call (the watch judges those)
		// and makes no progress, a tick at most per look.
		stuck := false
		m := stallMeter{period: l.period()}
		m.reset(l.clock())
		seen := l.returned.Load()
		first := wait
		if failed != nil {
			first = m.period
		}
		t := time.NewTimer(first)
	waiting:
		for {
			select {
			case <-l.finished:
				break waiting
			case <-failed:
				failed = nil
				wait = closeGrace
				t.Reset(wait)
			case <-t.C:
				if failed != nil {
					// Before any failure: look again unless the writer
					// made no progress, outside a call, for Timeout.
					r := l.returned.Load()
					moved := r != seen
					seen = r
					if moved {
						m.reset(l.clock())
					}
					if m.tick(l.clock(), !moved && !l.inCall.Load()) < wait {
						t.Reset(m.period)
						continue
					}
				}
				what := l.name
				if p := l.watching.Load(); p != nil {
					what = *p
				}
				l.fail(fmt.Errorf("write %s: blocked for %v at exit (is anything reading it?)", what, wait))
				if l.deadline {
					l.file.SetWriteDeadline(time.Unix(1, 0))
				}
				if l.copyDeadline {
					l.copyOut.SetWriteDeadline(time.Unix(1, 0))
				}
				select {
				case <-l.finished:
				case <-time.After(closeGrace):
					// Still in a write that no deadline reaches: leave the
					// file to it; the process is about to exit.
					stuck = true
				}
				break waiting
			}
		}
		t.Stop()
		l.watch.Stop()
		// The head file first, then the log (which lets go of its lock):
		// a writer waiting for the lock (Options.LockWait) then finds
		// the records it reads anchored.
		if !stuck && l.head1 != nil {
			err := l.head1.writeHead(l.Head())
			l.head1.close()
			l.headMu.Lock()
			l.headErr = err
			l.headMu.Unlock()
		}
		if !stuck && l.file != nil {
			l.releaseReserve()
			if err := l.file.Close(); err != nil {
				l.fail(fmt.Errorf("close %s: %w", l.name, err))
			}
		}
		if !stuck && l.copyOwned {
			l.copyOut.Close()
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

// maxHumanExecPaths bounds the paths whose exec refusal was said.
const maxHumanExecPaths = 4096

// humanExecOnce reports whether ev gets a human line: every event but an
// exec refusal, which is said once per path (a program that retries, or a
// shell that runs the same refused command in a loop, would otherwise
// repeat it), and never for a path that names no file (a $PATH lookup
// trying each directory: nothing nsgate refused).
func (l *Logger) humanExecOnce(ev Event) bool {
	e, ok := normalize(ev).(Exec)
	if !ok {
		return true
	}
	if e.Missing {
		return false
	}
	if _, said := l.execSaid[e.Path]; said {
		return false
	}
	if l.execSaid == nil {
		l.execSaid = map[string]struct{}{}
	}
	if len(l.execSaid) < maxHumanExecPaths {
		l.execSaid[e.Path] = struct{}{}
	}
	return true
}
