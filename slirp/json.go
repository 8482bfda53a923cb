package slirp

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// This file parses API requests the way slirp4netns's JSON library
// (parson) does, so that nsgate accepts and refuses the same requests
// (each rule below was checked against slirp4netns 1.2.0):
//
//   - the request is a C string: it ends at the first NUL byte;
//   - a UTF-8 byte order mark at the start is skipped;
//   - white space is C's isspace set (also \v and \f);
//   - one value is parsed and anything after it is ignored;
//   - duplicate keys in an object, trailing commas, comments, single
//     quotes, unescaped control characters in strings, unknown escapes,
//     lone UTF-16 surrogates, leading zeros and numbers that overflow
//     a double are errors;
//   - bytes that are not valid UTF-8 are taken as they are;
//   - strings are used as C strings: a \u0000 inside ends them;
//   - nesting deeper than maxJSONDepth is an error.
//
// Values are nil (null), bool, float64, string, []any and jsonObject.

// maxJSONDepth is parson's PARSON_MAX_NESTING.
const maxJSONDepth = 2048

var errJSON = errors.New("cannot parse JSON")

type jsonObject map[string]any

// parseJSON parses the first JSON value of b (see the rules above).
func parseJSON(b []byte) (any, error) {
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimPrefix(s, "\xef\xbb\xbf")
	p := jsonParser{s: s}
	p.space()
	return p.value(0)
}

type jsonParser struct {
	s string
	i int
}

func (p *jsonParser) space() {
	for p.i < len(p.s) && isCSpace(p.s[p.i]) {
		p.i++
	}
}

func (p *jsonParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *jsonParser) value(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, errJSON
	}
	switch c := p.peek(); {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return false, nil
	case strings.HasPrefix(p.s[p.i:], "null"):
		p.i += 4
		return nil, nil
	}
	return nil, errJSON
}

func (p *jsonParser) object(depth int) (any, error) {
	p.i++ // '{'
	obj := jsonObject{}
	p.space()
	if p.peek() == '}' {
		p.i++
		return obj, nil
	}
	for {
		if p.peek() != '"' {
			return nil, errJSON
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		key := k.(string)
		if _, dup := obj[key]; dup {
			return nil, errJSON
		}
		p.space()
		if p.peek() != ':' {
			return nil, errJSON
		}
		p.i++
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj[key] = v
		p.space()
		switch p.peek() {
		case ',':
			p.i++
			p.space()
		case '}':
			p.i++
			return obj, nil
		default:
			return nil, errJSON
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	p.i++ // '['
	arr := []any{}
	p.space()
	if p.peek() == ']' {
		p.i++
		return arr, nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.space()
		switch p.peek() {
		case ',':
			p.i++
			p.space()
		case ']':
			p.i++
			return arr, nil
		default:
			return nil, errJSON
		}
	}
}

func (p *jsonParser) str() (any, error) {
	p.i++ // opening quote
	var b strings.Builder
	for {
		if p.i >= len(p.s) {
			return nil, errJSON
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c < 0x20:
			return nil, errJSON
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		// An escape.
		p.i++
		if p.i >= len(p.s) {
			return nil, errJSON
		}
		e := p.s[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, errJSON
			}
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return nil, errJSON // a lone low surrogate
			case r >= 0xd800 && r <= 0xdbff:
				if !strings.HasPrefix(p.s[p.i:], `\u`) {
					return nil, errJSON
				}
				p.i += 2
				lo, ok := p.hex4()
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return nil, errJSON
				}
				r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
			}
			b.WriteRune(r)
		default:
			return nil, errJSON
		}
	}
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(p.s[p.i : p.i+4]) {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			r = r<<4 | rune(unhex(c))
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// number accepts what strtod accepts in decimal and parson lets through:
// -?(digits(.digits*)?|.digits+ after a '-')([eE][+-]?digits)?, without
// leading zeros, and finite.
func (p *jsonParser) number() (any, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	neg := p.peek() == '-'
	if neg {
		p.i++
	}
	intStart := p.i
	nInt := digits()
	if nInt > 1 && p.s[intStart] == '0' {
		return nil, errJSON // leading zero
	}
	nFrac := 0
	if p.peek() == '.' {
		p.i++
		nFrac = digits()
		if nInt == 0 && (!neg || nFrac == 0) {
			return nil, errJSON
		}
	} else if nInt == 0 {
		return nil, errJSON
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		save := p.i
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if digits() == 0 {
			p.i = save // strtod stops before a bare 'e'; the parser then fails on it
			return nil, errJSON
		}
	}
	f, err := strconv.ParseFloat(p.s[start:p.i], 64)
	if math.IsInf(f, 0) || (err != nil && !errors.Is(err, strconv.ErrRange)) {
		return nil, errJSON
	}
	return f, nil
}

// cString returns s up to its first NUL, as C code sees it.
func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// getString is parson's json_object_get_string: the value if it is a
// string, else not found.
func (o jsonObject) getString(key string) (string, bool) {
	s, ok := o[key].(string)
	return cString(s), ok
}

// dotget is parson's json_object_dotget_value for "a.b".
func (o jsonObject) dotget(outer, inner string) (any, bool) {
	sub, ok := o[outer].(jsonObject)
	if !ok {
		return nil, false
	}
	v, ok := sub[inner]
	return v, ok
}

// dotString is json_object_dotget_string.
func (o jsonObject) dotString(outer, inner string) (string, bool) {
	v, _ := o.dotget(outer, inner)
	s, ok := v.(string)
	return cString(s), ok
}

// dotNumber is json_object_dotget_number: 0 unless the value is a number.
func (o jsonObject) dotNumber(outer, inner string) float64 {
	v, _ := o.dotget(outer, inner)
	f, _ := v.(float64)
	return f
}
