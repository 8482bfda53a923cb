package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestUnwrap(t *testing.T) {
	tests := []struct {
		why  string
		in   string
		want []string
	}{
		{"IPv4 is itself", "192.0.2.45", []string{"192.0.2.45"}},
		{"v4-mapped is the IPv4 address", "::ffff:192.0.2.45", []string{"192.0.2.45"}},
		{"v4-compatible embeds IPv4", "::192.0.2.45", []string{"::c000:22d", "192.0.2.45"}},
		{"the unspecified address is not v4-compatible", "::", []string{"::"}},
		{"the loopback is not v4-compatible", "::1", []string{"::1"}},
		{"::2 is v4-compatible", "::2", []string{"::2", "0.0.0.2"}},
		{"NAT64 well-known prefix", "64:ff9b::192.0.2.45", []string{"64:ff9b::c000:22d", "192.0.2.45"}},
		{"NAT64 needs the rest of the /96 zero", "64:ff9b:0:0:1::c000:22d", []string{"64:ff9b::1:0:c000:22d"}},
		{"local-use NAT64 in the /96 layout", "64:ff9b:1::192.0.2.45", []string{"64:ff9b:1::c000:22d", "192.0.2.45", "0.0.0.0", "0.0.0.192"}},
		{"local-use NAT64 in the /48 layout", "64:ff9b:1:c000:2:2d00::", []string{"64:ff9b:1:c000:2:2d00::", "0.0.0.0", "192.0.2.45", "0.2.45.0", "2.45.0.0"}},
		{"local-use NAT64 with a u octet set has only the /96 reading", "64:ff9b:1:c000:ff02:2d00::", []string{"64:ff9b:1:c000:ff02:2d00::", "0.0.0.0"}},
		{"6to4", "2002:c000:22d::1", []string{"2002:c000:22d::1", "192.0.2.45"}},
		{"Teredo client is inverted", "2001:0:4136:e378:8000:63bf:3fff:fdd2", []string{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"}},
		{"documentation IPv6 is not Teredo", "2001:db8::1", []string{"2001:db8::1"}},
		{"a zone is dropped", "fe80::1%eth0", []string{"fe80::1"}},
		{"plain IPv6 is itself", "2606:4700::1", []string{"2606:4700::1"}},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			got := Unwrap(netip.MustParseAddr(tt.in))
			var gs []string
			for _, a := range got {
				gs = append(gs, a.String())
			}
			if !slices.Equal(gs, tt.want) {
				t.Errorf("Unwrap(%s) = %q, want %q", tt.in, gs, tt.want)
			}
		})
	}
	if got := Unwrap(netip.Addr{}); got != nil {
		t.Errorf("Unwrap(zero) = %v, want nil", got)
	}
}

func TestBuiltinSets(t *testing.T) {
	tests := []struct {
		why      string
		addr     string
		metadata bool
		special  bool
	}{
		{"the classic metadata address", "169.254.169.254", true, true},
		{"Alibaba metadata is in shared space", "100.100.100.200", true, true},
		{"Azure wire server is public space", "168.63.129.16", true, false},
		{"Oracle metadata", "192.0.0.192", true, true},
		{"AWS IPv6 metadata", "fd00:ec2::254", true, true},
		{"AWS IPv6 metadata with a zone", "fd00:ec2::23%eth0", true, true},
		{"metadata inside NAT64", "64:ff9b::168.63.129.16", true, false},
		{"metadata inside Teredo", "2001::5601:5601", true, true},
		{"a neighbour of the metadata address", "169.254.169.253", false, true},
		{"loopback in 6to4", "2002:7f00:1::", false, true},
		{"public IPv4", "203.0.113.9", false, false},
		{"public IPv6", "2001:db8::1", false, false},
		{"broadcast", "255.255.255.255", false, true},
		{"just below multicast", "223.255.255.255", false, false},
		{"IPv6 multicast", "ff05::2", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			if got := IsMetadataAddr(a); got != tt.metadata {
				t.Errorf("IsMetadataAddr(%s) = %v", a, got)
			}
			if got := IsSpecial(a); got != tt.special {
				t.Errorf("IsSpecial(%s) = %v", a, got)
			}
		})
	}
	for _, name := range []string{"metadata", "metadata.google.internal", "METADATA.goog.", "instance-data", "instance-data.ec2.internal"} {
		if !IsMetadataName(name) {
			t.Errorf("IsMetadataName(%q) = false", name)
		}
	}
	for _, name := range []string{"metadata.test", "x.metadata.google.internal", "", "meta data"} {
		if IsMetadataName(name) {
			t.Errorf("IsMetadataName(%q) = true", name)
		}
	}
}

