package audit

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

// The stall verdict: when does a sink "not drain"?
//
// Wall time since a write began is not the answer: when hundreds of
// sandboxes start at once on two cores, a process can wait seconds for a
// CPU, and a write to a file on tmpfs then takes seconds of wall time
// without anything being wrong with the sink. So the watch counts only the
// time in which the write could have made progress and did not:
//
//   - it looks every stallTicks-th of the timeout (a tick) while one write
//     or fsync is under way, and credits at most one tick's length per
//     look: a look that comes late because the process got no CPU credits
//     no more than one that came on time, so seconds off the CPU count as
//     one tick;
//   - a look credits nothing while the writer's thread is runnable (on a
//     CPU or waiting for one, Linux: /proc/self/task/TID/stat): a write
//     whose thread wants a CPU is starved, not stuck. A write blocked on
//     its sink sleeps (a full pipe or a FIFO nobody reads: the thread waits
//     for the poller; a hung file system: in the kernel);
//   - a write or fsync that returns is progress and ends the watch.
//
// The log fails when the credited time reaches the timeout: on an idle
// machine that is the timeout of wall time, as before. The queue bound
// (a Log that waits for room) and Close's wait for the writer count the
// same way, with "the writer took the queue or a write returned" as
// progress.

// stallTicks is how many looks the timeout is cut into.
const stallTicks = 10

// stallMeter adds up the time a stall lasted while it could have ended.
type stallMeter struct {
	period time.Duration // one tick
	last   time.Duration // the clock at the last look
	stuck  time.Duration // credited so far
}

func (m *stallMeter) reset(now time.Duration) { m.last, m.stuck = now, 0 }

// tick looks at now: it credits the time since the last look, at most one
// period, when counts, and returns the total credited.
func (m *stallMeter) tick(now time.Duration, counts bool) time.Duration {
	gap := min(now-m.last, m.period)
	m.last = now
	if counts && gap > 0 {
		m.stuck += gap
	}
	return m.stuck
}

// period is the watch's tick.
func (l *Logger) period() time.Duration {
	return max(l.timeout/stallTicks, time.Millisecond)
}

// clock reads the watch's clock (monotonic; Logger.mono in tests).
func (l *Logger) clock() time.Duration {
	if l.mono != nil {
		return l.mono()
	}
	return time.Since(monoBase)
}

var monoBase = time.Now()

// writerRunnable reports whether the writer's thread is on a CPU or
// waiting for one (Logger.runnable in tests).
func (l *Logger) writerRunnable() bool {
	if l.runnable != nil {
		return l.runnable()
	}
	return threadRunnable(int(l.writerTid.Load()))
}

// arm starts the watch for one write or fsync to what; f, when not nil,
// takes write deadlines: the verdict forces its deadline so that the
// write returns. It runs on the writer goroutine, which keeps its thread
// until disarm, so that the watch can tell that thread's state.
func (l *Logger) arm(what *string, f *os.File) {
	runtime.LockOSThread()
	l.writerTid.Store(int32(gettid()))
	l.watchMu.Lock()
	l.watching.Store(what)
	l.watchFile = f
	l.armed.Store(l.returned.Load())
	l.inCall.Store(true)
	l.armedAt = l.clock()
	l.meter = stallMeter{period: l.period()}
	l.meter.reset(l.armedAt)
	l.watch.Reset(l.meter.period)
	l.watchMu.Unlock()
}

// disarm ends the watch: the write or fsync returned.
func (l *Logger) disarm() {
	l.returned.Add(1)
	l.inCall.Store(false)
	l.watchMu.Lock()
	l.watch.Stop()
	l.watchFile = nil
	l.watchMu.Unlock()
	runtime.UnlockOSThread()
}

// stalled is the watch's look, a tick after arm and every tick after
// that while the call has not returned (see the top of this file).
func (l *Logger) stalled() {
	l.watchMu.Lock()
	if l.returned.Load() != l.armed.Load() {
		l.watchMu.Unlock()
		return
	}
	now := l.clock()
	if l.meter.tick(now, !l.writerRunnable()) < l.timeout {
		l.watch.Reset(l.meter.period)
		l.watchMu.Unlock()
		return
	}
	waited, f := now-l.armedAt, l.watchFile
	l.watchMu.Unlock()
	what := l.name
	if p := l.watching.Load(); p != nil {
		what = *p
	}
	l.fail(fmt.Errorf("write %s: blocked for %v (is anything reading it?)", what, waited.Round(time.Millisecond)))
	if f != nil {
		f.SetWriteDeadline(time.Unix(1, 0))
	}
}

// progress counts what the writer did: batches taken from the queue and
// calls returned. mu must be held.
func (l *Logger) progressLocked() uint64 { return l.taken + l.returned.Load() }
