//go:build !linux

package pasta

import (
	"errors"
	"io"
	"time"
)

// Background needs Linux.
func Background([]string, time.Duration) error { return errors.ErrUnsupported }

// ChildReady: never a background copy off Linux.
func ChildReady() (int, io.Writer) { return -1, nil }

// WatchNetns needs Linux.
func WatchNetns(string, time.Duration) (<-chan struct{}, func(), error) {
	return nil, nil, errors.ErrUnsupported
}

// WritePIDFile needs Linux.
func WritePIDFile(string) error { return errors.ErrUnsupported }
