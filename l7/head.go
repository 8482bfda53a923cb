package l7

import (
	"bytes"
	"net/netip"
)

// Errors of an HTTP/1.x request head beyond its request line and Host:
// leading whitespace and the message framing (RFC 9112 §6).
const (
	errHTTPLeadingSpace Error = "http: whitespace before the request line"
	errHTTPTwoCL        Error = "http: two Content-Length headers"
	errHTTPCLValue      Error = "http: invalid Content-Length"
	errHTTPCLTE         Error = "http: both Content-Length and Transfer-Encoding"
	errHTTPTwoTE        Error = "http: two Transfer-Encoding headers"
	errHTTPTECoding     Error = "http: Transfer-Encoding other than a final chunked"
	errHTTPTE10         Error = "http: Transfer-Encoding in an HTTP/1.0 request"
	errHTTPUpgrade      Error = "http: upgrade to a protocol other than websocket"
	errHTTPUpgradeBody  Error = "http: websocket upgrade request with a body"
	errHTTPBodyless     Error = "http: GET, HEAD or TRACE request with a body"
	errHTTPHeadLong     Error = "http: request head longer than the hold limit"
	errHTTPTrailer      Error = "http: trailer field that frames or routes a request"
	errHTTPExpect       Error = "http: Expect header (the server may read the body as a new request)"
)

// maxContentLength bounds a Content-Length or a chunk size: larger values
// are refused (no client sends them; parsers that overflow read them
// differently).
const maxContentLength = 1 << 60

// isSep reports whether c is a byte some server takes as whitespace
// between the words of a request line: SP and HTAB, and also VT, FF, the
// ASCII separators 0x1c-0x1f, NEL and NBSP (Python's str.split, on a line
// decoded as Latin-1). A request line uses SP only.
func isSep(c byte) bool {
	switch c {
	case ' ', '\t', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0:
		return true
	}
	return false
}

// isLeadSpace reports whether c is a byte some server skips before a
// request line: the separators and CR, LF.
func isLeadSpace(c byte) bool { return c == '\r' || c == '\n' || isSep(c) }

// framing is how a request's body is delimited (RFC 9112 §6.3).
type framing uint8

const (
	bodyNone    framing = iota // no Content-Length, no Transfer-Encoding: no body
	bodyLength                 // Content-Length bytes
	bodyChunked                // chunked transfer coding
)

// headParser checks an HTTP/1.x request head one line at a time: first the
// request line, then header field lines, then the empty line (end). Lines
// are given without their CRLF; the caller has checked the line ends
// (CRLF, no bare CR or LF). It keeps what the end needs in fixed buffers
// (normalized, never aliasing the input), so the lines may come from
// different reads. The zero value expects a request line.
type headParser struct {
	lines     int // lines seen so far
	methodLen int
	connect   bool // method CONNECT
	bodyless  bool // method GET, HEAD or TRACE: a body is refused (see end)
	http10    bool // version HTTP/1.0
	absolute  bool // absolute-form target

	hasAuth bool // the target has an authority (absolute or CONNECT)
	auth    authority
	authErr error
	abuf    [authBufLen]byte

	hostSeen bool
	hostOK   bool // a non-empty Host value
	host     authority
	hostErr  error
	hbuf     [authBufLen]byte

	clSeen, teSeen bool
	chunked        bool  // the Transfer-Encoding's last coding is chunked (else errHTTPTECoding)
	length         int64 // Content-Length
	h2c, websocket bool  // Upgrade lists h2c; Upgrade lists websocket
}

