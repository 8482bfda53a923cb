package intercept

import (
	"bytes"
	"fmt"
	"strings"
)

// foldPat is a secret prepared for a fast search that ignores ASCII case,
// for the scrubs that read every byte of a response: an anchor byte of the
// secret, the rarest in ordinary text, is found with bytes.IndexByte (in
// both cases for a letter) and each candidate compared whole with
// bytes.EqualFold.
type foldPat struct {
	s      []byte
	k      int  // the anchor's offset in s
	lo, up byte // the anchor in lower and upper case (the same byte for a non-letter)
}

func newFoldPat(s string) foldPat {
	p := foldPat{s: []byte(s)}
	best := 99
	for i := 0; i < len(s); i++ {
		if r := anchorRank(s[i]); r < best {
			best, p.k = r, i
		}
	}
	if len(s) > 0 {
		p.lo, p.up = foldByte(s[p.k])
	}
	return p
}

// anchorRank orders bytes by how often ordinary response bodies (JSON,
// HTML, text) hold them, rarest first; a letter ranks below what its two
// cases cost (two scans).
func anchorRank(c byte) int {
	switch {
	case c == 0:
		return 7 // UTF-16's every other byte, and binary data's most common
	case '0' <= c && c <= '9':
		return 3
	case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		switch c | 0x20 {
		case 'j', 'q', 'x', 'z', 'k', 'v', 'w', 'y':
			return 5
		}
		return 6
	}
	switch c {
	case ' ', '"', ',', ':', '.', '/', '-', '_', '=', '<', '>', '{', '}', '\n', '\r', '\t':
		return 4
	}
	return 1
}

// index returns the offset of the first match of p in b, ASCII case
// ignored, or -1.
func (p *foldPat) index(b []byte) int {
	n := len(p.s)
	if n == 0 {
		return 0
	}
	if len(b) < n {
		return -1
	}
	// hay[i] is the anchor of a match starting at b[i].
	hay := b[p.k : len(b)-(n-1-p.k)]
	nl, nu := -2, -2 // the next anchor in each case at or past from; -1: none left
	for from := 0; from < len(hay); {
		if nl != -1 && nl < from {
			nl = nextByte(hay, from, p.lo)
		}
		if p.up == p.lo {
			nu = nl
		} else if nu != -1 && nu < from {
			nu = nextByte(hay, from, p.up)
		}
		i := nl
		if nu >= 0 && (i < 0 || nu < i) {
			i = nu
		}
		if i < 0 {
			return -1
		}
		// The first and last bytes first (|0x20 folds a letter's case
		// and keeps equal bytes equal): most candidates end there.
		if b[i]|0x20 == p.s[0]|0x20 && b[i+n-1]|0x20 == p.s[n-1]|0x20 && bytes.EqualFold(b[i:i+n], p.s) {
			return i
		}
		from = i + 1
	}
	return -1
}

func nextByte(hay []byte, from int, c byte) int {
	if j := bytes.IndexByte(hay[from:], c); j >= 0 {
		return from + j
	}
	return -1
}

// replaceFoldBytes appends b to dst with every match of each pats[i] (any
// ASCII case) replaced by phs[i], the patterns in turn; the second result
// says whether any matched (dst is then the rewritten b, else dst holds b
// unchanged).
func replaceFoldBytes(dst, b []byte, pats []foldPat, phs []string) ([]byte, bool) {
	found := false
	for i := range pats {
		p := &pats[i]
		j := p.index(b)
		if j < 0 {
			continue
		}
		// A secret is rare in a response: a new buffer for each that is
		// found, and the next pattern reads what this one wrote.
		found = true
		var out []byte
		for j >= 0 {
			out = append(out, b[:j]...)
			out = append(out, phs[i]...)
			b = b[j+len(p.s):]
			j = p.index(b)
		}
		b = append(out, b...)
	}
	return append(dst, b...), found
}

