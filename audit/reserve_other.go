//go:build !linux

package audit

import "os"

func allocate(f *os.File, off, n int64) error { return errNoReserve }

func release(f *os.File, off, n int64) {}
