package netstack

import (
	"errors"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// StackError is a gVisor tcpip.Error turned into a Go error at the package
// edge. errors.Is matches it against the syscall.Errno it corresponds to,
// where there is one (ECONNREFUSED, ECONNRESET, ETIMEDOUT, ...).
type StackError struct {
	Err tcpip.Error
}

// Error returns gVisor's description, e.g. "connection was refused".
func (e *StackError) Error() string { return e.Err.String() }

// Is reports whether target is the errno this error corresponds to.
func (e *StackError) Is(target error) bool {
	errno, ok := target.(syscall.Errno)
	return ok && errno != 0 && errnoOf(e.Err) == errno
}

// tcpipError converts a tcpip.Error; nil stays nil.
func tcpipError(e tcpip.Error) error {
	if e == nil {
		return nil
	}
	return &StackError{Err: e}
}

func errnoOf(e tcpip.Error) syscall.Errno {
	switch e.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrNetworkUnreachable:
		return syscall.ENETUNREACH
	case *tcpip.ErrPortInUse:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrClosedForSend:
		return syscall.EPIPE
	case *tcpip.ErrNotConnected:
		return syscall.ENOTCONN
	case *tcpip.ErrMessageTooLong:
		return syscall.EMSGSIZE
	case *tcpip.ErrNoBufferSpace:
		return syscall.ENOBUFS
	case *tcpip.ErrWouldBlock:
		return syscall.EWOULDBLOCK
	case *tcpip.ErrInvalidEndpointState:
		return syscall.EINVAL
	case *tcpip.ErrUnknownNICID:
		return syscall.ENODEV
	}
	return 0
}

// errL7Denied ends a flow whose first bytes failed the SNI or Host check.
var errL7Denied = errors.New("l7 check refused the flow")