// echoSearch finds the echoes of one secret that clients decode back to
// it, in one scan: each byte of the secret that is a letter or a digit as
// it is, in either case, and each other byte in any of the spellings
// encoders write for it (spellings: percent, JSON and JavaScript escapes,
// HTML references with or without leading zeros, named entities, '+' for
// a space), mixed as any encoder mixes them; a match is anchored on the
// secret's rarest letter or digit (anchorRank), found with
// bytes.IndexByte. UTF-16 (in
// either byte order) is searched apart. A secret without a letter or
// digit has no anchor: each of its whole forms (echoForms) is searched on
// its own.
type echoSearch struct {
	secret []byte
	spell  []spelled // for each byte of the secret: its spellings (none: a letter or digit)
	ph     []byte    // the placeholder: letters and digits, valid in every form
	k      int       // the anchor's offset in the secret
	lo, up byte
	// apart are searched on their own when there is no anchor
	// (anchorless): every whole form (echoForms).
	apart      []foldPat
	apartPhs   []string
	anchorless bool
	maxLen     int // the longest match
}

func newEchoSearch(secret, ph string) *echoSearch {
	e := &echoSearch{secret: []byte(secret), ph: []byte(ph), k: -1}
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if alnum(c) {
			e.spell = append(e.spell, spelled{})
			if e.k < 0 || anchorRank(c) < anchorRank(secret[e.k]) {
				e.k = i
			}
			e.maxLen++
			continue
		}
		sp := spelled{}
		l := 0
		for _, x := range spellings(c) {
			sp.forms = append(sp.forms, []byte(x))
			lo, _ := foldByte(x[0])
			g := strings.IndexByte(sp.firsts, lo)
			if g < 0 {
				g = len(sp.firsts)
				sp.firsts += string(lo)
				sp.groups = append(sp.groups, nil)
			}
			sp.groups[g] = append(sp.groups[g], []byte(x))
			l = max(l, len(x))
		}
		e.spell = append(e.spell, sp)
		e.maxLen += l
	}
	e.anchorless = e.k < 0
	if e.anchorless {
		forms, phs := echoForms(secret, ph)
		for i, f := range forms {
			e.apart, e.apartPhs = append(e.apart, newFoldPat(f)), append(e.apartPhs, phs[i])
			e.maxLen = max(e.maxLen, len(f))
		}
		return e
	}
	e.lo, e.up = foldByte(secret[e.k])
	e.maxLen = 2*e.maxLen + 1 // in UTF-16, at the odd parity
	return e
}

// spelled is one byte of a secret as encoders write it: its spellings,
// and the bytes they start with (either case), a first test.
type spelled struct {
	forms  [][]byte
	firsts string     // the first byte of each group, lower case
	groups [][][]byte // the forms by their first byte (lower case), as firsts
}

