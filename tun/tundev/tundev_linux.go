package tundev

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Open creates the device named in ifc in the calling thread's network
// namespace and returns its descriptor (blocking mode, close-on-exec). The
// caller owns the descriptor.
func Open(ifc Iface) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("open /dev/net/tun: %w (load the tun module: modprobe tun)", err)
		}
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("open /dev/net/tun: %w (rootless use needs mode 0666: chmod 0666 /dev/net/tun)", err)
		}
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	// IFF_VNET_HDR: every packet carries a virtio-net header, which is
	// what lets the endpoint use checksum and segmentation offloads (see
	// NewEndpoint).
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if ifc.TAP {
		flags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	}
	ifr, err := unix.NewIfreq(ifc.Name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("tun name %q: %w", ifc.Name, err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("create %s: %w (no CAP_NET_ADMIN over the worker's network namespace)", ifc.Name, err)
		}
		return -1, fmt.Errorf("create %s: %w", ifc.Name, err)
	}
	return fd, nil
}

// Configure brings up lo and the device named in ifc, sets its MTU, MAC
// (TAP only), addresses and default routes. It runs in the worker's network
// namespace.
func Configure(ifc Iface) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	link, err := netlink.LinkByName(ifc.Name)
	if err != nil {
		return fmt.Errorf("find %s: %w", ifc.Name, err)
	}
	if ifc.MTU != 0 {
		if err := netlink.LinkSetMTU(link, int(ifc.MTU)); err != nil {
			return fmt.Errorf("set %s mtu %d: %w", ifc.Name, ifc.MTU, err)
		}
	}
	if ifc.MAC != "" {
		hw, err := net.ParseMAC(ifc.MAC)
		if err != nil {
			return fmt.Errorf("mac address %q: %w", ifc.MAC, err)
		}
		if err := netlink.LinkSetHardwareAddr(link, hw); err != nil {
			return fmt.Errorf("set %s mac: %w", ifc.Name, err)
		}
	}
	for _, p := range ifc.Addrs {
		if p.Addr().Is6() && !ipv6Enabled(ifc.Name) {
			continue
		}
		a := &netlink.Addr{IPNet: prefixToIPNet(p)}
		if p.Addr().Is6() {
			// No duplicate address detection: nothing else is on the link,
			// and DAD would leave the address unusable for a second or so.
			a.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, a); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, ifc.Name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", ifc.Name, err)
	}
	for _, gw := range ifc.Gateways {
		if gw.Is6() && !ipv6Enabled(ifc.Name) {
			continue
		}
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		// The gateway is on the link by construction: onlink, so the
		// kernel does not look for a route to it first. Without it an
		// IPv6 default route could be refused ("no route to host") while
		// the address's own prefix route was still being set up by the
		// kernel's address-configuration work after the link came up.
		r := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       prefixToIPNet(dst),
			Gw:        gw.AsSlice(),
			Flags:     int(netlink.FLAG_ONLINK),
		}
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("add default route via %s: %w", gw, err)
		}
	}
	return nil
}

// ipv6Enabled reports whether the kernel lets the device carry IPv6.
func ipv6Enabled(name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6")
	return err == nil && len(b) > 0 && b[0] == '0'
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
