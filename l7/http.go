package l7

import "bytes"

const (
	// h2Preface is the HTTP/2 client connection preface (RFC 9113 §3.4).
	h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// proxyV2Sig is the PROXY protocol v2 signature; v1 starts "PROXY ".
	proxyV2Sig = "\r\n\r\n\x00\r\nQUIT\n"
)

// Errors of the HTTP, h2c and PROXY protocol paths.
const (
	errHTTPIncomplete  Error = "http: incomplete request head"
	errHTTPCtl         Error = "http: control character in request line"
	errHTTPNoVersion   Error = "http: request line without an HTTP/1.x version"
	errHTTPBareLF      Error = "http: line ends in a bare LF"
	errHTTPBareCR      Error = "http: CR not followed by LF"
	errHTTPRequestLine Error = "http: malformed request line"
	errHTTPVersion     Error = "http: unsupported HTTP version"
	errHTTPTarget      Error = "http: invalid request target"
	errHTTPScheme      Error = "http: absolute-form target with a scheme other than http or https"
	errHTTPObsFold     Error = "http: folded or indented header line"
	errHTTPHeaderName  Error = "http: invalid header name"
	errHTTPHeaderValue Error = "http: invalid character in header value"
	errHTTPTwoHosts    Error = "http: two Host headers"
	errHTTPHostEmpty   Error = "http: empty host"
	errHTTPHostChar    Error = "http: invalid character in host"
	errHTTPHostLabel   Error = "http: empty label in host"
	errHTTPHostLong    Error = "http: host too long"
	errHTTPPort        Error = "http: invalid port"
	errHTTPIPv6        Error = "http: invalid IPv6 literal"
	errHTTPHostDiffers Error = "http: absolute-form authority differs from Host"
	errH2Incomplete    Error = "h2c: incomplete connection preface"
	errProxyIncomplete Error = "proxy protocol: incomplete header"
)

const (
	authBufLen          = 272 // "[" + IPv6 literal + "]" or a name with its dot, then ":" + port
	maxIPv6Literal      = 45  // longest textual IPv6 address, with an IPv4 tail
	versionPrefixFolded = "http/"
	versionLen          = len("HTTP/1.1")
	httpVersion1        = "HTTP/1."
)

// knownMethod returns the constant spelling of a common method (RFC 9110,
// PATCH, WebDAV), or "". Only upper case counts: methods are
// case-sensitive, and a line starting with a known method is committed to
// HTTP, so lower-case text protocols ("get key" to memcached) stay Other.
func knownMethod(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "CONNECT":
		return "CONNECT"
	case "OPTIONS":
		return "OPTIONS"
	case "TRACE":
		return "TRACE"
	case "PATCH":
		return "PATCH"
	case "PROPFIND":
		return "PROPFIND"
	case "PROPPATCH":
		return "PROPPATCH"
	case "MKCOL":
		return "MKCOL"
	case "COPY":
		return "COPY"
	case "MOVE":
		return "MOVE"
	case "LOCK":
		return "LOCK"
	case "UNLOCK":
		return "UNLOCK"
	}
	return ""
}

func httpErr(err error) Result { return Result{Kind: HTTP, Err: err} }

