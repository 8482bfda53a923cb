package l7

import (
	"bytes"
	"net/netip"
)

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
// A request line is committed to HTTP (any deviation is then Err, never
// Other) once it starts with a known method and a space, or once it ends
// with an "HTTP/" version as its last word whatever the method: so a
// request that some lenient server would parse (lower-case or unknown
// method, spaces in the target) cannot pass as Other. A first line that is
// neither (an SSH banner, "EHLO x", "USER bob") is Other as soon as it
// ends, or as soon as a control character shows it is not text.
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
	// Servers skip empty lines before a request line (RFC 9112 §2.2).
	i := 0
	for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
		i++
	}
	start := i
	for i < len(b) && isTchar(b[i]) {
		i++
	}
	switch {
	case i == len(b):
		return needMore()
	case i == start || b[i] != ' ':
		return Result{Kind: Other}
	}
	method := b[start:i]
	if string(method) == "PROXY" {
		return Result{Kind: ProxyProtocol}
	}
	known := knownMethod(method)
	i++
	t0 := i
	for ; i < len(b); i++ {
		c := b[i]
		if c == '\r' || c == '\n' {
			break
		}
		if c < 0x20 && c != '\t' || c == 0x7f {
			if known != "" {
				return httpErr(errHTTPCtl)
			}
			return Result{Kind: Other}
		}
	}
	if i == len(b) {
		return needMore()
	}
	rest := b[t0:i] // target SP version, if well formed
	sp := bytes.LastIndexAny(rest, " \t")
	if sp < 0 || !hasPrefixFold(rest[sp+1:], versionPrefixFolded) {
		if known != "" {
			return httpErr(errHTTPNoVersion)
		}
		return Result{Kind: Other}
	}

	// Committed to HTTP from here on.
	if b[i] == '\n' {
		return httpErr(errHTTPBareLF)
	}
	if i+1 == len(b) {
		return needMore()
	}
	if b[i+1] != '\n' {
		return httpErr(errHTTPBareCR)
	}
	i += 2
	if bytes.IndexByte(rest, '\t') >= 0 || bytes.IndexByte(rest, ' ') != sp {
		return httpErr(errHTTPRequestLine)
	}
	target, version := rest[:sp], rest[sp+1:]
	if len(version) != versionLen || string(version[:len(httpVersion1)]) != httpVersion1 ||
		version[versionLen-1] < '0' || version[versionLen-1] > '9' {
		return httpErr(errHTTPVersion)
	}
	if len(target) == 0 {
		return httpErr(errHTTPTarget)
	}
	for _, c := range target {
		if c > 0x7e {
			return httpErr(errHTTPTarget)
		}
	}
	var auth []byte // authority from the target, if it has one
	absolute := false
	switch {
	case known == "CONNECT":
		auth = target // authority-form; Check denies CONNECT anyway
	case target[0] == '/', len(target) == 1 && target[0] == '*':
	default:
		a, err := absoluteAuthority(target)
		if err != nil {
			return httpErr(err)
		}
		auth, absolute = a, true
	}

	// Header lines up to the empty line.
	var hostVal []byte
	hostSeen, h2c := false, false
	for {
		if i == len(b) {
			return needMore()
		}
		switch b[i] {
		case '\r':
			if i+1 == len(b) {
				return needMore()
			}
			if b[i+1] != '\n' {
				return httpErr(errHTTPBareCR)
			}
			return httpResult(method, known, auth, absolute, hostVal, hostSeen, h2c)
		case '\n':
			return httpErr(errHTTPBareLF)
		case ' ', '\t':
			return httpErr(errHTTPObsFold)
		}
		n0 := i
		for i < len(b) && isTchar(b[i]) {
			i++
		}
		if i == len(b) {
			return needMore()
		}
		if i == n0 || b[i] != ':' {
			return httpErr(errHTTPHeaderName)
		}
		name := b[n0:i]
		i++
		v0 := i
		for ; i < len(b); i++ {
			c := b[i]
			if c == '\r' || c == '\n' {
				break
			}
			if c < 0x20 && c != '\t' || c == 0x7f {
				return httpErr(errHTTPHeaderValue)
			}
		}
		if i == len(b) {
			return needMore()
		}
		if b[i] == '\n' {
			return httpErr(errHTTPBareLF)
		}
		if i+1 == len(b) {
			return needMore()
		}
		if b[i+1] != '\n' {
			return httpErr(errHTTPBareCR)
		}
		val := trimOWS(b[v0:i])
		i += 2
		switch {
		case equalFold(name, "host"):
			if hostSeen {
				return httpErr(errHTTPTwoHosts)
			}
			hostSeen, hostVal = true, val
		case equalFold(name, "upgrade"):
			h2c = h2c || hasToken(val, "h2c")
		}
	}
}

// httpResult builds the result of a complete, well-formed head: the host
// comes from the target's authority when there is one (and a Host header
// must then agree, for absolute form), else from the Host header.
func httpResult(method []byte, known string, auth []byte, absolute bool, hostVal []byte, hostSeen, h2c bool) Result {
	r := Result{Kind: HTTP, Method: known, Absolute: absolute, UpgradeH2C: h2c}
	var hbuf, abuf [authBufLen]byte
	var h, a authority
	var err error
	hostOK := hostSeen && len(hostVal) > 0
	if hostOK {
		if h, err = parseAuthority(hostVal, &hbuf); err != nil {
			return httpErr(err)
		}
	}
	buf, use := &hbuf, h
	if auth != nil {
		if a, err = parseAuthority(auth, &abuf); err != nil {
			if known == "CONNECT" {
				err = errHTTPTarget
			}
			return httpErr(err)
		}
		if absolute && hostSeen {
			if !hostOK || string(hbuf[h.hostLo:h.hostHi]) != string(abuf[a.hostLo:a.hostHi]) ||
				h.portLo > 0 && a.portLo > 0 && string(hbuf[h.portLo:h.n]) != string(abuf[a.portLo:a.n]) {
				return httpErr(errHTTPHostDiffers)
			}
		}
		buf, use = &abuf, a
	} else if !hostOK {
		use = authority{}
	}
	if use.n > 0 {
		s := string(buf[:use.n])
		r.authority = s
		r.Host = s[use.hostLo:use.hostHi]
		if use.portLo > 0 {
			r.Port = s[use.portLo:]
		}
		if use.v6 {
			if ip, err := netip.ParseAddr(r.Host); err != nil || !ip.Is6() {
				return httpErr(errHTTPIPv6)
			}
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

// hasToken reports whether the comma-separated list v holds the protocol
// token tok (lower case), ignoring case and a "/version" suffix.
func hasToken(v []byte, tok string) bool {
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
		if equalFold(elem, tok) {
			return true
		}
	}
	return false
}

// hasPrefixFold reports whether b starts with the lower-case ASCII s,
// ignoring ASCII case in b.
func hasPrefixFold(b []byte, s string) bool {
	return len(b) >= len(s) && equalFold(b[:len(s)], s)
}
