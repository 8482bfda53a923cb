//go:build !linux

package audit

import "os"

// openFIFO opens the FIFO at path for writing only (see sink_linux.go).
func openFIFO(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
}

// unlinked cannot tell here; nsgate itself runs on Linux only.
func unlinked(*os.File) bool { return false }