// classifyText classifies b when its first byte is not a TLS or SSLv2
// record start: a PROXY protocol header, the h2c preface, an HTTP/1.x
// request head, or Other.
//
// A first line is committed to HTTP (any deviation is then Err, never
// Other) once it starts with a known method and a separator, or with any
// method token, separators and "/" (an origin-form target), or once it
// ends with an "HTTP/" version as its last word whatever the method. A
// separator here is any byte some server splits request-line words on
// (isSep: tabs, VT, FF and more besides SP; and a CR not followed by LF,
// isFirstLineSep), and whitespace before the
// method (isLeadSpace) is skipped for this decision: so a request that
// some lenient server would parse (lower-case or unknown method, tabs,
// leading whitespace, spaces in the target) cannot pass as Other. A first
// line that is none of these (an SSH banner, "EHLO x", "USER bob") is
// Other as soon as it ends, or as soon as a control character shows it is
// not text.
//
// A committed head must then be strict RFC 9112: nothing before the
// request line but empty lines (CRLF, which servers may skip, §2.2),
// single SP separators, CRLF line ends, one Host, unambiguous framing (see
// headParser).
func classifyText(b []byte) Result {
	if n := min(len(b), len(proxyV2Sig)); string(b[:n]) == proxyV2Sig[:n] {
		if n < len(proxyV2Sig) {
			return needMore()
		}
		return Result{Kind: ProxyProtocol}
	}
	if n := min(len(b), len(h2Preface)); string(b[:n]) == h2Preface[:n] {
		if n < len(h2Preface) {
			return needMore()
		}
		return Result{Kind: HTTP2}
	}
	i := 0
	for i < len(b) && isLeadSpace(b[i]) {
		i++
	}
	start := i
	for i < len(b) && isTchar(b[i]) {
		i++
	}
	switch {
	case i == len(b), b[i] == '\r' && i+1 == len(b):
		return needMore()
	case i == start || !isFirstLineSep(b, i):
		return Result{Kind: Other}
	}
	method := b[start:i]
	if string(method) == "PROXY" {
		return Result{Kind: ProxyProtocol}
	}
	known := knownMethod(method)
	committed := known != ""
	j := i
	for j < len(b) && isFirstLineSep(b, j) {
		j++
	}
	if j == len(b) || b[j] == '\r' && j+1 == len(b) {
		return needMore()
	}
	committed = committed || b[j] == '/'
	for ; j < len(b); j++ {
		c := b[j]
		if c == '\r' && j+1 == len(b) {
			return needMore() // a line end or a bare CR
		}
		if c == '\r' && b[j+1] != '\n' {
			continue // a bare CR: a word separator to some servers
		}
		if c == '\r' || c == '\n' {
			break
		}
		if c < 0x20 && !isSep(c) || c == 0x7f {
			if committed {
				return httpErr(errHTTPCtl)
			}
			return Result{Kind: Other}
		}
	}
	if j == len(b) {
		return needMore()
	}
	rest := b[i:j] // separators, target, separators, version, if well formed
	k := len(rest) - 1
	for k >= 0 && !isSep(rest[k]) && rest[k] != '\r' {
		k--
	}
	if !hasPrefixFold(rest[k+1:], versionPrefixFolded) {
		if committed {
			return httpErr(errHTTPNoVersion)
		}
		return Result{Kind: Other}
	}

	// Committed to HTTP from here on.
	for k := 0; k < start; k += 2 {
		if start-k < 2 || b[k] != '\r' || b[k+1] != '\n' {
			return httpErr(errHTTPLeadingSpace)
		}
	}
	var p headParser
	for pos := start; ; {
		e := pos
		for e < len(b) && b[e] != '\r' && b[e] != '\n' {
			e++
		}
		switch {
		case e == len(b):
			return needMore()
		case b[e] == '\n':
			return httpErr(errHTTPBareLF)
		case e+1 == len(b):
			return needMore()
		case b[e+1] != '\n':
			return httpErr(errHTTPBareCR)
		}
		line := b[pos:e]
		pos = e + 2
		var err error
		switch {
		case p.lines == 0:
			err = p.requestLine(line)
		case len(line) > 0:
			err = p.field(line, false)
		default:
			if _, err = p.end(); err != nil {
				return httpErr(err)
			}
			return httpResult(&p, method, known)
		}
		if err != nil {
			return httpErr(err)
		}
	}
}

// isFirstLineSep reports whether b[k] separates the words of a first line
// for some server: a separator (isSep), or a CR not followed by LF, which
// Python's http.server (and wsgiref, Django's runserver) split the
// request line on. A committed head refuses the bare CR
// (errHTTPBareCR); here it only decides whether the line is committed.
// A CR that is b's last byte is neither yet (the caller asks for more).
func isFirstLineSep(b []byte, k int) bool {
	return isSep(b[k]) || b[k] == '\r' && k+1 < len(b) && b[k+1] != '\n'
}

// httpResult builds the result of a complete head that p accepted.
func httpResult(p *headParser, method []byte, known string) Result {
	r := Result{Kind: HTTP, Method: known, Absolute: p.absolute, UpgradeH2C: p.h2c}
	if a, ok := p.hostAuth(); ok {
		s := string(a.buf[:a.n])
		r.authority = s
		r.Host = s[a.hostLo:a.hostHi]
		if a.portLo > 0 {
			r.Port = s[a.portLo:]
		}
	}
	if known == "" {
		r.Method = string(method)
	}
	return r
}

