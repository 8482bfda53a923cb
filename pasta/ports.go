package pasta

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nsgate/nsgate/inbound"
)

// MaxForwards bounds the ports one command line may forward: each is a
// listening socket on the host.
const MaxForwards = 1024

// ParsePorts parses one -t or -u value (flag names it in messages) into
// inbound rules, one per forwarded port, for protocol proto ("tcp" or
// "udp"). The syntax is pasta's:
//
//	none                       nothing
//	[ADDR/]SPEC[,SPEC...]      SPEC: FIRST[-LAST][:TOFIRST[-TOLAST]]
//
// Podman writes [ADDR/]H-H:C-C, one value per -p. A mapped range must be
// as long as its source; a single TOFIRST shifts the whole range; no ADDR
// means all of the host's IPv4 addresses (0.0.0.0). auto,
// all, excluded ports (~PORT) and ADDR%INTERFACE are refused with a
// message saying so: nsgate forwards only the ports it is told.
func ParsePorts(proto, flag, spec string) ([]inbound.Rule, error) {
	bad := func(format string, args ...any) ([]inbound.Rule, error) {
		return nil, fmt.Errorf("%s %s: %s", flag, printable(spec), fmt.Sprintf(format, args...))
	}
	switch spec {
	case "none":
		return nil, nil
	case "auto", "all":
		return bad("automatic forwarding is not supported by nsgate pasta; name the ports (podman -p)")
	case "":
		return bad("empty port specification")
	}
	host := netip.IPv4Unspecified() // no address: all of the host's IPv4 ones
	list := spec
	if i := strings.LastIndexByte(spec, '/'); i >= 0 {
		a := spec[:i]
		if strings.Contains(a, "%") {
			return bad("binding to an interface (ADDR%%IFACE) is not supported by nsgate pasta")
		}
		var err error
		if host, err = netip.ParseAddr(a); err != nil || host.Zone() != "" {
			return bad("invalid address %q", printable(a))
		}
		host = host.Unmap()
		list = spec[i+1:]
	}
	var rules []inbound.Rule
	for _, item := range strings.Split(list, ",") {
		if strings.HasPrefix(item, "~") {
			return bad("excluding ports (~) is not supported by nsgate pasta")
		}
		from, to, mapped := strings.Cut(item, ":")
		first, last, err := portRange(from)
		if err != nil {
			return bad("%v", err)
		}
		tfirst := first
		if mapped {
			var tlast uint16
			if tfirst, tlast, err = portRange(to); err != nil {
				return bad("%v", err)
			}
			switch {
			case strings.Contains(to, "-") && tlast-tfirst != last-first:
				return bad("port range %s and its target %s differ in length", from, to)
			case int(tfirst)+int(last-first) > 65535:
				return bad("target range past port 65535")
			}
		}
		if len(rules)+int(last-first)+1 > MaxForwards {
			return bad("more than %d ports", MaxForwards)
		}
		for p := int(first); p <= int(last); p++ {
			rules = append(rules, inbound.Rule{
				Proto:     proto,
				HostAddr:  host,
				HostPort:  uint16(p),
				GuestPort: uint16(int(tfirst) + p - int(first)),
			})
		}
	}
	return rules, nil
}

// portRange parses FIRST[-LAST].
func portRange(s string) (first, last uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if first, err = port(a); err != nil {
		return 0, 0, err
	}
	last = first
	if isRange {
		if last, err = port(b); err != nil {
			return 0, 0, err
		}
		if last < first {
			return 0, 0, fmt.Errorf("invalid port range %s", printable(s))
		}
	}
	return first, last, nil
}

func port(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("invalid port %q (want 1 to 65535)", printable(s))
	}
	return uint16(n), nil
}

// addPorts adds -t or -u rules.
func (c *Config) addPorts(proto, flag, spec string) error {
	rules, err := ParsePorts(proto, flag, spec)
	if err != nil {
		return err
	}
	if len(c.TCP)+len(c.UDP)+len(rules) > MaxForwards {
		return fmt.Errorf("%s %s: more than %d ports in all", flag, printable(spec), MaxForwards)
	}
	if proto == "tcp" {
		c.TCP = append(c.TCP, rules...)
	} else {
		c.UDP = append(c.UDP, rules...)
	}
	return nil
}
