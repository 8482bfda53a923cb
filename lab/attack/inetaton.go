package attack

import (
	"net/netip"
	"strconv"
	"strings"
)

// ParseInetAton parses s the way the C library's inet_aton(3) does, which
// is how curl, wget and many other clients read a host that looks
// numeric: one to four parts separated by dots, each decimal, octal (a
// leading 0) or hexadecimal (a leading 0x); the last part fills the bytes
// that remain, so "2852039166", "0xA9FEA9FE", "0251.0376.0251.0376",
// "169.16689662" and "127.1" are all IPv4 addresses. It reports false for
// anything else, including a part too large for the bytes it fills.
func ParseInetAton(s string) (netip.Addr, bool) {
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals [4]uint64
	for i, p := range parts {
		v, ok := parseAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	n := len(parts)
	for i := 0; i < n-1; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
	}
	lastBits := 8 * uint(5-n) // 32, 24, 16 or 8
	if vals[n-1] >= 1<<lastBits {
		return netip.Addr{}, false
	}
	var u uint32
	for i := 0; i < n-1; i++ {
		u |= uint32(vals[i]) << (24 - 8*uint(i))
	}
	u |= uint32(vals[n-1])
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}), true
}

// parseAtonPart reads one part: 0x hexadecimal, leading-0 octal or
// decimal, at most 32 bits.
func parseAtonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	if p == "" || p[0] == '+' || p[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(p, base, 32)
	if err != nil {
		return 0, false
	}
	return v, true
}
