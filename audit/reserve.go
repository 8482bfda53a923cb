package audit

import (
	"errors"
	"fmt"
)

// The reserve (docs/audit.md, "When the disk fills"). A regular log file
// keeps Options.Reserve bytes set aside past its end (fallocate with
// FALLOC_FL_KEEP_SIZE: the blocks are the file's, its size is unchanged),
// re-extended after every write. When re-extending fails (the file
// system is full), the log is full: Full is closed, the gateway admits no
// new flow, the session stops the worker, and the records still to come
// (the flows already admitted, their ends, the exit record) are written
// into the space set aside, which no other file can take. A flow is then
// never dialled without room for its record: the check that refuses new
// flows comes before the dial.

// DefaultReserve is Options.Reserve's default: room for about forty
// records, more than the flows a gateway has between its check and their
// records (the allowed flows past the burst fold into one record a key).
const DefaultReserve = 16 << 10

// Filler is implemented by a Sink that can run short of room, as the Logger
// does when its reserve cannot be kept (see reserve.go). Full is closed
// then; no new flow may be admitted.
type Filler interface {
	Full() <-chan struct{}
}

// FullOf returns s's Full channel, or nil (never ready) when s cannot run
// short of room.
func FullOf(s Sink) <-chan struct{} {
	if f, ok := s.(Filler); ok {
		return f.Full()
	}
	return nil
}

// Full returns a channel that is closed when the log can no longer keep its
// reserve (see reserve.go): the records already due are still written,
// into the reserve, but no new flow may be admitted. Safe for concurrent
// use.
func (l *Logger) Full() <-chan struct{} { return l.full }

// FullErr says why the log is full, or nil. Safe for concurrent use.
func (l *Logger) FullErr() error {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.fullErr
}

// ReserveWarning says why the log keeps no reserve although it is a
// regular file (its file system does not support fallocate), or nil.
func (l *Logger) ReserveWarning() error {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.reserveWarn
}

// errNoReserve marks a file system that cannot set space aside.
var errNoReserve = errors.New("the file system cannot set space aside (fallocate)")

// openReserve sets the reserve aside at Open. A file system without
// fallocate keeps today's behaviour with a warning (ReserveWarning); one
// without room for the reserve refuses the log: it could not record the
// run's end.
func (l *Logger) openReserve() error {
	if !l.regular || l.reserve <= 0 {
		return nil
	}
	switch err := allocate(l.file, l.size, l.reserve); {
	case err == nil:
		l.reserved = true
	case errors.Is(err, errNoReserve):
		l.reserveWarn = fmt.Errorf("audit log %s: %w: no reserve for the closing records; a full disk fails the log as it comes", l.name, err)
	default:
		return fmt.Errorf("audit log %s: cannot set %d bytes aside for the closing records: %w", l.name, l.reserve, err)
	}
	return nil
}

// keepReserve re-extends the reserve after a write (writer goroutine);
// when it cannot, the log is full.
func (l *Logger) keepReserve() {
	if !l.reserved || l.isFull.Load() {
		return
	}
	if err := allocate(l.file, l.size, l.reserve); err != nil {
		l.setFull(fmt.Errorf("audit log %s: no room to keep %d bytes aside for the closing records: %w", l.name, l.reserve, err))
	}
}

// setFull makes the log full with err; the first is kept.
func (l *Logger) setFull(err error) {
	if l.isFull.Swap(true) {
		return
	}
	l.headMu.Lock()
	l.fullErr = err
	l.headMu.Unlock()
	close(l.full)
}

// releaseReserve gives the space past the end back at Close.
func (l *Logger) releaseReserve() {
	if l.reserved {
		release(l.file, l.size, l.reserve)
	}
}
