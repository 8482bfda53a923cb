package netstack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/policy"
)

// ReadHostAddrs returns the addresses on the interfaces of the calling
// thread's network namespace (the host's, for the gateway), except those
// on loopback interfaces: the host's own addresses, which a flow the
// gateway dials would reach as the host's local services. Loopback is
// left out on purpose: the special ranges already guard 127.0.0.0/8 and
// ::1, and the test bench and the lab put their fake internet on lo
// (docs/threat-model.md, "The host's own addresses").
//
// A dump the kernel interrupted (an address or link changed while it
// ran: netlink.ErrDumpInterrupted) may be incomplete; it is read again, a
// few times, and then it is an error.
func ReadHostAddrs() ([]netip.Addr, error) { return retryInterrupted(readHostAddrsOnce) }

// readTries bounds how many times a dump is read after interrupted ones.
const readTries = 4

// retryInterrupted calls read until it returns something other than an
// interrupted dump's error, at most readTries times.
func retryInterrupted[T any](read func() (T, error)) (v T, err error) {
	for range readTries {
		v, err = read()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return v, err
}

// loopbackLinks returns the indexes of the loopback links. A link made
// after it ran is not among them: its addresses and routes count as the
// host's, which guards more, never less.
func loopbackLinks() (map[int]bool, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	loopback := map[int]bool{}
	for _, l := range links {
		if a := l.Attrs(); a.Flags&net.FlagLoopback != 0 {
			loopback[a.Index] = true
		}
	}
	return loopback, nil
}

func readHostAddrsOnce() ([]netip.Addr, error) {
	loopback, err := loopbackLinks()
	if err != nil {
		return nil, err
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if loopback[a.LinkIndex] || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		out = append(out, ip.Unmap())
	}
	return out, nil
}

// ReadHostSet returns the host's own addresses (ReadHostAddrs) and the
// prefixes the calling thread's network namespace routes to itself on a
// link other than loopback (ReadLocalPrefixes): every address in such a
// prefix reaches the host's own services as its addresses do.
func ReadHostSet() (*policy.HostAddrs, error) {
	addrs, err := ReadHostAddrs()
	if err != nil {
		return nil, err
	}
	prefixes, err := retryInterrupted(ReadLocalPrefixes)
	if err != nil {
		return nil, err
	}
	return policy.NewHostAddrsRouted(addrs, prefixes), nil
}

// ReadLocalPrefixes returns the destinations of the routes of the local
// routing table that the kernel delivers to the host itself (types
// local, broadcast and anycast) whose link is not a loopback one. Each
// address the host holds has one (its /32 or /128); a wider one (an
// "AnyIP" route, ip route add local 198.51.100.0/24 dev eth0 table
// local) makes every address in it the host's own, with no address on
// any interface. A broadcast one (the subnet's broadcast address, which
// the kernel adds with an address and its prefix) delivers a datagram
// to the host's own UDP services as well as to the link, and Go's UDP
// sockets, as the gateway dials them, may broadcast. Loopback links are
// left out as ReadHostAddrs leaves them out.
func ReadLocalPrefixes() ([]netip.Prefix, error) {
	loopback, err := loopbackLinks()
	if err != nil {
		return nil, err
	}
	// With strict checking the kernel dumps the local table alone, not
	// every table (a host with a full routing table would otherwise send
	// all of it at each re-read); without it the filter works here.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	h.SetStrictCheck(true)
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list local routes: %w", err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		switch r.Type {
		case unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_ANYCAST:
		default:
			continue
		}
		if loopback[r.LinkIndex] || r.Dst == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		bits, _ := r.Dst.Mask.Size()
		if p := netip.PrefixFrom(ip, bits); p.IsValid() {
			out = append(out, p)
		}
	}
	return out, nil
}

// watchHostAddrs subscribes to the kernel's address changes in the
// calling thread's network namespace, then reads the host's own
// addresses (a change between the two is seen by the first load). It
// fails when the read fails: a gateway that cannot tell the host's
// addresses does not start. Without a subscription (the socket cannot be
// made) every load reads them.
func watchHostAddrs() (*hostWatch, error) {
	w := &hostWatch{read: ReadHostSet}
	if fd, err := subscribeAddrs(); err == nil {
		w.changed = func() bool { return drainChanges(fd) }
		w.stop = func() { unix.Close(fd) }
	}
	h, err := ReadHostSet()
	if err != nil {
		w.close()
		return nil, fmt.Errorf("the host's own addresses: %w", err)
	}
	w.cur = h
	return w, nil
}

// subscribeAddrs opens a non-blocking netlink socket that receives the
// kernel's IPv4 and IPv6 address and route changes (a local route may
// come or go with no address change).
func subscribeAddrs() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return -1, err
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR |
		unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV6_ROUTE}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// drainChanges empties the subscription socket without blocking and
// reports whether anything was in it. An overflowed socket (ENOBUFS: the
// kernel dropped announcements) or any other error also counts as a
// change, so the addresses are read again.
//
// It runs before every dial, so its recv(2) (which never blocks) is made
// as RawSyscall: a Syscall's entry wakes the runtime's sysmon thread
// when it slept because nsgate was idle (docs/performance.md, session 12).
func drainChanges(fd int) bool {
	var buf [8192]byte
	changed := false
	for {
		errno := recvNoWait(fd, buf[:])
		switch errno {
		case 0, unix.ENOBUFS:
			changed = true
		case unix.EAGAIN:
			return changed
		case unix.EINTR:
		default:
			return true
		}
	}
}
