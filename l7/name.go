package l7

// DNS name limits, in text form without a trailing dot.
const (
	maxName  = 253
	maxLabel = 63
)

// nameProblem is why a name is refused; callers turn it into their
// protocol's Error.
type nameProblem uint8

const (
	nameOK nameProblem = iota
	nameEmpty
	nameChar
	nameEmptyLabel
	nameLong
)

// normName normalizes the host name in p in place: ASCII letters are
// lower-cased and one trailing dot is dropped (the returned length excludes
// it). It accepts only letters, digits, '-', '_' and '.', non-empty labels
// of at most 63 bytes and at most 253 bytes in all. Internationalized names
// must already be punycode, as clients send them; IPv4 literals pass (they
// are never equal to a flow's name).
func normName(p []byte) (int, nameProblem) {
	n := len(p)
	if n > 0 && p[n-1] == '.' {
		n--
	}
	if n == 0 {
		return 0, nameEmpty
	}
	if n > maxName {
		return 0, nameLong
	}
	label := 0
	for i := 0; i < n; i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
			p[i] = c + ('a' - 'A')
		case c == '.':
			if label == 0 {
				return 0, nameEmptyLabel
			}
			label = 0
			continue
		default:
			return 0, nameChar
		}
		label++
		if label > maxLabel {
			return 0, nameLong
		}
	}
	if label == 0 {
		return 0, nameEmptyLabel
	}
	return n, nameOK
}

// isTchar reports whether c is an HTTP token character (RFC 9110 §5.6.2).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// lowerASCII returns c lower-cased if it is an ASCII letter.
func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// equalFold reports whether b equals the lower-case ASCII string s,
// ignoring ASCII case in b.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lowerASCII(b[i]) != s[i] {
			return false
		}
	}
	return true
}
