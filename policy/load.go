package policy

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Bounds on a policy. A file or section past one is refused with a clear
// error rather than parsed at any cost.
const (
	// MaxFileSize bounds a policy file, in bytes (1 MiB).
	MaxFileSize = 1 << 20
	// MaxRules bounds the allow and deny rules together.
	MaxRules = 10000
	// MaxHosts bounds the names in dns.hosts.
	MaxHosts = 10000
	// MaxEntries bounds each other list: exec.allow, filesystem.write,
	// filesystem.hide, dns.upstream and the addresses of one dns.hosts
	// name.
	MaxEntries = 1000
	// MaxErrors bounds the problems Parse lists; past it one more error
	// says how many were left out.
	MaxErrors = 100
)

// Load reads the policy file at path and parses it (see Parse); path is
// also the file name in messages. It refuses at once, without reading,
// anything that is not a regular file (a FIFO, a device such as /dev/zero,
// a directory, a socket) and a file larger than MaxFileSize; it opens the
// file non-blocking, so that a FIFO without a writer cannot make it wait,
// and reads at most MaxFileSize+1 bytes, so that a file growing meanwhile
// is refused too. Errors from the file system are wrapped (errors.Is with
// fs.ErrNotExist works); problems in the file come back from Parse as a
// *Errors.
//
// Load is the only function of the package that does I/O.
func Load(path string) (*Policy, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// Read is Load on a file the caller opened (non-blocking, as Load does:
// nsgate opens the policy through internal/hostpath); name is the file
// name in messages. It does not close f.
func Read(f *os.File, path string) (*Policy, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read policy %s: %s, not a regular file; give the path of a policy file", path, fileKind(st.Mode()))
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("read policy %s: %d bytes, larger than the limit of %d bytes (1 MiB)", path, st.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return Parse(path, data)
}

// fileKind names what a non-regular file is, for Load's message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file (" + m.Type().String() + ")"
}
