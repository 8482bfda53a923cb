package netstack

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/nsgate/nsgate/policy"
)

// ReadHostAddrs returns the addresses on the interfaces of the calling
// thread's network namespace (the host's, for the gateway), except those
// on loopback interfaces: the host's own addresses, which a flow the
// gateway dials would reach as the host's local services. Loopback is
// left out on purpose: the special ranges already guard 127.0.0.0/8 and
// ::1, and the test bench and the lab put their fake internet on lo
// (docs/threat-model.md, "The host's own addresses").
func ReadHostAddrs() ([]netip.Addr, error) {
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
	// A link made after LinkList is not in loopback: its addresses count
	// as the host's, which guards more, never less.
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

func readHostSet() (*policy.HostAddrs, error) {
	addrs, err := ReadHostAddrs()
	if err != nil {
		return nil, err
	}
	return policy.NewHostAddrs(addrs), nil
}

// watchHostAddrs reads the host's own addresses and subscribes to the
// kernel's address changes in the calling thread's network namespace.
// It fails when the first read fails: a gateway that cannot tell the
// host's addresses does not start. A subscription that cannot be made
// leaves the watch reading on every flow.
func watchHostAddrs() (*hostWatch, error) {
	w := &hostWatch{read: readHostSet}
	done := make(chan struct{})
	ch := make(chan netlink.AddrUpdate, 16)
	// Subscribe first, then read: a change between the two is in both.
	if err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{}); err != nil {
		w.poll.Store(true)
	} else {
		var once sync.Once
		w.stop = func() { once.Do(func() { close(done) }) }
		go func() {
			for range ch {
				w.stale.Store(true)
			}
			// The subscription ended: asked to (done), or its socket
			// failed (an overflow loses changes): read on every flow.
			w.poll.Store(true)
		}()
	}
	h, err := readHostSet()
	if err != nil {
		w.close()
		return nil, fmt.Errorf("the host's own addresses: %w", err)
	}
	w.cur.Store(h)
	return w, nil
}
