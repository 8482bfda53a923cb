package audit

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/nsgate/nsgate/internal/hostpath"
	"io/fs"
	"os"
	"strconv"

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

func gettid() int { return unix.Gettid() }

// threadRunnable reports whether thread tid of this process is running
// or waiting for a CPU (state R in /proc/self/task/TID/stat). When that
// cannot be read it reports false: the watch then counts wall time.
func threadRunnable(tid int) bool {
	if tid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')') // the name may hold spaces and parentheses
	return i >= 0 && i+2 < len(b) && b[i+2] == 'R'
}
