//go:build !linux

package sealed

import (
	"errors"
	"io"
	"net"
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

// FallbackTunnel reports whether i is one of the tunnel devices the kernel
// creates, down, in every new network namespace when the tunnel modules
// are loaded (sit0, ip6tnl0, ...). Down and without an underlying link,
// they cannot carry anything off the machine.
func FallbackTunnel(i net.Interface) bool {
	switch i.Name {
	case "sit0", "ip6tnl0", "tunl0", "gre0", "gretap0", "erspan0", "ip6gre0", "ip6_vti0", "ip_vti0":
		return i.Flags&net.FlagUp == 0
	}
	return false
}
