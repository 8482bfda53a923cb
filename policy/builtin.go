package policy

import "net/netip"

// The built-in sets (docs/policy.md lists them). These tables are filled once when the package
// is initialized and never written again, so reading them needs no lock.

// metadataAddr is a cloud metadata address and its precomputed reason.
type metadataAddr struct {
	addr   netip.Addr
	reason string
}

var metadataAddrs = func() []metadataAddr {
	var out []metadataAddr
	for _, s := range []string{
		"169.254.169.254", // AWS, GCP, Azure, OpenStack, ...
		"169.254.170.2",   // AWS ECS task metadata
		"169.254.170.23",  // AWS EKS pod identity
		"fd00:ec2::254",   // AWS IMDS over IPv6
		"fd00:ec2::23",    // AWS EKS pod identity over IPv6
		"100.100.100.200", // Alibaba Cloud
		"192.0.0.192",     // Oracle Cloud
		"168.63.129.16",   // Azure wire server
	} {
		a := netip.MustParseAddr(s)
		out = append(out, metadataAddr{a, s + " is a cloud metadata address"})
	}
	return out
}()

// metadataName is a cloud metadata name and its precomputed reason.
type metadataName struct {
	name   string
	reason string
}

var metadataNames = func() []metadataName {
	var out []metadataName
	for _, s := range []string{
		"metadata",
		"metadata.google.internal",
		"metadata.goog",
		"instance-data",
		"instance-data.ec2.internal",
	} {
		out = append(out, metadataName{s, s + " is a cloud metadata name"})
	}
	return out
}()

// specialRange is a guarded range with a word on what it is.
type specialRange struct {
	prefix netip.Prefix
	what   string
}

var specialRanges = func() []specialRange {
	var out []specialRange
	for _, r := range [][2]string{
		{"0.0.0.0/8", "this network"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared address space"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"},
		{"255.255.255.255/32", "broadcast"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"fc00::/7", "unique local"},
		{"fe80::/10", "link-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, specialRange{netip.MustParsePrefix(r[0]), r[1]})
	}
	return out
}()

// maxUnwrap bounds how many addresses unwrapInto yields: the address itself
// plus at most four readings of a local-use NAT64 address.
const maxUnwrap = 5

// Unwrap returns a itself (zone removed, IPv4-mapped form unmapped) followed
// by every IPv4 address embedded in it:
//   - IPv4-compatible ::a.b.c.d (not :: or ::1);
//   - NAT64 64:ff9b::/96 (last 32 bits);
//   - local-use NAT64 64:ff9b:1::/48, read with each RFC 6052 layout that
//     fits inside it (/48, /56, /64 when the u octet is zero, and /96);
//   - 6to4 2002::/16 (bits 16 to 47);
//   - Teredo 2001::/32 (the client: the last 32 bits inverted).
//
// It returns nil for the zero Addr. Each address appears once.
func Unwrap(a netip.Addr) []netip.Addr {
	var buf [maxUnwrap]netip.Addr
	n := unwrapInto(a, &buf)
	if n == 0 {
		return nil
	}
	out := make([]netip.Addr, n)
	copy(out, buf[:n])
	return out
}

// unwrapInto is Unwrap without allocating.
func unwrapInto(a netip.Addr, out *[maxUnwrap]netip.Addr) int {
	if !a.IsValid() {
		return 0
	}
	a = a.WithZone("").Unmap()
	out[0] = a
	n := 1
	if a.Is4() {
		return n
	}
	b := a.As16()
	add := func(x [4]byte) {
		v := netip.AddrFrom4(x)
		for i := 0; i < n; i++ {
			if out[i] == v {
				return
			}
		}
		out[n] = v
		n++
	}
	last := [4]byte{b[12], b[13], b[14], b[15]}
	switch {
	case allZero(b[:12]):
		if !(allZero(b[12:15]) && b[15] <= 1) {
			add(last)
		}
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && allZero(b[4:12]):
		add(last)
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 && b[5] == 0x01:
		add(last)
		if b[8] == 0 {
			add([4]byte{b[6], b[7], b[9], b[10]})   // /48
			add([4]byte{b[7], b[9], b[10], b[11]})  // /56
			add([4]byte{b[9], b[10], b[11], b[12]}) // /64
		}
	case b[0] == 0x20 && b[1] == 0x02:
		add([4]byte{b[2], b[3], b[4], b[5]})
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00:
		add([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
	}
	return n
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// IsMetadataAddr reports whether a, or an address Unwrap finds in it, is in
// the cloud metadata set.
func IsMetadataAddr(a netip.Addr) bool {
	var buf [maxUnwrap]netip.Addr
	n := unwrapInto(a, &buf)
	for _, x := range buf[:n] {
		if metadataReason(x) != "" {
			return true
		}
	}
	return false
}

// metadataReason returns the reason for a metadata address (zone-free,
// unmapped), or "" when a is not one.
func metadataReason(a netip.Addr) string {
	for i := range metadataAddrs {
		if metadataAddrs[i].addr == a {
			return metadataAddrs[i].reason
		}
	}
	return ""
}

// IsMetadataName reports whether name, once normalized, is a cloud metadata
// name. A name that does not normalize is not one.
func IsMetadataName(name string) bool {
	n, err := canonHost(name)
	return err == nil && metadataNameReason(n) != ""
}

// metadataNameReason returns the reason for a canonical metadata name, or "".
func metadataNameReason(name string) string {
	for i := range metadataNames {
		if metadataNames[i].name == name {
			return metadataNames[i].reason
		}
	}
	return ""
}

// IsSpecial reports whether a, or an address Unwrap finds in it, is in the
// built-in special ranges. The gateway's own subnets are not built
// in: see Policy.WithLocal.
func IsSpecial(a netip.Addr) bool {
	var buf [maxUnwrap]netip.Addr
	n := unwrapInto(a, &buf)
	for _, x := range buf[:n] {
		if specialRangeOf(x) != nil {
			return true
		}
	}
	return false
}

// specialFirstOctet marks the first octets of IPv4 addresses that may be in
// a special range, so most public addresses skip the scan.
var specialFirstOctet = func() (t [256]bool) {
	for _, r := range specialRanges {
		if !r.prefix.Addr().Is4() {
			continue
		}
		lo := r.prefix.Addr().As4()[0]
		span := 1
		if r.prefix.Bits() < 8 {
			span = 1 << (8 - r.prefix.Bits())
		}
		for i := range span {
			t[int(lo)+i] = true
		}
	}
	return t
}()

// specialRangeOf returns the narrowest special range holding a (zone-free,
// unmapped): 255.255.255.255 is in 240.0.0.0/4 too, but its range is the
// broadcast /32, and only a rule inside that opens it.
func specialRangeOf(a netip.Addr) *specialRange {
	if a.Is4() && !specialFirstOctet[a.As4()[0]] {
		return nil
	}
	var best *specialRange
	for i := range specialRanges {
		sr := &specialRanges[i]
		if sr.prefix.Contains(a) && (best == nil || sr.prefix.Bits() > best.prefix.Bits()) {
			best = sr
		}
	}
	return best
}
