package intercept

import (
	"fmt"
	"html"
	"net/url"
	"strings"
)

// An echoCode writes one byte of a secret the way one encoding does.
type echoCode func(c byte) string

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// echoCodes are the encodings of an echo that every client decodes back to
// the secret, byte by byte: the secret as it is; JSON-escaped (Go's
// encoder, which escapes <, > and & too, with and without '/' escaped as
// PHP's does); percent-encoded (a query's, a path segment's, and every
// byte but letters and digits); HTML-escaped (the five entities,
// html/template's text escaping, and every byte but letters and digits as
// a decimal and as a hex character reference); and UTF-16 in either byte
// order. A secret is printable ASCII (NewVault); letters and digits pass
// every one but UTF-16 unchanged.
var echoCodes = []echoCode{
	func(c byte) string { return string(c) },
	func(c byte) string { return jsonByte(c, false) },
	func(c byte) string { return jsonByte(c, true) },
	func(c byte) string { return url.QueryEscape(string(c)) },
	func(c byte) string { return url.PathEscape(string(c)) },
	func(c byte) string {
		if alnum(c) {
			return string(c)
		}
		return fmt.Sprintf("%%%02X", c)
	},
	func(c byte) string { return html.EscapeString(string(c)) },
	func(c byte) string {
		switch c {
		case '"':
			return "&#34;"
		case '&':
			return "&amp;"
		case '\'':
			return "&#39;"
		case '+':
			return "&#43;"
		case '<':
			return "&lt;"
		case '>':
			return "&gt;"
		}
		return string(c)
	},
	func(c byte) string {
		if alnum(c) {
			return string(c)
		}
		return fmt.Sprintf("&#%d;", c)
	},
	func(c byte) string {
		if alnum(c) {
			return string(c)
		}
		return fmt.Sprintf("&#x%x;", c)
	},
	func(c byte) string { return string([]byte{c, 0}) },
	func(c byte) string { return string([]byte{0, c}) },
}

// jsonByte is c inside a JSON string as Go's encoder writes it, and with
// '/' escaped too (PHP's json_encode) when slash.
func jsonByte(c byte, slash bool) string {
	switch c {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '<':
		return `\u003c`
	case '>':
		return `\u003e`
	case '&':
		return `\u0026`
	case '/':
		if slash {
			return `\/`
		}
	}
	return string(c)
}

// encode writes s with code.
func (code echoCode) encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(code(s[i]))
	}
	return b.String()
}

// echoForms returns the forms of secret that echoCodes make, without
// repeats, each with ph in the same form (the scrubs put it in the
// secret's place): the search of a secret with no letter or digit to
// anchor on (echoSearch).
func echoForms(secret, ph string) (forms, phs []string) {
	for _, code := range echoCodes {
		if f := code.encode(secret); !containsFold(forms, f) {
			forms, phs = append(forms, f), append(phs, code.encode(ph))
		}
	}
	return forms, phs
}

func containsFold(ss []string, s string) bool {
	for _, x := range ss {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// utf16 is ASCII s in UTF-16, little-endian or big-endian.
func utf16(s string, bigEndian bool) string {
	b := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		if bigEndian {
			b = append(b, 0, s[i])
		} else {
			b = append(b, s[i], 0)
		}
	}
	return string(b)
}
