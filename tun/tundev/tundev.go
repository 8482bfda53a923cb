// Package tundev opens the worker's TUN (or TAP) device inside its network
// namespace and configures its addresses and routes. It is what the
// sandbox's init needs of the device, and nothing of the gateway: no gVisor,
// so that init (cmd/nsgate-init) stays a small program that starts fast.
// Package tun wraps the descriptor in the gateway's link endpoint.
package tundev

import "net/netip"

// DefaultMTU is the MTU of the worker's device unless --mtu says otherwise.
// It matches slirp4netns's largest practical value.
const DefaultMTU = 65520

// Iface describes how the worker's interface is configured.
type Iface struct {
	Name  string         // device name, e.g. "tun0"
	MTU   uint32         // link MTU
	Addrs []netip.Prefix // addresses with their prefix length, e.g. 10.0.2.100/24
	// Gateways are the next hops of the default routes, one per family
	// present in Addrs (e.g. 10.0.2.2 and fd00::2).
	Gateways []netip.Addr
	// TAP selects an Ethernet (L2) device instead of an IP (L3) one.
	TAP bool
	// MAC sets the TAP device's hardware address when non-empty.
	MAC string
}
