//go:build !linux

package netstack

import (
	"errors"
	"net/netip"
)

// ReadHostAddrs needs Linux.
func ReadHostAddrs() ([]netip.Addr, error) { return nil, errors.ErrUnsupported }

func watchHostAddrs() (*hostWatch, error) {
	return nil, errors.New("the host's own addresses: reading them needs Linux")
}