// spellings are the ways encoders write byte c (not a letter or digit),
// compared in any ASCII case ("%2f", "\u002B", "&#X2B;"):
//   - as it is, and after a backslash (JavaScript, regular expressions,
//     JSON's \/ and \");
//   - percent-encoded, once or twice (%2B, %252B: a URL inside a query),
//     and as %u002B;
//   - JSON's \u00XX, also inside a JSON string (\\u00XX, \\\/, \\\"),
//     \U0000002B, JavaScript's \xXX, octal \053, CSS's \2b and \00002b;
//   - quoted-printable's =2B;
//   - HTML decimal and hex references, with up to three leading zeros and
//     without the closing ';' (browsers decode both), and escaped twice
//     (&amp;#43;); the named entities HTML5 has for it (&plus;, &sol;,
//     &quot;, &apos;, ...);
//   - '+' for a space.
func spellings(c byte) []string {
	out := []string{string(c), `\` + string(c),
		fmt.Sprintf("%%%02x", c), fmt.Sprintf("%%25%02x", c), fmt.Sprintf("%%u%04x", c),
		fmt.Sprintf(`\u%04x`, c), fmt.Sprintf(`\\u%04x`, c), fmt.Sprintf(`\U%08x`, c),
		fmt.Sprintf(`\x%02x`, c), fmt.Sprintf(`\%03o`, c), fmt.Sprintf(`\%x `, c), fmt.Sprintf(`\%06x`, c),
		fmt.Sprintf("=%02x", c), fmt.Sprintf("&amp;#%d;", c)}
	for _, z := range []string{"", "0", "00", "000"} {
		for _, end := range []string{";", ""} {
			out = append(out, fmt.Sprintf("&#%s%d%s", z, c, end), fmt.Sprintf("&#x%s%x%s", z, c, end))
		}
	}
	switch c {
	case '"', '/':
		out = append(out, `\\\`+string(c)) // a JSON escape inside a JSON string
	}
	out = append(out, html5Named[c]...)
	if c == ' ' {
		out = append(out, "+")
	}
	return out
}

// html5Named are the short HTML5 named references of the ASCII bytes that
// are not letters or digits (the legacy ones, which need no ';', among
// them).
var html5Named = map[byte][]string{
	'!': {"&excl;"}, '"': {"&quot;", "&quot"}, '#': {"&num;"}, '$': {"&dollar;"}, '%': {"&percnt;"},
	'&': {"&amp;", "&amp"}, '\'': {"&apos;"}, '(': {"&lpar;"}, ')': {"&rpar;"}, '*': {"&ast;", "&midast;"},
	'+': {"&plus;"}, ',': {"&comma;"}, '.': {"&period;"}, '/': {"&sol;"}, ':': {"&colon;"}, ';': {"&semi;"},
	'<': {"&lt;", "&lt"}, '=': {"&equals;"}, '>': {"&gt;", "&gt"}, '?': {"&quest;"}, '@': {"&commat;"},
	'[': {"&lsqb;", "&lbrack;"}, '\\': {"&bsol;"}, ']': {"&rsqb;", "&rbrack;"}, '^': {"&hat;"}, '_': {"&lowbar;"},
	'`': {"&grave;"}, '{': {"&lcub;", "&lbrace;"}, '|': {"&verbar;", "&vert;"}, '}': {"&rcub;", "&rbrace;"},
}

// foldEq compares two bytes, ASCII letters in either case.
func foldEq(x, y byte) bool {
	lx, _ := foldByte(x)
	ly, _ := foldByte(y)
	return lx == ly
}

// budget bounds the backtracking of one candidate: spellings rarely
// overlap, so a real echo needs a few steps; a crafted body that makes
// many overlap fails the match (and is left as it is) rather than spin.
const matchBudget = 4096

// forward matches the secret from its byte i at b[pos]; it returns the
// end of the match, or -1.
func (e *echoSearch) forward(b []byte, pos, i int, budget *int) int {
	for ; i < len(e.secret); i++ {
		sp := &e.spell[i]
		if sp.forms == nil {
			if pos >= len(b) || !foldEq(b[pos], e.secret[i]) {
				return -1
			}
			pos++
			continue
		}
		if pos >= len(b) {
			return -1
		}
		lo, _ := foldByte(b[pos])
		g := strings.IndexByte(sp.firsts, lo)
		if g < 0 {
			return -1
		}
		for _, f := range sp.groups[g] {
			if *budget--; *budget < 0 {
				return -1
			}
			if len(b)-pos >= len(f) && bytes.EqualFold(b[pos:pos+len(f)], f) {
				if end := e.forward(b, pos+len(f), i+1, budget); end >= 0 {
					return end
				}
			}
		}
		return -1
	}
	return pos
}

// backward matches the secret's bytes before i+1 ending at b[pos-1]; it
// returns the start of the match, or -1.
func (e *echoSearch) backward(b []byte, pos, i int, budget *int) int {
	for ; i >= 0 && e.spell[i].forms == nil; i-- {
		if pos == 0 || !foldEq(b[pos-1], e.secret[i]) {
			return -1
		}
		pos--
	}
	if i < 0 {
		return pos
	}
	for _, f := range e.spell[i].forms {
		if *budget--; *budget < 0 {
			return -1
		}
		if st := pos - len(f); st >= 0 && bytes.EqualFold(b[st:pos], f) {
			if start := e.backward(b, st, i-1, budget); start >= 0 {
				return start
			}
		}
	}
	return -1
}

// replace returns b with every echo replaced by the placeholder, and
// whether any was (b itself when none).
func (e *echoSearch) replace(b []byte) ([]byte, bool) {
	found := false
	if !e.anchorless {
		if spans := e.matches(b); len(spans) > 0 {
			var out []byte
			last := 0
			for _, sp := range spans {
				out = append(out, b[last:sp[0]]...)
				out = append(out, e.ph...)
				last = sp[1]
			}
			b, found = append(out, b[last:]...), true
		}
	}
	if e.anchorless {
		if out, ok := replaceFoldBytes(nil, b, e.apart, e.apartPhs); ok {
			b, found = out, true
		}
		return b, found
	}
	// UTF-16 of ASCII is every other byte a NUL: a body without one holds
	// none.
	if bytes.IndexByte(b, 0) < 0 {
		return b, found
	}
	// UTF-16 in either byte order and at either byte's parity: the code
	// units below 256 narrowed to bytes (others to 0xff, which matches
	// nothing), matched as above (escapes inside included), and each
	// match replaced by the placeholder in the same UTF-16.
	for _, big := range []bool{false, true} {
		for parity := 0; parity < 2; parity++ {
			n := make([]byte, (len(b)-parity)/2)
			for i := range n {
				lo, hi := b[parity+2*i], b[parity+2*i+1]
				if big {
					lo, hi = hi, lo
				}
				if n[i] = 0xff; hi == 0 {
					n[i] = lo
				}
			}
			spans := e.matches(n)
			if len(spans) == 0 {
				continue
			}
			wph := []byte(utf16(string(e.ph), big))
			var out []byte
			last := 0
			for _, sp := range spans {
				out = append(out, b[last:parity+2*sp[0]]...)
				out = append(out, wph...)
				last = parity + 2*sp[1]
			}
			b, found = append(out, b[last:]...), true
		}
	}
	return b, found
}

// matches returns the spans of b that are echoes of the secret, in order,
// none overlapping.
func (e *echoSearch) matches(b []byte) [][2]int {
	var spans [][2]int
	last := 0
	nl, nu := -2, -2 // the next anchor in each case at or past from; -1: none left
	for from := 0; from < len(b); {
		if nl != -1 && nl < from {
			nl = nextByte(b, from, e.lo)
		}
		if e.up == e.lo {
			nu = nl
		} else if nu != -1 && nu < from {
			nu = nextByte(b, from, e.up)
		}
		a := nl
		if nu >= 0 && (a < 0 || nu < a) {
			a = nu
		}
		if a < 0 {
			break
		}
		from = a + 1
		budget := matchBudget
		end := e.forward(b, a, e.k, &budget)
		if end < 0 {
			continue
		}
		start := e.backward(b, a, e.k-1, &budget)
		if start < last {
			continue
		}
		spans = append(spans, [2]int{start, end})
		last, from = end, end
	}
	return spans
}

// could reports whether b[pos:] may be the start of an echo from the
// secret's byte i on that the end of b cuts short (or a whole one).
func (e *echoSearch) could(b []byte, pos, i int, budget *int) bool {
	for ; i < len(e.secret); i++ {
		if pos >= len(b) {
			return true
		}
		sp := &e.spell[i]
		if sp.forms == nil {
			if !foldEq(b[pos], e.secret[i]) {
				return false
			}
			pos++
			continue
		}
		for _, f := range sp.forms {
			if *budget--; *budget < 0 {
				return true // unsure: held
			}
			n := min(len(f), len(b)-pos)
			if bytes.EqualFold(b[pos:pos+n], f[:n]) && (n < len(f) || e.could(b, pos+n, i+1, budget)) {
				return true
			}
		}
		return false
	}
	return true
}

// holdFrom returns the earliest offset of b at or past from where an echo
// might begin that b's end cuts short, or len(b): what a streaming scrub
// must hold back until more comes. UTF-16 (a NUL in the window) and a
// secret without an anchor hold the whole window.
func (e *echoSearch) holdFrom(b []byte, from int) int {
	if e.anchorless || bytes.IndexByte(b[from:], 0) >= 0 {
		return from
	}
	for i := from; i < len(b); i++ {
		budget := matchBudget
		if e.could(b, i, 0, &budget) {
			return i
		}
	}
	return len(b)
}

// replaceEchoes applies each search to b in turn.
func replaceEchoes(b []byte, es []*echoSearch) ([]byte, bool) {
	any := false
	for _, e := range es {
		var found bool
		if b, found = e.replace(b); found {
			any = true
		}
	}
	return b, any
}
