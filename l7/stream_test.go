package l7

import (
	"bytes"
	"strings"
	"testing"
)

// relayThrough feeds parts to s as the relay does (kept bytes, then each
// part) and returns what went upstream and the final verdict (End's, if
// Next never refused).
func relayThrough(s *HTTPStream, parts ...[]byte) (fwd []byte, v Verdict) {
	var buf []byte // the kept bytes, then the new part
	for _, p := range parts {
		buf = append(buf, p...)
		n, v := s.Next(buf)
		if !v.Allow {
			if n != 0 {
				panic("Next refused and forwarded")
			}
			return fwd, v
		}
		if len(buf)-n > MaxHold {
			panic("Next kept more than MaxHold")
		}
		fwd = append(fwd, buf[:n]...)
		buf = buf[n:]
	}
	return fwd, s.End(buf)
}

// splits returns in cut every way the tests try: whole, byte by byte, and
// in pieces of a few sizes.
func splits(in []byte) map[string][][]byte {
	out := map[string][][]byte{"whole": {in}}
	for _, size := range []int{1, 2, 3, 7, 16, 64} {
		var parts [][]byte
		for b := in; len(b) > 0; {
			k := min(size, len(b))
			parts = append(parts, b[:k])
			b = b[k:]
		}
		out["by-"+itoa(size)] = parts
	}
	return out
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

// wsFrame is a masked client frame.
func wsFrame(fin bool, op byte, payload string) string {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var h []byte
	switch n := len(payload); {
	case n < 126:
		h = []byte{b0, 0x80 | byte(n)}
	case n < 1<<16:
		h = []byte{b0, 0x80 | 126, byte(n >> 8), byte(n)}
	default:
		h = []byte{b0, 0x80 | 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	h = append(h, 1, 2, 3, 4)
	return string(h) + payload
}

func TestHTTPStream(t *testing.T) {
	const (
		get      = "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"
		getEvil  = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"
		post     = "POST /up HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n\r\nhello"
		chunked  = "POST /c HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n"
		wsUpg    = "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
		h        = "Host: app.test\r\n"
		postHead = "POST / HTTP/1.1\r\n" + h
	)
	tests := []struct {
		name string
		in   string
		why  string
		// evil is where the refused element starts (nothing from there
		// on may be forwarded); "" for a control that must pass whole.
		evil   string
		reason string
		host   string // the refusal's http_host
	}{
		// Controls: these must pass, every byte forwarded.
		{name: "keep-alive, right host", in: get + get + "GET /b HTTP/1.1\r\nHost: APP.test:80\r\n\r\n",
			why: "every request on a kept-alive connection names the flow's host"},
		{name: "chunked post then get", in: chunked + "5\r\nhello\r\na;name=val;q=\"x;y\\\"\"\r\n0123456789\r\n0\r\nX-Sum: 1\r\n\r\n" + get,
			why: "chunk data, extensions and trailers are followed, then the next head is checked"},
		{name: "content-length post then get", in: post + get,
			why: "the body is counted through; the next head starts right after it"},
		{name: "body that looks like a request", in: "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 36\r\n\r\n" + getEvil,
			why: "a body is opaque: the server counts the same Content-Length"},
		{name: "empty lines between requests", in: post + "\r\n" + get,
			why: "servers skip CRLF before a request line (RFC 9112 §2.2)"},
		{name: "absolute form, right host", in: "GET http://app.test/x HTTP/1.1\r\nHost: app.test\r\n\r\n" + get,
			why: "an absolute-form target naming the flow's host is fine"},
		{name: "websocket upgrade, then frames", in: wsUpg + wsFrame(true, 1, "hi") + wsFrame(false, 2, strings.Repeat("x", 300)) + wsFrame(true, 0, "") + wsFrame(true, 9, "p") + wsFrame(true, 8, ""),
			why: "after a WebSocket upgrade to the flow's host, masked client frames pass; payloads are not read"},
		{name: "zero content-length", in: "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 0\r\n\r\n" + get,
			why: "an empty body"},
		{name: "http/1.0 keep-alive", in: "GET / HTTP/1.0\r\nHost: app.test\r\nConnection: keep-alive\r\n\r\n" + get,
			why: "HTTP/1.0 heads are checked like 1.1"},

		// Refusals.
		{name: "kept-alive request, other host", in: get + getEvil, evil: getEvil,
			reason: ReasonHostMismatch, host: "evil.test",
			why: "the second request on a kept-alive connection names another virtual host"},
		{name: "pipelined after a body", in: post + getEvil, evil: getEvil,
			reason: ReasonHostMismatch, host: "evil.test",
			why: "a request pipelined after a counted body is checked too"},
		{name: "after chunked body", in: chunked + "0\r\n\r\n" + getEvil, evil: getEvil,
			reason: ReasonHostMismatch, host: "evil.test",
			why: "a request after the chunked body's end is checked too"},
		{name: "cl+te smuggling", in: "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG" + getEvil, evil: "POST",
			reason: string(errHTTPCLTE),
			why:    "front end and back end may each pick a different framing (RFC 9112 §6.3)"},
		{name: "te+cl smuggling", in: "POST / HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", evil: "POST",
			reason: string(errHTTPCLTE), why: "either order"},
		{name: "second request cl+te", in: get + "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", evil: "POST",
			reason: string(errHTTPCLTE), why: "later requests' framing is checked as the first's"},
		{name: "duplicate content-length", in: get + postHead + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", evil: "POST",
			reason: string(errHTTPTwoCL), why: "servers disagree on duplicates, even equal ones"},
		{name: "content-length list", in: postHead + "Content-Length: 5, 5\r\n\r\nhello", evil: "POST",
			reason: string(errHTTPCLValue), why: "a list is a duplicate in disguise"},
		{name: "content-length sign", in: postHead + "Content-Length: +5\r\n\r\nhello", evil: "POST",
			reason: string(errHTTPCLValue), why: "only digits"},
		{name: "content-length overflow", in: postHead + "Content-Length: 99999999999999999999\r\n\r\n", evil: "POST",
			reason: string(errHTTPCLValue), why: "parsers that overflow read another length"},
		{name: "te not final chunked", in: postHead + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", evil: "POST",
			reason: string(errHTTPTECoding), why: "chunked must be the final coding"},
		{name: "te gzip only", in: postHead + "Transfer-Encoding: gzip\r\n\r\n", evil: "POST",
			reason: string(errHTTPTECoding), why: "a request body without chunked has no length (RFC 9112 §6.3)"},
		{name: "te lookalike", in: postHead + "Transfer-Encoding: xchunked\r\n\r\n", evil: "POST",
			reason: string(errHTTPTECoding), why: "substring matchers see chunked"},
		{name: "te twice", in: postHead + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", evil: "POST",
			reason: string(errHTTPTwoTE), why: "servers combine or reject duplicates differently"},
		{name: "te in http/1.0", in: "POST / HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", evil: "POST",
			reason: string(errHTTPTE10), why: "RFC 9112 §6.1: faulty framing"},
		{name: "obs-fold in second request", in: get + "GET / HTTP/1.1\r\nHost: app.test\r\nX-A: a\r\n b\r\n\r\n", evil: "GET / HTTP/1.1\r\nHost: app.test\r\nX-A",
			reason: string(errHTTPObsFold), why: "folded lines are read differently by different parsers"},
		{name: "bare cr in second request", in: get + "GET / HTTP/1.1\r\nHost: app.test\rHost: evil.test\r\n\r\n", evil: "GET / HTTP/1.1\r\nHost: app.test\rHost",
			reason: string(errHTTPBareCR), why: "a CR inside a line ends it for some parsers"},
		{name: "bare lf in second request", in: get + "GET / HTTP/1.1\nHost: evil.test\n\n", evil: "GET / HTTP/1.1\nHost",
			reason: string(errHTTPBareLF), why: "lenient servers accept bare LF; refused rather than guessed"},
		{name: "leading space, second request", in: get + " " + getEvil, evil: " GET",
			reason: string(errHTTPLeadingSpace), why: "whitespace before a request line"},
		{name: "leading tab, second request", in: post + "\t" + getEvil, evil: "\tGET",
			reason: string(errHTTPLeadingSpace), why: "whitespace before a request line"},
		{name: "bare lf between requests", in: get + "\n" + getEvil, evil: "\nGET",
			reason: string(errHTTPBareLF), why: "only CRLF empty lines may precede a request line"},
		{name: "tab separators, second request", in: get + "GET\t/\tHTTP/1.1\r\nHost: evil.test\r\n\r\n", evil: "GET\t",
			reason: string(errHTTPRequestLine), why: "single SP separators only"},
		{name: "two hosts, second request", in: get + "GET / HTTP/1.1\r\nHost: app.test\r\nHost: evil.test\r\n\r\n", evil: "GET / HTTP/1.1\r\nHost: app.test\r\nHost: evil",
			reason: string(errHTTPTwoHosts), why: "exactly one Host"},
		{name: "no host, second request", in: get + "GET / HTTP/1.1\r\n\r\n", evil: "GET / HTTP/1.1\r\n\r",
			reason: ReasonNoHost, why: "the server would pick its default host"},
		{name: "absolute form, other host", in: get + "GET http://evil.test/ HTTP/1.1\r\n\r\n", evil: "GET http",
			reason: ReasonAbsMismatch, host: "evil.test", why: "the target's authority wins over Host"},
		{name: "other port, second request", in: get + "GET / HTTP/1.1\r\nHost: app.test:8080\r\n\r\n", evil: "GET / HTTP/1.1\r\nHost: app.test:8080",
			reason: ReasonPortMismatch, host: "app.test:8080", why: "a virtual host on another port"},
		{name: "connect, second request", in: get + "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", evil: "CONNECT",
			reason: ReasonConnect, host: "evil.test:443", why: "the gateway is not a proxy"},
		{name: "h2c upgrade, second request", in: get + "GET / HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", evil: "GET / HTTP/1.1\r\nHost: app.test\r\nConnection",
			reason: ReasonH2CUpgrade, host: "app.test", why: "HTTP/2 authorities after the upgrade are not checked"},
		{name: "h2c prior knowledge, second request", in: get + h2Preface, evil: "PRI",
			reason: string(errHTTPVersion), why: "the HTTP/2 preface is not an HTTP/1.x request"},
		{name: "other upgrade", in: "GET / HTTP/1.1\r\nHost: app.test\r\nUpgrade: foo/1\r\nConnection: upgrade\r\n\r\n", evil: "GET",
			reason: string(errHTTPUpgrade), why: "only WebSocket is followed after an upgrade"},
		{name: "websocket upgrade with body", in: "GET / HTTP/1.1\r\nHost: app.test\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\nabc", evil: "GET",
			reason: string(errHTTPUpgradeBody), why: "a handshake has no body; where the frames start would be ambiguous"},
		{name: "get with a body hiding a request", in: "GET / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 35\r\n\r\n" + getEvil, evil: "GET",
			reason: string(errHTTPBodyless), why: "servers that never read a GET body (Python's http.server) take it as the next request"},
		{name: "head with a chunked body", in: "HEAD / HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", evil: "HEAD",
			reason: string(errHTTPBodyless), why: "a HEAD body is read by some servers, not by others"},
		{name: "get with a body, second request", in: get + "GET / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 35\r\n\r\n" + getEvil, evil: "GET / HTTP/1.1\r\nHost: app.test\r\nContent-Length",
			reason: string(errHTTPBodyless), why: "the same on a kept-alive connection"},
		{name: "expect 100-continue hiding a request", in: "POST / HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\nContent-Length: 35\r\n\r\n" + getEvil, evil: "POST",
			reason: string(errHTTPExpect), why: "a server that answers a final status at once and keeps the connection reads the body as the next request"},
		{name: "expect, second request", in: get + "PUT /f HTTP/1.1\r\nHost: app.test\r\nContent-Length: 35\r\nexpect: 100-Continue\r\n\r\n" + getEvil, evil: "PUT",
			reason: string(errHTTPExpect), why: "the same on a kept-alive connection, any case"},
		{name: "expect, obfuscated value", in: "POST / HTTP/1.1\r\nHost: app.test\r\nExpect: y 100-continue\r\nContent-Length: 35\r\n\r\n" + getEvil, evil: "POST",
			reason: string(errHTTPExpect), why: "servers match the value loosely; any Expect is refused"},
		{name: "expect without a body", in: "GET / HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\n\r\n" + getEvil, evil: "GET / HTTP/1.1\r\nHost: app.test\r\nExpect",
			reason: string(errHTTPExpect), why: "some servers wait for a body the gate never counts (0.CL)"},
		{name: "expect in trailer", in: chunked + "0\r\nExpect: 100-continue\r\n\r\n" + get, evil: "Expect",
			reason: string(errHTTPTrailer), why: "a trailer that some servers merge into the head"},
		{name: "request after a refused upgrade", in: wsUpg + getEvil, evil: getEvil,
			reason: string(errWSFrame), why: "if the server did not switch, the client cannot send it a request: no request starts like a client frame"},
		{name: "unmasked websocket frame", in: wsUpg + "\x81\x02hi", evil: "\x81",
			reason: string(errWSMask), why: "client frames are masked (RFC 6455 §5.3)"},
		{name: "long control frame", in: wsUpg + "\x89\xfe\x00\x80", evil: "\x89",
			reason: string(errWSFrame), why: "control frames carry at most 125 bytes"},
		{name: "chunk size not hex", in: chunked + "g\r\n", evil: "g",
			reason: string(errChunkSize), why: "an invalid chunk size"},
		{name: "chunk size negative", in: chunked + "-1\r\n", evil: "-1",
			reason: string(errChunkSize), why: "an invalid chunk size"},
		{name: "chunk size 0x prefix", in: chunked + "0x10\r\n", evil: "0x",
			reason: string(errChunkSize), why: "read as 0 by some parsers, 16 by others"},
		{name: "chunk size with space", in: chunked + "5 \r\nhello\r\n0\r\n\r\n", evil: "5 ",
			reason: string(errChunkSize), why: "whitespace after the size is bad whitespace"},
		{name: "chunk size overflow", in: chunked + "10000000000000005\r\nhello\r\n", evil: "1000",
			reason: string(errChunkSize), why: "17 hex digits overflow 64 bits: parsers that wrap read 5"},
		{name: "chunk size too big", in: chunked + "ffffffffffffffff\r\n", evil: "ffff",
			reason: string(errChunkSize), why: "beyond any real body"},
		{name: "chunk data longer than size", in: chunked + "3\r\nhello\r\n0\r\n\r\n", evil: "lo\r\n",
			reason: string(errChunkData), why: "the CRLF must follow the data at once"},
		{name: "empty chunk extension", in: chunked + "5;\r\nhello\r\n", evil: "5;",
			reason: string(errChunkExt), why: "an extension needs a name"},
		{name: "unterminated quoted extension", in: chunked + "5;a=\"x\r\nhello\r\n", evil: "5;",
			reason: string(errChunkExt), why: "quoted strings must close"},
		{name: "host in trailer", in: chunked + "0\r\nHost: evil.test\r\n\r\n" + get, evil: "Host: evil",
			reason: string(errHTTPTrailer), why: "some servers merge trailers into the header section"},
		{name: "head too long", in: get + "GET / HTTP/1.1\r\nHost: app.test\r\nX: " + strings.Repeat("a", MaxHold) + "\r\n\r\n", evil: "GET / HTTP/1.1\r\nHost: app.test\r\nX",
			reason: string(errHTTPHeadLong), why: "a head is held until checked, so it is bounded"},
		{name: "incomplete head at end", in: get + "GET / HTTP/1.1\r\nHost: evil", evil: "GET / HTTP/1.1\r\nHost: evil",
			reason: string(errHTTPIncomplete), why: "a head cut short is never forwarded; the end is refused and recorded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			limit := len(in)
			if tt.evil != "" {
				limit = strings.LastIndex(tt.in, tt.evil)
				if limit < 0 {
					t.Fatalf("evil %q not in the input", tt.evil)
				}
			}
			for how, parts := range splits(in) {
				fwd, v := relayThrough(NewHTTPStream("app.test", 80), parts...)
				if !bytes.HasPrefix(in, fwd) {
					t.Fatalf("%s: forwarded %q, not a prefix of the input", how, fwd)
				}
				if tt.evil == "" {
					if !v.Allow || len(fwd) != len(in) {
						t.Fatalf("%s: %+v after forwarding %d of %d bytes (%s)", how, v, len(fwd), len(in), tt.why)
					}
					continue
				}
				if v.Allow || v.Reason != tt.reason || v.HTTPHost != tt.host {
					t.Fatalf("%s: verdict %+v, want reason %q host %q (%s)", how, v, tt.reason, tt.host, tt.why)
				}
				if len(fwd) > limit {
					t.Fatalf("%s: forwarded %q, past the refused element at %d (%s)", how, fwd, limit, tt.why)
				}
			}
		})
	}
}

// TestHTTPStreamFirstRequestAgreesWithCheck: on a single head, the stream's
// verdict is Check's on Classify's result.
func TestHTTPStreamFirstRequestAgreesWithCheck(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET http://app.test:81/ HTTP/1.1\r\n\r\n",
		"CONNECT app.test:80 HTTP/1.1\r\nHost: app.test:80\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"\r\nOPTIONS * HTTP/1.1\r\nHost: [::1]\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: app.test\r\nUpgrade: h2c\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		r := ClassifyFinal([]byte(in))
		want := Check("app.test", 80, r, true, true)
		_, got := NewHTTPStream("app.test", 80).Next([]byte(in))
		if got.Allow != want.Allow || !got.Allow && (got.Reason != want.Reason || got.HTTPHost != want.HTTPHost) {
			t.Errorf("%q: stream %+v, Check %+v", in, got, want)
		}
	}
}

func TestClassifyStrictFirstBytes(t *testing.T) {
	const req = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"
	tests := []struct {
		name, in, why string
		kind          Kind
		err           error
	}{
		{"leading space", " " + req, "Python's http.server strips it and serves the request", HTTP, errHTTPLeadingSpace},
		{"leading tab", "\t" + req, "likewise", HTTP, errHTTPLeadingSpace},
		{"leading vt", "\v" + req, "likewise", HTTP, errHTTPLeadingSpace},
		{"leading ff", "\f" + req, "likewise", HTTP, errHTTPLeadingSpace},
		{"leading nbsp", "\xa0" + req, "Python splits Latin-1 NBSP too", HTTP, errHTTPLeadingSpace},
		{"leading bare lf", "\n" + req, "only CRLF empty lines may come first", HTTP, errHTTPLeadingSpace},
		{"leading cr lf space", "\r\n " + req, "CRLF then a space", HTTP, errHTTPLeadingSpace},
		{"tab separators", "GET\t/\tHTTP/1.1\r\nHost: evil.test\r\n\r\n", "Python splits on tabs", HTTP, errHTTPRequestLine},
		{"vt separators, unknown method", "FOO\v/x\vHTTP/1.1\r\nHost: evil.test\r\n\r\n", "a line ending in a version is HTTP, whatever separates its words", HTTP, errHTTPCtl},
		{"unknown method, origin target, nul", "FOO /\x00 HTTP/1.1\r\n\r\n", "a token, a separator and / start a request line", HTTP, errHTTPCtl},
		{"double space", "GET  / HTTP/1.1\r\nHost: evil.test\r\n\r\n", "single SP only", HTTP, errHTTPRequestLine},
		{"alert before hello", "\x15\x03\x01\x00\x02\x01\x5a\x16\x03\x01", "servers skip a warning alert and read the hello after it", TLS, errTLSFirstRecord},
		{"ccs before hello", "\x14\x03\x03\x00\x01\x01", "change_cipher_spec first", TLS, errTLSFirstRecord},
		{"app data first", "\x17\x03\x03\x00\x05hello", "application data before any handshake", TLS, errTLSFirstRecord},
		{"heartbeat first", "\x18\x03\x03\x00\x03\x01\x00\x00", "heartbeat before any handshake", TLS, errTLSFirstRecord},
		{"binary starting 0x15", "\x15\x00\x01\x02", "no record version: not TLS", Other, nil},
		{"sslv2-like nbsp", "\xa0\x00\x01\x03\x00", "an SSLv2 hello may start with 0xa0", TLS, errSSLv2},
		{"ssh banner", "SSH-2.0-OpenSSH_9.6\r\n", "server-first protocols still pass", Other, nil},
		{"smtp ehlo", "EHLO client.test\r\n", "text commands still pass", Other, nil},
		{"empty lines then request", "\r\n\r\nGET / HTTP/1.1\r\nHost: app.test\r\n\r\n", "CRLF before the request line may be skipped (RFC 9112 §2.2)", HTTP, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkStable(t, []byte(tt.in), true)
			if r.Kind != tt.kind || r.Err != tt.err {
				t.Fatalf("kind %v err %v, want %v %v (%s)", r.Kind, r.Err, tt.kind, tt.err, tt.why)
			}
			checkAgainstGo(t, []byte(tt.in), r)
		})
	}
}