// requestLine checks l, the request line: method SP request-target SP
// HTTP-version, single spaces, no other whitespace, an origin-, absolute-,
// authority- (CONNECT only) or asterisk-form target, version HTTP/1.x.
func (p *headParser) requestLine(l []byte) error {
	p.lines = 1
	if len(l) > 0 && isSep(l[0]) {
		return errHTTPLeadingSpace
	}
	m := 0
	for m < len(l) && isTchar(l[m]) {
		m++
	}
	for _, c := range l {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return errHTTPCtl
		}
	}
	sp := bytes.LastIndexAny(l, " \t")
	if sp < 0 || !hasPrefixFold(l[sp+1:], versionPrefixFolded) {
		return errHTTPNoVersion
	}
	if m == 0 || sp <= m || l[m] != ' ' || bytes.IndexByte(l, '\t') >= 0 || bytes.IndexByte(l[m+1:sp], ' ') >= 0 {
		return errHTTPRequestLine
	}
	p.methodLen = m
	target, version := l[m+1:sp], l[sp+1:]
	if len(version) != versionLen || string(version[:len(httpVersion1)]) != httpVersion1 ||
		version[versionLen-1] < '0' || version[versionLen-1] > '9' {
		return errHTTPVersion
	}
	p.http10 = version[versionLen-1] == '0'
	if len(target) == 0 {
		return errHTTPTarget
	}
	for _, c := range target {
		if c > 0x7e {
			return errHTTPTarget
		}
	}
	p.connect = string(l[:m]) == "CONNECT"
	switch string(l[:m]) {
	case "GET", "HEAD", "TRACE":
		p.bodyless = true
	}
	switch {
	case p.connect:
		p.hasAuth = true // authority-form; Check denies CONNECT anyway
		if p.auth, p.authErr = parseAuthority(target, &p.abuf); p.authErr != nil {
			p.authErr = errHTTPTarget
		}
	case target[0] == '/', len(target) == 1 && target[0] == '*':
	default:
		a, err := absoluteAuthority(target)
		if err != nil {
			return err
		}
		p.hasAuth, p.absolute = true, true
		p.auth, p.authErr = parseAuthority(a, &p.abuf)
	}
	return nil
}

// field checks l, a header field line (or a trailer field line, with
// trailer set: then the fields that frame or route a request are
// refused). It records Host, Content-Length, Transfer-Encoding and
// Upgrade, and refuses Expect.
func (p *headParser) field(l []byte, trailer bool) error {
	p.lines++
	if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
		return errHTTPObsFold
	}
	n := 0
	for n < len(l) && isTchar(l[n]) {
		n++
	}
	if n == 0 || n == len(l) || l[n] != ':' {
		return errHTTPHeaderName
	}
	name := l[:n]
	for _, c := range l[n+1:] {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return errHTTPHeaderValue
		}
	}
	val := trimOWS(l[n+1:])
	switch {
	case equalFold(name, "host"):
		if trailer {
			return errHTTPTrailer
		}
		if p.hostSeen {
			return errHTTPTwoHosts
		}
		p.hostSeen, p.hostOK = true, len(val) > 0
		if p.hostOK {
			p.host, p.hostErr = parseAuthority(val, &p.hbuf)
		}
	case equalFold(name, "content-length"):
		if trailer {
			return errHTTPTrailer
		}
		if p.clSeen {
			return errHTTPTwoCL
		}
		p.clSeen = true
		v, ok := parseDecimal(val)
		if !ok {
			return errHTTPCLValue
		}
		p.length = v
	case equalFold(name, "transfer-encoding"):
		if trailer {
			return errHTTPTrailer
		}
		if p.teSeen {
			return errHTTPTwoTE
		}
		p.teSeen = true
		if !finalChunked(val) {
			return errHTTPTECoding
		}
		p.chunked = true
	case equalFold(name, "upgrade"):
		if trailer {
			return errHTTPTrailer
		}
		if err := p.upgrade(val); err != nil {
			return err
		}
	case equalFold(name, "expect"):
		// Any value, with or without a body. Servers that answer a
		// 100-continue request with a final status at once and keep
		// the connection read the declared body as the next request,
		// one the gate counted through unchecked; servers that wait
		// for the body on a request without one wait for bytes the gate
		// takes as the next head (the "0.CL" desyncs). No browser sends
		// Expect; curl does for large uploads and can be told not to.
		if trailer {
			return errHTTPTrailer
		}
		return errHTTPExpect
	}
	return nil
}

// upgrade records the protocols an Upgrade value lists: websocket is the
// only one let through (h2c is reported by Check, the others here).
func (p *headParser) upgrade(v []byte) error {
	for len(v) > 0 {
		elem := v
		if k := bytes.IndexByte(v, ','); k >= 0 {
			elem, v = v[:k], v[k+1:]
		} else {
			v = nil
		}
		elem = trimOWS(elem)
		if k := bytes.IndexByte(elem, '/'); k >= 0 {
			elem = elem[:k]
		}
		switch {
		case len(elem) == 0:
		case equalFold(elem, "h2c"):
			p.h2c = true
		case equalFold(elem, "websocket"):
			p.websocket = true
		default:
			return errHTTPUpgrade
		}
	}
	return nil
}

