package pasta

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/tun/tundev"
)

// HostNet is the part of the host's network pasta copies into the
// container: the interface of the IPv4 default route, its address and the
// route's gateway. The zero HostNet means the host has none.
type HostNet struct {
	Iface   string
	Addr    netip.Prefix // e.g. 192.168.1.50/24
	Gateway netip.Addr
}

// Fallback is what the container gets on a host without an IPv4 default
// route (pasta has nothing to copy then): slirp4netns's addresses.
func Fallback() HostNet {
	d := netplan.Default()
	return HostNet{Iface: DefaultIfName, Addr: d.GuestPrefix4(), Gateway: d.Gateway4()}
}

// Plan returns the container's address plan and interface name: the
// host's address and gateway (or Fallback's when h is zero), replaced
// by -a, -n and -g where given, with DNS on the --dns-forward address and
// the --map-guest-addr address as the host alias.
func (c Config) Plan(h HostNet) (netplan.Plan, string, error) {
	if !h.Addr.IsValid() || !h.Gateway.IsValid() {
		h = Fallback()
	}
	addr, bits, gw := h.Addr.Addr(), h.Addr.Bits(), h.Gateway
	if c.Addr.IsValid() {
		addr = c.Addr
	}
	if c.Netmask >= 0 {
		bits = c.Netmask
	}
	if c.Gateway.IsValid() {
		gw = c.Gateway
	}
	p := netplan.Plan{
		Prefix4:    netip.PrefixFrom(addr, bits).Masked(),
		Fixed4:     netplan.Fixed{Guest: addr, Gateway: gw, DNS: c.DNSForward},
		HostAlias4: c.MapGuestAddr,
	}
	if err := p.Check(); err != nil {
		return netplan.Plan{}, "", fmt.Errorf("the container's addresses (%s/%d via %s, DNS %s): %w", addr, bits, gw, c.DNSForward, err)
	}
	name := c.IfName
	if name == "" {
		name = h.Iface
	}
	if name == "" {
		name = DefaultIfName
	}
	return p, name, nil
}

// TAPSpec says where and how to create the container's interface: a TAP
// device in the target namespace carrying plan's address and default
// route (configured only with --config-net).
func (c Config) TAPSpec(plan netplan.Plan, ifname string) sandbox.TAPSpec {
	spec := sandbox.TAPSpec{
		NetnsPath:  c.Netns,
		UsernsPath: c.Userns,
		Configure:  c.ConfigNet,
		Iface: tundev.Iface{
			Name:     ifname,
			TAP:      true,
			MTU:      uint32(c.MTU),
			Addrs:    []netip.Prefix{plan.GuestPrefix4()},
			Gateways: []netip.Addr{plan.Gateway4()},
		},
	}
	if c.PID > 0 && spec.UsernsPath == "" {
		spec.UsernsPath = fmt.Sprintf("/proc/%d/ns/user", c.PID)
	}
	return spec
}

// NetnsName names the container's namespace in file names (the audit
// log's): the last element of its path, or pid-PID for a PID operand and
// for a /proc/PID/ns/net path (whose last element, "net", every such
// path shares).
func (c Config) NetnsName() string {
	if c.PID > 0 {
		return fmt.Sprintf("pid-%d", c.PID)
	}
	if rest, ok := strings.CutPrefix(c.Netns, "/proc/"); ok {
		if pid, ok := strings.CutSuffix(rest, "/ns/net"); ok && pid != "" && strings.Trim(pid, "0123456789") == "" {
			return "pid-" + pid
		}
	}
	return filepath.Base(c.Netns)
}
