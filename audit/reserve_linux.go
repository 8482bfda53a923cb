package audit

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// allocate sets n bytes aside in f from off, leaving its size.
func allocate(f *os.File, off, n int64) error {
	var err error
	for {
		err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return errNoReserve
	}
	return err
}

// release gives the n bytes from off back (best effort).
func release(f *os.File, off, n int64) {
	unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE|unix.FALLOC_FL_PUNCH_HOLE, off, n)
}
