package inbound

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParsePublish parses one `nsgate run --publish` value,
// [HOSTIP:]HOSTPORT:PORT[/tcp|/udp], into a Rule for the worker's address
// (GuestAddr unset). The host address defaults to 127.0.0.1, the protocol
// to tcp; an IPv6 host address goes in brackets: [::1]:8080:80.
func ParsePublish(s string) (Rule, error) {
	p := Rule{Proto: "tcp", HostAddr: netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("--publish %q: %s (want [HOSTIP:]HOSTPORT:PORT[/tcp|/udp])", s, why)
	}
	rest := s
	if i := strings.LastIndexByte(rest, '/'); i >= 0 {
		switch rest[i+1:] {
		case "tcp", "udp":
			p.Proto = rest[i+1:]
		default:
			return bad("protocol must be tcp or udp")
		}
		rest = rest[:i]
	}
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return bad("unterminated [IPv6 address]")
		}
		a, err := netip.ParseAddr(rest[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("bad IPv6 host address")
		}
		p.HostAddr, rest = a, rest[end+2:]
	}
	parts := strings.Split(rest, ":")
	switch len(parts) {
	case 2:
	case 3:
		if s[0] == '[' {
			return bad("too many fields")
		}
		a, err := netip.ParseAddr(parts[0])
		if err != nil || !a.Is4() {
			return bad("bad host address")
		}
		p.HostAddr, parts = a, parts[1:]
	default:
		return bad("wrong number of fields")
	}
	hp, err1 := strconv.ParseUint(parts[0], 10, 16)
	gp, err2 := strconv.ParseUint(parts[1], 10, 16)
	if err1 != nil || err2 != nil || hp == 0 || gp == 0 {
		return bad("ports must be 1 to 65535")
	}
	p.HostPort, p.GuestPort = uint16(hp), uint16(gp)
	return p, nil
}
