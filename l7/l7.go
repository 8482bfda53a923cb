// Package l7 classifies the first bytes a worker sends on a TCP flow and
// checks them against the name the flow was opened by: a TLS
// ClientHello must carry that name as its SNI, a plain HTTP/1.x request must
// carry it as its Host.
//
// The package is pure: stdlib only, no goroutines, no I/O, no package state.
// Every function is safe for concurrent use and never retains or modifies
// the slices it is given.
//
// # How the relay uses it
//
// The relay forwards server bytes to the worker at once and never holds them
// back. It holds the worker's bytes in a buffer and, after each read, calls
// Classify on everything held so far:
//
//	r := l7.Classify(held)
//	if r.NeedMore { keep reading (while len(held) < l7.MaxHold and the hold timer runs) }
//	v := l7.Check(name, port, r, pol.VerifySNI, pol.VerifyHost)
//	if !v.Allow { reset the flow, audit an l7 event with v } else { flush held, then relay }
//
// Classify never asks for more than MaxHold bytes: given MaxHold bytes or
// more it always decides. When the hold timer fires, or the worker
// half-closes, before Classify has decided, the relay calls ClassifyFinal,
// which always decides: a prefix that is still a possible ClientHello or
// HTTP head is then malformed (deny), because a worker that stalls half way
// and is let through could finish the request unchecked. A hold timeout of a
// few seconds is plenty: real clients send their first flight in one write.
// Server-first protocols (SSH, SMTP, ...) never wait on the timer: the
// client sends nothing until the server has spoken, and the client's first
// line (an SSH banner, "EHLO x") is classified Other as soon as it ends.
//
// A plain HTTP flow whose first request was allowed then goes through an
// HTTPStream, which checks every later request (kept-alive, pipelined) and
// follows the body framing between them.
//
// # What is not checked
//
// A TLS flow whose first ClientHello was allowed then goes through a
// TLSStream, which checks every later ClientHello sent in clear (one after
// a HelloRetryRequest).
//
// Everything inside TLS (HTTP Host, ECH inner name, a TLS 1.2
// renegotiation) is encrypted; so are WebSocket payloads after an
// upgrade.
package l7

import "strconv"

// MaxHold is the most client bytes the relay holds before a decision. A
// ClientHello, however many TLS records it is split over, and an HTTP
// request head must fit in MaxHold bytes, else they are malformed.
const MaxHold = 16 << 10

// Kind is what the first client bytes are.
type Kind uint8

const (
	// Unknown: not enough bytes to tell yet (Result.NeedMore is set).
	Unknown Kind = iota
	// TLS: a TLS handshake record (a ClientHello), or an SSLv2-format
	// ClientHello (always Err: it cannot carry an SNI).
	TLS
	// HTTP: a plain HTTP/1.x request head.
	HTTP
	// HTTP2: the HTTP/2 prior-knowledge (h2c) connection preface. The
	// request's authority travels HPACK-compressed in a HEADERS frame
	// later; it is not checkable from the first bytes.
	HTTP2
	// ProxyProtocol: a HAProxy PROXY protocol header (v1 text or v2
	// binary). A worker has no business sending one: it would claim a
	// client address to the server and hide what follows from the check.
	ProxyProtocol
	// Other: neither of the above, e.g. an SSH client banner, an SMTP
	// command or a binary protocol.
	Other
)