// end checks the head as a whole once its empty line is reached, and
// returns how its body is framed.
func (p *headParser) end() (framing, error) {
	switch {
	case p.hostErr != nil:
		return 0, p.hostErr
	case p.hasAuth && p.authErr != nil:
		return 0, p.authErr
	case p.absolute && p.hostSeen:
		h, a := p.host, p.auth
		if !p.hostOK || string(p.hbuf[h.hostLo:h.hostHi]) != string(p.abuf[a.hostLo:a.hostHi]) ||
			h.portLo > 0 && a.portLo > 0 && string(p.hbuf[h.portLo:h.n]) != string(p.abuf[a.portLo:a.n]) {
			return 0, errHTTPHostDiffers
		}
	}
	if a, v6 := p.authority(); v6 && !validIPv6(a) {
		return 0, errHTTPIPv6
	}
	switch {
	case p.clSeen && p.teSeen:
		return 0, errHTTPCLTE
	case p.teSeen && p.http10:
		return 0, errHTTPTE10
	case p.websocket && (p.chunked || p.length > 0):
		return 0, errHTTPUpgradeBody
	case p.bodyless && (p.teSeen || p.length > 0):
		// Content on these has no meaning (RFC 9110 §9.3.1, 9.3.2; a
		// TRACE must not carry any, §9.3.8), and servers that never
		// read it (Python's http.server) take it as the next request,
		// one this gate would not see: refused rather than counted.
		return 0, errHTTPBodyless
	case p.teSeen:
		return bodyChunked, nil
	case p.length > 0:
		return bodyLength, nil
	}
	return bodyNone, nil
}

// authority returns the normalized authority the request names (the
// target's if it has one, else the Host header's; nil if neither) and
// whether its host is an IPv6 literal. It aliases p's buffers.
func (p *headParser) authority() (auth []byte, v6 bool) {
	a, ok := p.hostAuth()
	if !ok {
		return nil, false
	}
	return a.buf[:a.n], a.v6
}

// located is an authority and the buffer it lies in.
type located struct {
	authority
	buf []byte
}

// hostAuth is the authority the request is for, if it names one.
func (p *headParser) hostAuth() (located, bool) {
	switch {
	case p.hasAuth:
		return located{p.auth, p.abuf[:]}, true
	case p.hostOK:
		return located{p.host, p.hbuf[:]}, true
	}
	return located{}, false
}

// check is Check for a head that end accepted, with verifyHost on: it
// gives the same verdict as Check(name, port, the head's Result, _, true)
// without allocating unless it denies.
func (p *headParser) check(name string, port uint16) Verdict {
	a, ok := p.hostAuth()
	var v Verdict
	switch {
	case p.connect:
		v.Reason = ReasonConnect
	case p.h2c:
		v.Reason = ReasonH2CUpgrade
	case !ok:
		v.Reason = ReasonNoHost
	case string(a.buf[a.hostLo:a.hostHi]) != name:
		v.Reason = ReasonHostMismatch
		if p.absolute {
			v.Reason = ReasonAbsMismatch
		}
	case a.portLo > 0 && !portIs(string(a.buf[a.portLo:a.n]), port):
		v.Reason = ReasonPortMismatch
	default:
		return Verdict{Allow: true, Reason: ReasonHostMatch}
	}
	if ok {
		v.HTTPHost = string(a.buf[:a.n])
	}
	return v
}

// parseDecimal parses a Content-Length value: 1*DIGIT, at most
// maxContentLength.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
		if v > maxContentLength {
			return 0, false
		}
	}
	return v, true
}

// finalChunked reports whether the Transfer-Encoding value v is a list of
// plain tokens (no parameters, no empty elements) whose last element, and
// only that one, is chunked.
func finalChunked(v []byte) bool {
	for len(v) > 0 {
		elem, rest, more := bytes.Cut(v, []byte{','})
		elem = trimOWS(elem)
		if len(elem) == 0 {
			return false
		}
		for _, c := range elem {
			if !isTchar(c) {
				return false
			}
		}
		if equalFold(elem, "chunked") {
			return !more
		}
		v = rest
	}
	return false
}

// validIPv6 reports whether a, "[" literal "]" with an optional port, holds
// a valid IPv6 address.
func validIPv6(a []byte) bool {
	end := bytes.IndexByte(a, ']')
	if len(a) == 0 || a[0] != '[' || end < 0 {
		return false
	}
	ip, err := netip.ParseAddr(string(a[1:end]))
	return err == nil && ip.Is6() && ip.Zone() == ""
}