func TestNormalizeName(t *testing.T) {
	tests := []struct {
		why  string
		in   string
		want string // "" means an error containing errSub
		err  string
	}{
		{"lower case", "App.TEST", "app.test", ""},
		{"one trailing dot is removed", "app.test.", "app.test", ""},
		{"a single label", "localhost", "localhost", ""},
		{"IDN to punycode", "Bücher.test", "xn--bcher-kva.test", ""},
		{"punycode stays", "xn--bcher-kva.test", "xn--bcher-kva.test", ""},
		{"full-width letters and dots map", "ＡＰＰ。test", "app.test", ""},
		{"digits inside are fine", "1password.test", "1password.test", ""},
		{"a 63-byte label is fine", strings.Repeat("a", 63) + ".test", strings.Repeat("a", 63) + ".test", ""},
		{"empty", "", "", "empty name"},
		{"only a dot", ".", "", "empty name"},
		{"two trailing dots", "app.test..", "", "empty label"},
		{"empty label", "a..test", "", "empty label"},
		{"a 64-byte label", strings.Repeat("a", 64) + ".test", "", "label longer than 63"},
		{"too long", strings.Repeat("abcdefghi.", 26) + "test", "", "longer than 253"},
		{"underscore", "_dmarc.app.test", "", "invalid name"},
		{"space", "a b.test", "", "invalid name"},
		{"leading hyphen", "-a.test", "", "invalid name"},
		{"bad punycode", "xn--zz.test", "", "invalid name"},
		{"not UTF-8 (its U+FFFD would be a label the parser refuses)", "\xb0.test", "", "not UTF-8"},
		{"wildcard", "*.app.test", "", "invalid name"},
		{"IPv4 literal", "127.0.0.1", "", "is an IP address"},
		{"IPv6 literal", "::1", "", "is an IP address"},
		{"bracketed IPv6 literal", "[::1]", "", "is an IP address"},
		{"short IPv4 form", "127.1", "", "looks like an IP address"},
		{"decimal IPv4 form", "2130706433", "", "looks like an IP address"},
		{"hex IPv4 form", "0x7F000001", "", "looks like an IP address"},
		{"dotted hex IPv4 form", "0x7f.0.0.0x1", "", "looks like an IP address"},
		{"numeric last label", "app.123", "", "looks like an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			got, err := NormalizeName(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("NormalizeName(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("NormalizeName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
			if again, err := NormalizeName(got); err != nil || again != got {
				t.Errorf("NormalizeName is not idempotent on %q: %q, %v", got, again, err)
			}
			if !isCanonicalFast(got) {
				t.Errorf("isCanonicalFast(%q) = false for a normalized name", got)
			}
		})
	}
}

// TestSpecialRangeEdges checks both ends of every special range and the
// addresses just outside them, so the first-octet shortcut cannot hide one.
func TestSpecialRangeEdges(t *testing.T) {
	for _, r := range specialRanges {
		first := r.prefix.Masked().Addr()
		b := first.AsSlice()
		for i := r.prefix.Bits(); i < len(b)*8; i++ {
			b[i/8] |= 1 << (7 - i%8)
		}
		last, _ := netip.AddrFromSlice(b)
		for _, a := range []netip.Addr{first, last} {
			if specialRangeOf(a) == nil || !IsSpecial(a) {
				t.Errorf("%s (in %s) is not special", a, r.prefix)
			}
		}
		for _, a := range []netip.Addr{first.Prev(), last.Next()} {
			if !a.IsValid() || a.Is4() != first.Is4() {
				continue
			}
			inAny := false
			for _, o := range specialRanges {
				inAny = inAny || o.prefix.Contains(a)
			}
			if got := specialRangeOf(a) != nil; got != inAny {
				t.Errorf("specialRangeOf(%s) = %v, want %v", a, got, inAny)
			}
		}
	}
}
