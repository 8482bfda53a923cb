//go:build !linux

package audit

import "os"

// lockFile does nothing here: the lock is advisory and only guards against
// a second nsgate on the same file; nsgate itself runs on Linux only.
func lockFile(*os.File) error { return nil }

// isLocked cannot tell here.
func isLocked(*os.File) bool { return false }
