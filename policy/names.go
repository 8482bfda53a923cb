package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// NormalizeName returns the canonical form of a DNS name: lower case, the
// trailing dot removed, internationalized labels converted to punycode with
// the IDNA Lookup profile (UTS #46, STD3 rules: letters, digits and hyphens
// only). It returns an error for an empty or over-long name, an empty or
// over-long label, and for a name that is an IP address or that a URL parser
// would read as one (its last label is a number, such as "127.1" or
// "0x7f000001"). It is safe for concurrent use.
func NormalizeName(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty name")
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return "", fmt.Errorf("%q is an IP address, not a name", s)
	}
	in := strings.TrimSuffix(s, ".")
	if in == "" {
		return "", errors.New("empty name")
	}
	if strings.HasSuffix(in, ".") {
		return "", fmt.Errorf("invalid name %q: empty label", s)
	}
	if !utf8.ValidString(in) {
		// The mapping would turn the bad bytes into U+FFFD, whose
		// punycode label this function itself refuses when read back.
		return "", fmt.Errorf("invalid name %q: not UTF-8", s)
	}
	out, err := idna.Lookup.ToASCII(in)
	if err != nil {
		return "", fmt.Errorf("invalid name %q: %w", s, err)
	}
	// Mapping may turn an ideographic full stop at the end into a dot.
	out = strings.TrimSuffix(out, ".")
	if err := checkLabels(out); err != nil {
		return "", fmt.Errorf("invalid name %q: %w", s, err)
	}
	return out, nil
}

// checkLabels validates an ASCII name without a trailing dot.
func checkLabels(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("longer than %d characters", maxNameLen)
	}
	last := ""
	for rest := s; ; {
		label, tail, more := strings.Cut(rest, ".")
		if label == "" {
			return errors.New("empty label")
		}
		if len(label) > maxLabelLen {
			return fmt.Errorf("label longer than %d characters", maxLabelLen)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("character %q not allowed", c)
			}
		}
		last = label
		if !more {
			break
		}
		rest = tail
	}
	if isNumericLabel(last) {
		return errors.New("looks like an IP address (its last label is a number); use a cidr rule for addresses")
	}
	return nil
}

// isNumericLabel reports whether a URL parser would take a name ending in
// label for an IPv4 address: all decimal digits, or 0x followed by hex digits.
func isNumericLabel(label string) bool {
	if h, ok := strings.CutPrefix(label, "0x"); ok {
		for i := 0; i < len(h); i++ {
			c := h[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(label); i++ {
		if label[i] < '0' || label[i] > '9' {
			return false
		}
	}
	return label != ""
}

// isCanonicalFast reports whether s already looks normalized, so that the
// decision path can use it as is without allocating: ASCII lower case,
// digits, hyphens and dots, no trailing dot, labels of 1 to 63 bytes. It is a
// cheap filter, not a validation: a name it accepts that NormalizeName would
// reject can only match rules by their (valid) names.
func isCanonicalFast(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			n++
			if n > maxLabelLen {
				return false
			}
		case c == '.':
			if n == 0 {
				return false
			}
			n = 0
		default:
			return false
		}
	}
	return n > 0
}

// canonHost returns the name to decide for a flow or lookup: s itself when
// it is already canonical (no allocation), else NormalizeName(s).
func canonHost(s string) (string, error) {
	if isCanonicalFast(s) {
		return s, nil
	}
	return NormalizeName(s)
}

// parseHostPattern normalizes a rule's host: an exact name or "*." followed
// by a name. wild reports the wildcard form; name is without the "*.".
func parseHostPattern(s string) (name string, wild bool, err error) {
	rest, wild := strings.CutPrefix(s, "*.")
	if strings.Contains(rest, "*") || s == "*" {
		return "", false, errors.New(`"*" is allowed only as the whole first label, as in *.example.test`)
	}
	if _, perr := netip.ParseAddr(strings.Trim(s, "[]")); perr == nil {
		return "", false, fmt.Errorf("%q is an IP address; use a cidr rule such as cidr: %s", s, hostPrefix(s))
	}
	if i := strings.Index(rest, "://"); i >= 0 {
		host, _, _ := strings.Cut(rest[i+3:], "/")
		host, _, _ = strings.Cut(host, ":")
		return "", false, fmt.Errorf("%q is a URL; a host is a name, as in host: %s (the port goes in ports)", s, host)
	}
	if h, p, ok := strings.Cut(rest, ":"); ok && p != "" && strings.Trim(p, "0123456789") == "" {
		return "", false, fmt.Errorf("%q has a port; write host: %s and ports: [%s]", s, h, p)
	}
	if h, _, ok := strings.Cut(rest, "/"); ok {
		return "", false, fmt.Errorf("%q has a path; a host is a name, as in host: %s", s, h)
	}
	name, err = NormalizeName(rest)
	if err != nil {
		return "", false, err
	}
	return name, wild, nil
}

func hostPrefix(s string) string {
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return s
	}
	a = a.WithZone("").Unmap()
	return netip.PrefixFrom(a, a.BitLen()).String()
}
