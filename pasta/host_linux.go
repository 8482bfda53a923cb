package pasta

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostIPv4 reads the calling thread's network namespace (the host's, as
// Podman runs pasta): the IPv4 default route of the main table with a
// gateway and the lowest metric, and the first global IPv4 address of its
// interface. No such route or address gives the zero HostNet and no error.
func HostIPv4() (HostNet, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return HostNet{}, fmt.Errorf("read the host's routes: %w", err)
	}
	var best *netlink.Route
	for i := range routes {
		r := &routes[i]
		if r.Dst != nil && !isDefault(r) || r.Gw == nil || r.LinkIndex == 0 {
			continue
		}
		if best == nil || r.Priority < best.Priority {
			best = r
		}
	}
	if best == nil {
		return HostNet{}, nil
	}
	gw, ok := netip.AddrFromSlice(best.Gw.To4())
	if !ok {
		return HostNet{}, nil
	}
	link, err := netlink.LinkByIndex(best.LinkIndex)
	if err != nil {
		return HostNet{}, fmt.Errorf("read the host's default interface: %w", err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return HostNet{}, fmt.Errorf("read the addresses of %s: %w", link.Attrs().Name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok || a.Scope != unix.RT_SCOPE_UNIVERSE {
			continue
		}
		bits, _ := a.Mask.Size()
		return HostNet{Iface: link.Attrs().Name, Addr: netip.PrefixFrom(ip, bits), Gateway: gw}, nil
	}
	return HostNet{}, nil
}

func isDefault(r *netlink.Route) bool {
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}
