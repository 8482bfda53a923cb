//go:build !linux

package netstack

import (
	"errors"
	"net/netip"

	"github.com/nsgate/nsgate/policy"
)

// ReadHostAddrs needs Linux.
func ReadHostAddrs() ([]netip.Addr, error) { return nil, errors.ErrUnsupported }

// ReadHostSet needs Linux.
func ReadHostSet() (*policy.HostAddrs, error) { return nil, errors.ErrUnsupported }

func watchHostAddrs() (*hostWatch, error) {
	return nil, errors.New("the host's own addresses: reading them needs Linux")
}