// String returns the kind's lower-case name.
func (k Kind) String() string {
	switch k {
	case Unknown:
		return "unknown"
	case TLS:
		return "tls"
	case HTTP:
		return "http"
	case HTTP2:
		return "h2c"
	case ProxyProtocol:
		return "proxy-protocol"
	case Other:
		return "other"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Result is what Classify found in the first client bytes. NeedMore is set
// exactly when Kind is Unknown; every other field is then empty. Err is set
// only with Kind TLS, HTTP, HTTP2 or ProxyProtocol: the bytes committed to
// that protocol but are malformed. Strings are normalized copies and never
// alias the classified bytes.
type Result struct {
	Kind Kind
	// NeedMore: the bytes so far are a valid prefix; call again with more.
	NeedMore bool

	// SNI is the TLS server_name (normalized: lower case, trailing dot
	// removed); "" if the ClientHello has no server_name extension.
	SNI string
	// ECH is set when the ClientHello carries an encrypted_client_hello
	// extension (0xfe0d). SNI is then the outer, cleartext name: the name
	// the network sees. The inner ClientHello, with the name the client
	// really wants, is encrypted and cannot be checked. Browsers send a
	// GREASE (fake) ECH extension in every ClientHello when they have no
	// ECH config, which they cannot get through nsgate's DNS (it answers
	// HTTPS records empty), so ECH is not denied by itself.
	ECH bool

	// Host is the HTTP request's host (normalized like SNI; an IPv6
	// literal without its brackets), port stripped: the authority of an
	// absolute-form target if there is one, else the Host header. "" if
	// the request has neither (HTTP/1.0 without Host) or the Host is empty.
	Host string
	// Port is the port from the same place as Host, in canonical decimal,
	// or "" if none was given.
	Port string
	// Method is the HTTP request method, as sent (methods are
	// case-sensitive).
	Method string
	// Absolute is set when the request target is in absolute form
	// ("GET http://name/ HTTP/1.1"); Host and Port then come from it, and a
	// Host header, if any, names the same host (else Err).
	Absolute bool
	// UpgradeH2C is set when the request asks to switch to h2c (an
	// Upgrade header listing h2c): the requests that follow would be
	// HTTP/2 with authorities the check cannot see.
	UpgradeH2C bool

	// Err says why the bytes are malformed. It is an Error.
	Err error

	// authority is Host with brackets (IPv6) and ":"+Port: the audit's
	// http_host. Host and Port are substrings of it.
	authority string
}

// Error is the type of Result.Err: a constant description of what is
// malformed, prefixed "tls: ", "http: ", "h2c: " or "proxy protocol: ".
// The text has low cardinality (it never quotes the input), so it can serve
// as an audit reason.
type Error string

func (e Error) Error() string { return string(e) }

// errShort is the internal "ran out of bytes" signal; it never leaves the
// package.
const errShort Error = "l7: need more bytes"

// needMore is the result that asks for more bytes.
func needMore() Result { return Result{NeedMore: true} }

// Classify classifies b, the first bytes the client sent on a flow, held so
// far. b may grow between calls (call again with the longer slice).
//
// The decision rests on a prefix of b only: once Classify returns a result
// with NeedMore false for some b, it returns the same result for every
// extension of b. When len(b) >= MaxHold it always decides (on the first
// MaxHold bytes). It never panics, whatever b holds; it does not modify or
// retain b. It allocates only for the strings of a complete TLS or HTTP
// result (one string, plus the method when it is not a common one); a call
// that returns NeedMore does not allocate.
//
// What counts as "not enough yet": for TLS (first byte 0x16), fewer bytes
// than the records carrying the ClientHello; for HTTP, no end of the head
// yet while the bytes are still a plausible request. A first byte that is
// neither 0x16, nor the start of an SSLv2-format ClientHello, nor an HTTP
// token character (nor CR or LF, which a server skips before a request
// line) is Other at once; so is a first line that ends without an
// "HTTP/x.y" version and does not begin with a common HTTP method.
func Classify(b []byte) Result {
	if len(b) >= MaxHold {
		return ClassifyFinal(b)
	}
	return classify(b)
}

// ClassifyFinal is Classify when no more client bytes will come before the
// decision: the hold timer fired, the client half-closed, or MaxHold bytes
// are held. It never returns NeedMore: where Classify would ask for more,
// it returns Err for bytes that are a prefix of a ClientHello, an HTTP head
// or another committed form (Kind TLS, HTTP, HTTP2 or ProxyProtocol), and
// Other for no bytes at all. Where Classify decides, ClassifyFinal returns
// the same result. Only the first MaxHold bytes of b are looked at.
func ClassifyFinal(b []byte) Result {
	if len(b) > MaxHold {
		b = b[:MaxHold]
	}
	r := classify(b)
	if !r.NeedMore {
		return r
	}
	return incomplete(b)
}

// classify decides on b or asks for more; it looks at all of b and never
// at its length alone, so that its decisions are prefix-stable.
func classify(b []byte) Result {
	if len(b) == 0 {
		return needMore()
	}
	switch c := b[0]; {
	case c == recordTypeHandshake:
		return classifyTLS(b)
	case isRecordType(c):
		return classifyOtherRecord(b)
	case c >= 0x80 && (!isSep(c) || sslv2Prefix(b)):
		return classifySSLv2(b)
	}
	return classifyText(b)
}

// incomplete is the final result for a b that classify still needed more
// of.
func incomplete(b []byte) Result {
	switch {
	case len(b) == 0:
		return Result{Kind: Other}
	case b[0] == recordTypeHandshake, isRecordType(b[0]):
		return Result{Kind: TLS, Err: errTLSIncomplete}
	case b[0] >= 0x80 && sslv2Prefix(b):
		return Result{Kind: TLS, Err: errSSLv2}
	case len(b) > 4 && hasPrefix(proxyV2Sig, b):
		return Result{Kind: ProxyProtocol, Err: errProxyIncomplete}
	case len(b) > 3 && hasPrefix(h2Preface, b):
		return Result{Kind: HTTP2, Err: errH2Incomplete}
	}
	return Result{Kind: HTTP, Err: errHTTPIncomplete}
}

// hasPrefix reports whether b is a prefix of s.
func hasPrefix(s string, b []byte) bool {
	return len(b) <= len(s) && string(b) == s[:len(b)]
}

// Verdict is Check's answer. Reason is a short, low-cardinality text for
// the audit record; SNI and HTTPHost are what the client sent (normalized),
// for the l7 event's sni and http_host fields.
type Verdict struct {
	Allow    bool
	Reason   string
	SNI      string
	HTTPHost string
}

// Reasons Check gives.
const (
	ReasonOther        = "not tls or http"
	ReasonSNIMatch     = "sni matches"
	ReasonHostMatch    = "host matches"
	ReasonSNIOff       = "sni check off"
	ReasonHostOff      = "host check off"
	ReasonNoSNI        = "no sni"
	ReasonSNIMismatch  = "sni does not match"
	ReasonECHMismatch  = "sni does not match (ech outer name)"
	ReasonNoHost       = "no host header"
	ReasonHostMismatch = "host does not match"
	ReasonAbsMismatch  = "absolute-form authority does not match"
	ReasonPortMismatch = "host port is not the flow's port"
	ReasonConnect      = "connect method: the gateway is not a proxy"
	ReasonH2C          = "h2c prior knowledge: authority not checkable"
	ReasonH2CUpgrade   = "h2c upgrade: later authorities not checkable"
	ReasonProxyProto   = "proxy protocol header from the worker"
	ReasonChecksOff    = "sni and host checks off"
	ReasonUnclassified = "not classified yet"
)

// Check decides a classified flow. It is for flows the worker opened by
// name (to a fake DNS address); flows to other addresses have no name to
// check. name is the flow's normalized name (lower case, no trailing dot,
// punycode: as the policy and DNS packages normalize it; a name that is not
// normalized never matches), port its destination port; r is the result of
// Classify or ClassifyFinal; verifySNI and verifyHost are the policy's
// tls.verify_sni and http.verify_host.
//
//   - Unknown (NeedMore): deny; call ClassifyFinal instead.
//   - Other: allow. Server-first and unknown protocols pass: the
//     destination was already approved.
//   - TLS, with verifySNI: Err → deny; no SNI → deny ("no sni"); SNI ≠ name
//     → deny; else allow. With ECH the outer SNI is the one checked.
//     Without verifySNI: allow.
//   - HTTP, with verifyHost: Err → deny; CONNECT → deny (the gateway is not
//     a proxy); an h2c upgrade → deny; no Host → deny; Host ≠ name → deny
//     (for an absolute-form target: its authority ≠ name); a Host port that
//     is not port → deny; else allow. Without verifyHost: allow.
//   - HTTP2 (h2c prior knowledge): deny with verifyHost, else allow.
//   - ProxyProtocol: deny when either check is on, else allow.
//
// Check is pure and does not allocate.
func Check(name string, port uint16, r Result, verifySNI, verifyHost bool) Verdict {
	switch r.Kind {
	case Other:
		return Verdict{Allow: true, Reason: ReasonOther}
	case TLS:
		v := Verdict{SNI: r.SNI}
		switch {
		case !verifySNI:
			v.Allow, v.Reason = true, ReasonSNIOff
		case r.Err != nil:
			v.Reason = r.Err.Error()
		case r.SNI == "":
			v.Reason = ReasonNoSNI
		case r.SNI != name:
			v.Reason = ReasonSNIMismatch
			if r.ECH {
				v.Reason = ReasonECHMismatch
			}
		default:
			v.Allow, v.Reason = true, ReasonSNIMatch
		}
		return v
	case HTTP:
		v := Verdict{HTTPHost: r.authority}
		switch {
		case !verifyHost:
			v.Allow, v.Reason = true, ReasonHostOff
		case r.Err != nil:
			v.Reason = r.Err.Error()
		case r.Method == "CONNECT":
			v.Reason = ReasonConnect
		case r.UpgradeH2C:
			v.Reason = ReasonH2CUpgrade
		case r.Host == "":
			v.Reason = ReasonNoHost
		case r.Host != name:
			v.Reason = ReasonHostMismatch
			if r.Absolute {
				v.Reason = ReasonAbsMismatch
			}
		case r.Port != "" && !portIs(r.Port, port):
			v.Reason = ReasonPortMismatch
		default:
			v.Allow, v.Reason = true, ReasonHostMatch
		}
		return v
	case HTTP2:
		if !verifyHost {
			return Verdict{Allow: true, Reason: ReasonHostOff}
		}
		if r.Err != nil {
			return Verdict{Reason: r.Err.Error()}
		}
		return Verdict{Reason: ReasonH2C}
	case ProxyProtocol:
		if !verifySNI && !verifyHost {
			return Verdict{Allow: true, Reason: ReasonChecksOff}
		}
		return Verdict{Reason: ReasonProxyProto}
	}
	return Verdict{Reason: ReasonUnclassified}
}

// portIs reports whether the decimal string s is port.
func portIs(s string, port uint16) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n == int(port)
}