// absoluteAuthority returns the authority of an absolute-form target
// ("http://host[:port]/path"): http or https only, and the authority must
// not be empty.
func absoluteAuthority(t []byte) ([]byte, error) {
	colon := bytes.IndexByte(t, ':')
	if colon <= 0 {
		return nil, errHTTPTarget
	}
	if !equalFold(t[:colon], "http") && !equalFold(t[:colon], "https") {
		return nil, errHTTPScheme
	}
	rest := t[colon+1:]
	if len(rest) < 2 || rest[0] != '/' || rest[1] != '/' {
		return nil, errHTTPTarget
	}
	rest = rest[2:]
	end := len(rest)
	if k := bytes.IndexAny(rest, "/?#"); k >= 0 {
		end = k
	}
	if end == 0 {
		return nil, errHTTPHostEmpty
	}
	return rest[:end], nil
}

// authority locates a normalized host[:port] in a buffer.
type authority struct {
	n              int  // bytes of the buffer used
	hostLo, hostHi int  // the host (without brackets)
	portLo         int  // start of the port, 0 when there is none
	v6             bool // the host is a bracketed IPv6 literal
}

// parseAuthority normalizes src, a Host value or a target's authority
// (host [":" port], host a name or "[" IPv6 "]"), into buf: the name
// lower-cased without a trailing dot, the port in canonical decimal.
// Userinfo, percent-encoding, zone identifiers and empty ports are errors.
func parseAuthority(src []byte, buf *[authBufLen]byte) (authority, error) {
	var a authority
	portAt := -1
	if len(src) > 0 && src[0] == '[' {
		end := bytes.IndexByte(src, ']')
		if end < 0 {
			return a, errHTTPIPv6
		}
		inner := src[1:end]
		if len(inner) == 0 || len(inner) > maxIPv6Literal {
			return a, errHTTPIPv6
		}
		buf[0] = '['
		for k, c := range inner {
			c = lowerASCII(c)
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || c == ':' || c == '.') {
				return a, errHTTPIPv6
			}
			buf[1+k] = c
		}
		a.hostLo, a.hostHi, a.v6 = 1, 1+len(inner), true
		buf[a.hostHi] = ']'
		a.n = a.hostHi + 1
		if tail := src[end+1:]; len(tail) > 0 {
			if tail[0] != ':' {
				return a, errHTTPHostChar
			}
			portAt = end + 2
		}
	} else {
		host := src
		if k := bytes.IndexByte(src, ':'); k >= 0 {
			host, portAt = src[:k], k+1
		}
		if len(host) > maxName+1 {
			return a, errHTTPHostLong
		}
		copy(buf[:], host)
		k, p := normName(buf[:len(host)])
		switch p {
		case nameEmpty:
			return a, errHTTPHostEmpty
		case nameChar:
			return a, errHTTPHostChar
		case nameEmptyLabel:
			return a, errHTTPHostLabel
		case nameLong:
			return a, errHTTPHostLong
		}
		a.hostLo, a.hostHi, a.n = 0, k, k
	}
	if portAt >= 0 {
		port := src[portAt:]
		if len(port) == 0 || len(port) > 5 {
			return a, errHTTPPort
		}
		v := 0
		for _, c := range port {
			if c < '0' || c > '9' {
				return a, errHTTPPort
			}
			v = v*10 + int(c-'0')
		}
		if v > 65535 {
			return a, errHTTPPort
		}
		buf[a.n] = ':'
		a.n++
		a.portLo = a.n
		a.n += putDecimal(buf[a.n:], v)
	}
	return a, nil
}

// putDecimal writes v (0..65535) in decimal to dst and returns its length.
func putDecimal(dst []byte, v int) int {
	var tmp [5]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return copy(dst, tmp[i:])
}

// trimOWS trims optional whitespace (SP, HTAB) from both ends of b.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// hasPrefixFold reports whether b starts with the lower-case ASCII s,
// ignoring ASCII case in b.
func hasPrefixFold(b []byte, s string) bool {
	return len(b) >= len(s) && equalFold(b[:len(s)], s)
}