// TestHTTPStreamUpgradeAnswer: with the server's answer watched
// (WatchUpgrade), the bytes after a WebSocket upgrade request are frames
// only if the server switched protocols; if it answered otherwise they
// are requests again, checked as such; before it answered they are
// refused (a client waits for the answer, RFC 6455 §4.1); and an upgrade
// must be the connection's first request, so that the server's first
// answer is the one to it. Found by attack: after a refused upgrade, the
// frame 82 a0 + "/xxxxx HTTP/1.1\r\nHost: evil.test\r\n\r\n" (masking key
// and payload as sent are the worker's to choose) is a request for
// evil.test to a Python server that dispatches any method, since Python
// splits the request line on NBSP (0xa0).
func TestHTTPStreamUpgradeAnswer(t *testing.T) {
	const (
		get     = "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"
		getEvil = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"
		wsUpg   = "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
		// A final binary frame, 32 bytes, whose masking key and payload
		// as sent read "/xxxxx HTTP/1.1\r\nHost: evil.test\r\n\r\n".
		nbspFrame = "\x82\xa0/xxxxx HTTP/1.1\r\nHost: evil.test\r\n\r\n"
	)
	frames := wsFrame(true, 1, "hi") + wsFrame(true, 8, "")
	type answer struct{ answered, switched bool }
	switched, refused, silent := answer{true, true}, answer{true, false}, answer{}
	tests := []struct {
		name   string
		ans    answer
		in     string
		evil   string
		reason string
		host   string
		why    string
	}{
		{name: "switched, then frames", ans: switched, in: wsUpg + frames,
			why: "the server switched: the worker's bytes are frames"},
		{name: "switched, the nbsp frame", ans: switched, in: wsUpg + nbspFrame,
			why: "a server that switched reads a frame"},
		{name: "refused, then a request", ans: refused, in: wsUpg + get,
			why: "the server did not switch: the connection carries requests again"},
		{name: "refused, the nbsp frame", ans: refused, in: wsUpg + nbspFrame, evil: nbspFrame,
			reason: string(errHTTPRequestLine), why: "what a lenient server would read as a request for evil.test is checked as a request"},
		{name: "refused, then a request for another host", ans: refused, in: wsUpg + getEvil, evil: getEvil,
			reason: ReasonHostMismatch, host: "evil.test", why: "requests after a refused upgrade are checked like any"},
		{name: "frames before the answer", ans: silent, in: wsUpg + nbspFrame, evil: nbspFrame,
			reason: string(errWSEarly), why: "a client waits for the server's answer before it sends frames"},
		{name: "upgrade after another request", ans: switched, in: get + wsUpg + frames, evil: wsUpg,
			reason: string(errWSNotFirst), why: "the server's first answer would not be the one to the upgrade"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			limit := len(in)
			if tt.evil != "" {
				limit = strings.LastIndex(tt.in, tt.evil)
			}
			for how, parts := range splits(in) {
				s := NewHTTPStream("app.test", 80)
				s.WatchUpgrade(func() (bool, bool) { return tt.ans.answered, tt.ans.switched })
				fwd, v := relayThrough(s, parts...)
				if tt.evil == "" {
					if !v.Allow || len(fwd) != len(in) {
						t.Fatalf("%s: %+v after forwarding %d of %d bytes (%s)", how, v, len(fwd), len(in), tt.why)
					}
					continue
				}
				if v.Allow || v.Reason != tt.reason || v.HTTPHost != tt.host {
					t.Fatalf("%s: verdict %+v, want reason %q host %q (%s)", how, v, tt.reason, tt.host, tt.why)
				}
				if len(fwd) > limit {
					t.Fatalf("%s: forwarded %q, past the refused element at %d (%s)", how, fwd, limit, tt.why)
				}
			}
		})
	}
}

func TestSwitchingProtocols(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"HTTP/1.1 101 Switching Protocols\r\n", true},
		{"HTTP/1.1 101\r\n", true},
		{"HTTP/1.0 101 x", true},
		{"HTTP/1.1 200 OK\r\n", false},
		{"HTTP/1.1 1010 x", false},
		{"HTTP/2.0 101 x", false},
		{"http/1.1 101 x", false},
		{"HTTP/1.1 101", false},
	} {
		if got := SwitchingProtocols([]byte(tc.in)); got != tc.want {
			t.Errorf("SwitchingProtocols(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
