package sealed

import "net"

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
