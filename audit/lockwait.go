package audit

import (
	"errors"
	"os"
	"time"
)

// lockPoll is how often lockFileWait tries the lock again.
const lockPoll = 20 * time.Millisecond

// errLocked is lockFile's error when another process holds the lock.
var errLocked = errors.New("in use by another process (two writers would break the chain); use a different --audit file")

// lockFileWait is lockFile, trying again until wait has passed while
// another process holds the lock. The previous writer lets go when it
// closes the log, after its exit record and its head file (Close), so
// the records this one reads under the lock are anchored.
func lockFileWait(f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := lockFile(f)
		if !errors.Is(err, errLocked) || !time.Now().Before(deadline) {
			if errors.Is(err, errLocked) && wait > 0 {
				return errors.New("in use by another process for " + wait.String() + " (two writers would break the chain)")
			}
			return err
		}
		time.Sleep(lockPoll)
	}
}
