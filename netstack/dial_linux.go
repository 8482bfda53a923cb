package netstack

import (
	"context"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// newDialer returns the dialer for upstream connections: net.Dialer with
// a Control hook that connects the socket itself and checks once,
// without waiting, whether the handshake is already complete, as it is
// for a destination on the host's loopback. net.Dialer's own connect then
// finds the socket connected (EISCONN) and returns at once; otherwise
// (EALREADY) it waits in the runtime's poller as usual. Without the
// check the dialing goroutine always parked and then waited behind
// everything else runnable: a loopback dial took 86-91 µs in the gateway
// against 37 µs alone (docs/performance.md).
func newDialer() *net.Dialer {
	return &net.Dialer{ControlContext: connectNow}
}

func connectNow(_ context.Context, network, address string, c syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil // leave it to net.Dialer
	}
	var sa unix.Sockaddr
	if a := ap.Addr().Unmap(); a.Is4() && network == "tcp4" {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else if network == "tcp6" {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16(), ZoneId: zoneID(ap.Addr().Zone())}
	} else {
		return nil
	}
	var cerr error
	err = c.Control(func(fd uintptr) {
		switch err := unix.Connect(int(fd), sa); err {
		case nil:
			return
		case unix.EINPROGRESS:
		default:
			cerr = os.NewSyscallError("connect", err)
			return
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(pfd, 0); err != nil || n == 0 {
			return // still connecting: net.Dialer waits for it
		}
		if soerr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soerr != 0 {
			cerr = os.NewSyscallError("connect", unix.Errno(soerr))
		}
	})
	if err != nil {
		return err
	}
	return cerr
}

func zoneID(zone string) uint32 {
	if zone == "" {
		return 0
	}
	if ifi, err := net.InterfaceByName(zone); err == nil {
		return uint32(ifi.Index)
	}
	return 0
}
