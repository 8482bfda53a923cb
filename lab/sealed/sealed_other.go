//go:build !linux

package sealed

import (
	"errors"
	"io"
	"net/netip"
)

// EnvSealedFrom and EnvSealedUserns: see sealed_linux.go.
const (
	EnvSealedFrom   = "NSGATE_SEALED_FROM"
	EnvSealedUserns = "NSGATE_SEALED_USERNS"
)

// Info describes the sealed namespace this process runs in.
type Info struct {
	Userns    bool
	FromNetns string
}

// Stdio are a re-executed child's standard streams.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Current is never true outside Linux.
func Current() (Info, bool) { return Info{}, false }

// Enter needs Linux namespaces.
func Enter(argv, env []string, stdio Stdio) (int, error) { return -1, errors.ErrUnsupported }

// Check needs Linux namespaces.
func Check() error { return errors.ErrUnsupported }

// AddLoopback needs Linux.
func AddLoopback(addrs, optional []netip.Addr) ([]netip.Addr, error) {
	return nil, errors.ErrUnsupported
}

// AddHostLink needs Linux.
func AddHostLink(name string, addrs []netip.Addr, routes []netip.Prefix) error {
	return errors.ErrUnsupported
}
