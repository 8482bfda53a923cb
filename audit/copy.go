package audit

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/nsgate/nsgate/internal/hostpath"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Copy is the second place the JSON lines go (Options.Copy), open.
type Copy struct {
	File *os.File
	// Name is the copy in messages: "stdout", "stderr" or the path.
	Name string
	// Owned says OpenCopy opened File (the Logger closes it); stdout
	// and stderr are the process's own and stay open.
	Owned bool
	// Deadline says File takes write deadlines (a FIFO or a socket
	// opened here), so a write nobody reads returns at its deadline.
	Deadline bool
}

// OpenCopy opens the copy named by path: "-" and "/dev/stderr" are the
// process's standard error, "/dev/stdout" its standard output (used as
// they are, not opened again, so they work whatever they are: a pipe, a
// socket, a terminal, a file); any other path must already exist and be
// a stream, such as a FIFO or a character device, opened for writing.
// A regular file or a directory is refused: a log continued in two files
// would need two heads, and only the first --audit is verified and
// anchored (docs/audit.md).
func OpenCopy(path string) (Copy, error) { return openCopy(path, nil) }

// openCopy is OpenCopy with the path decided by paths (nil:
// hostpath.Default): a link in its last component is refused, and the
// stream opened is the one looked at.
func openCopy(path string, paths *hostpath.Checker) (Copy, error) {
	switch path {
	case "-", "/dev/stderr":
		return Copy{File: os.Stderr, Name: "stderr"}, nil
	case "/dev/stdout":
		return Copy{File: os.Stdout, Name: "stdout"}, nil
	case "":
		return Copy{}, errors.New("audit copy: empty path")
	}
	if paths == nil {
		paths = hostpath.Default()
	}
	hp, err := paths.ResolveOutput(path)
	if err != nil {
		return Copy{}, fmt.Errorf("audit copy: %w", err)
	}
	defer hp.Close()
	if !hp.Existed {
		return Copy{}, fmt.Errorf("audit copy %s: it must exist: -, /dev/stdout, /dev/stderr or a FIFO", path)
	}
	// O_NONBLOCK so that opening a FIFO with no reader fails at once
	// (ENXIO) instead of waiting; the descriptor is then pollable and
	// takes write deadlines. A regular file or a directory is refused by
	// the kind asked for.
	f, err := hp.OpenOutput(os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0, hostpath.FIFO|hostpath.CharDevice)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, syscall.ENXIO) {
			return Copy{}, fmt.Errorf("audit copy %s: nothing reads it (open it for reading first)", path)
		}
		if st, serr := os.Lstat(hp.Real); serr == nil && (st.Mode().IsRegular() || st.IsDir()) {
			return Copy{}, fmt.Errorf("audit copy %s: a %s; a second --audit must be a stream (-, /dev/stdout, /dev/stderr or a FIFO): only the first --audit is a log file", path, kindOf(st.Mode()))
		}
		return Copy{}, fmt.Errorf("audit copy: %w", err)
	}
	return Copy{File: f, Name: path, Owned: true, Deadline: f.SetWriteDeadline(time.Time{}) == nil}, nil
}

func kindOf(m fs.FileMode) string {
	if m.IsDir() {
		return "directory"
	}
	return "regular file"
}

// pipeBuf is PIPE_BUF on Linux: a write of at most this many bytes to a
// pipe is never interleaved with another writer's bytes.
const pipeBuf = 4096

// writeCopy writes b, whole JSON lines, to the copy: in writes of whole
// lines of at most pipeBuf bytes (a longer line alone), so that on a
// stream shared with the worker's own output (a container's stdout) no
// line of the log is cut by another writer's bytes. It runs on the
// writer goroutine, under the watch.
func (l *Logger) writeCopy(b []byte) error {
	for len(b) > 0 {
		n := len(b)
		if n > pipeBuf {
			if i := bytes.LastIndexByte(b[:pipeBuf], '\n'); i >= 0 {
				n = i + 1
			} else if i := bytes.IndexByte(b, '\n'); i >= 0 {
				n = i + 1
			}
		}
		var df *os.File
		if l.copyDeadline {
			df = l.copyOut
		}
		l.arm(&l.copyName, df)
		w, err := l.copyOut.Write(b[:n])
		l.disarm()
		if err == nil && w < n {
			err = io.ErrShortWrite
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("write %s: blocked for %v (is anything reading it?)", l.copyName, l.timeout)
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return fmt.Errorf("write %s: %w", l.copyName, err)
		}
		b = b[n:]
	}
	return nil
}
