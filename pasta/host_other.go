//go:build !linux

package pasta

import "errors"

// HostIPv4 needs Linux.
func HostIPv4() (HostNet, error) { return HostNet{}, errors.ErrUnsupported }
