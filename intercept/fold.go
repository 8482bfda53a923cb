package intercept

import "bytes"

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

// echoSearch finds every echo form of one secret (echoForms) in one scan:
// the forms share an anchor, a letter or digit of the secret, which each
// holds unchanged at a known offset; every place the anchor occurs (in
// either case) is tried against each form. A secret without a letter or
// digit has no such anchor: each form is then searched on its own.
type echoSearch struct {
	lo, up   byte
	forms    []foldPat // k: the anchor's offset in each form
	phs      []string
	maxLen   int
	separate bool // no shared anchor: replaceFoldBytes, each form anchored alone
}

func newEchoSearch(secret, ph string) *echoSearch {
	k, best := -1, 99
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; alnum(c) {
			if r := anchorRank(c); r < best {
				k, best = i, r
			}
		}
	}
	e := &echoSearch{separate: k < 0}
	forms, phs, offs := echoForms(secret, ph, max(k, 0))
	for i, f := range forms {
		p := newFoldPat(f)
		if !e.separate {
			p.k = offs[i]
			p.lo, p.up = foldByte(secret[k])
		}
		e.forms, e.phs = append(e.forms, p), append(e.phs, phs[i])
		e.maxLen = max(e.maxLen, len(f))
	}
	if !e.separate {
		e.lo, e.up = foldByte(secret[k])
	}
	return e
}

// replace returns b with every form replaced by its placeholder, and
// whether any was (b itself when none).
func (e *echoSearch) replace(b []byte) ([]byte, bool) {
	if e.separate {
		out, found := replaceFoldBytes(nil, b, e.forms, e.phs)
		if !found {
			return b, false
		}
		return out, true
	}
	var out []byte
	last, found := 0, false
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
		for j := range e.forms {
			f := &e.forms[j]
			st, n := a-f.k, len(f.s)
			if st < last || st+n > len(b) {
				continue
			}
			if b[st]|0x20 == f.s[0]|0x20 && b[st+n-1]|0x20 == f.s[n-1]|0x20 && bytes.EqualFold(b[st:st+n], f.s) {
				out = append(out, b[last:st]...)
				out = append(out, e.phs[j]...)
				last, found = st+n, true
				from = last
				break
			}
		}
	}
	if !found {
		return b, false
	}
	return append(out, b[last:]...), true
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
