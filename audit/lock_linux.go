package audit

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive advisory lock on f, so that two nsgate
// processes never append to one log (their chains would interleave). The
// lock lasts until f is closed.
func lockFile(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return errLocked
	}
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	return nil
}

// isLocked reports whether another process holds an exclusive lock on f:
// a running nsgate is appending to the log.
func isLocked(f *os.File) bool {
	err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
