//go:build !linux

package lab

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

// SealInfo describes the sealed namespace this process runs in.
type SealInfo struct {
	Userns    bool
	FromNetns string
}

// Stdio are a re-executed child's standard streams.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Sealed is never true outside Linux.
func Sealed() (SealInfo, bool) { return SealInfo{}, false }

// EnterSealed needs Linux namespaces.
func EnterSealed(argv, env []string, stdio Stdio) (int, error) { return -1, errors.ErrUnsupported }

// CheckSealed needs Linux namespaces.
func CheckSealed() error { return errors.ErrUnsupported }

// AddLoopback needs Linux.
func AddLoopback(addrs, optional []netip.Addr) ([]netip.Addr, error) {
	return nil, errors.ErrUnsupported
}

// SetupInternet needs Linux namespaces.
func SetupInternet(l Layout, dir string) (*Internet, error) { return nil, errors.ErrUnsupported }
