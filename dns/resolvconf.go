package dns

import (
	"net/netip"
	"strings"
)

// ParseResolvConf returns the nameservers of a resolv.conf as "ip:53"
// strings ("[fe80::1%eth0]:53" for a scoped IPv6 address), in file order.
// Lines starting with '#' or ';' are comments, as is anything after '#' or
// ';' on a line; lines other than "nameserver ADDR" and addresses that do
// not parse are ignored.
func ParseResolvConf(data []byte) []string {
	var out []string
	for line := range strings.Lines(string(data)) {
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a, 53).String())
	}
	return out
}
