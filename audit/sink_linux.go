package audit

import (
	"errors"
	"fmt"
	"github.com/nsgate/nsgate/internal/hostpath"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openFIFO opens the FIFO at path for writing only. A FIFO opened
// read-write, as a log file is, makes nsgate its own reader: records then
// fill the pipe and vanish at exit when nothing else reads it, and a reader
// that leaves is never noticed. Write-only, an open without a reader fails
// at once (ENXIO, O_NONBLOCK), and a write after the reader has gone fails
// (EPIPE), which fails the log.
func openFIFO(p *hostpath.Path) (*os.File, error) {
	f, err := p.OpenOutput(os.O_WRONLY|os.O_APPEND|unix.O_NONBLOCK, 0, hostpath.FIFO)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, unix.ENXIO) {
			return nil, fmt.Errorf("%s: nothing reads it (a FIFO: open it for reading first)", p.Given)
		}
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return f, nil
}

// unlinked reports whether f, a regular file, has no name left: it was
// removed, or another file was renamed over it. Records written to it
// reach no one.
func unlinked(f *os.File) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false // the write that follows reports a broken descriptor
	}
	return st.Nlink == 0
}
