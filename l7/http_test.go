package l7

import (
	"strings"
	"testing"
)

func TestClassifyHTTP(t *testing.T) {
	const get = "GET / HTTP/1.1\r\n"
	huge := get + "Host: app.test\r\nX: " + strings.Repeat("a", MaxHold) + "\r\n\r\n"
	tests := []struct {
		name    string
		in      string
		why     string
		kind    Kind
		err     error
		host    string
		port    string
		method  string
		allow   bool
		reason  string
		partial bool // Classify asks for more (ClassifyFinal then decides)
	}{
		{name: "plain get", in: get + "Host: app.test\r\nUser-Agent: t\r\n\r\n",
			why:  "the common case: Host is the flow's name",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "host with the flow's port", in: get + "Host: app.test:80\r\n\r\n",
			why:  "a port suffix is allowed when it is the flow's port",
			kind: HTTP, host: "app.test", port: "80", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "host port with leading zero", in: get + "Host: app.test:0080\r\n\r\n",
			why:  "ports compare as numbers, as servers read them",
			kind: HTTP, host: "app.test", port: "80", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "host with another port", in: get + "Host: app.test:8080\r\n\r\n",
			why:  "a virtual host on another port is another destination",
			kind: HTTP, host: "app.test", port: "8080", method: "GET", reason: ReasonPortMismatch},
		{name: "wrong host", in: get + "Host: other.test\r\n\r\n",
			why:  "Host names another virtual host on the approved server: deny",
			kind: HTTP, host: "other.test", method: "GET", reason: ReasonHostMismatch},
		{name: "host case and root dot", in: get + "Host: APP.Test.\r\n\r\n",
			why:  "host names compare case-insensitively and without the root dot",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "host with whitespace around", in: get + "host:\t app.test  \r\n\r\n",
			why:  "optional whitespace around a field value is not part of it; field names ignore case",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "two hosts", in: get + "Host: app.test\r\nHost: other.test\r\n\r\n",
			why:  "servers and proxies disagree on which Host wins",
			kind: HTTP, err: errHTTPTwoHosts, reason: string(errHTTPTwoHosts)},
		{name: "two equal hosts", in: get + "Host: app.test\r\nhOST: app.test\r\n\r\n",
			why:  "exactly one Host header (RFC 9112 §3.2)",
			kind: HTTP, err: errHTTPTwoHosts, reason: string(errHTTPTwoHosts)},
		{name: "absolute uri matching", in: "GET http://app.test/x?y HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "absolute form (as sent to proxies) naming the flow's host is fine",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "absolute uri with port", in: "GET HTTPS://App.test:80 HTTP/1.1\r\nHost: app.test:80\r\n\r\n",
			why:  "scheme is case-insensitive; the authority's port is checked like Host's",
			kind: HTTP, host: "app.test", port: "80", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "absolute uri mismatching host", in: "GET http://other.test/ HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "a server uses the target's authority over Host (RFC 9112 §3.2.2): the two must agree",
			kind: HTTP, err: errHTTPHostDiffers, reason: string(errHTTPHostDiffers)},
		{name: "absolute uri, no host, other name", in: "GET http://other.test/ HTTP/1.0\r\n\r\n",
			why:  "without Host the authority is what the server serves",
			kind: HTTP, host: "other.test", method: "GET", reason: ReasonAbsMismatch},
		{name: "absolute uri, no host, same name", in: "GET http://app.test/ HTTP/1.0\r\n\r\n",
			why:  "HTTP/1.0 with an absolute target carries its host there",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "absolute uri with userinfo", in: "GET http://app.test@other.test/ HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "userinfo makes the host easy to misread; refused",
			kind: HTTP, err: errHTTPHostChar, reason: string(errHTTPHostChar)},
		{name: "absolute uri, other scheme", in: "GET ftp://app.test/ HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "only http and https targets are requests to this server",
			kind: HTTP, err: errHTTPScheme, reason: string(errHTTPScheme)},
		{name: "target neither origin nor absolute", in: "GET other.test/x HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "no valid request target form",
			kind: HTTP, err: errHTTPTarget, reason: string(errHTTPTarget)},
		{name: "network-path target", in: "GET //other.test/x HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "servers read a target starting // as a path; Host decides",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "options asterisk", in: "OPTIONS * HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "asterisk form is valid; Host decides",
			kind: HTTP, host: "app.test", method: "OPTIONS", allow: true, reason: ReasonHostMatch},
		{name: "lower-case method", in: "get / HTTP/1.1\r\nHost: other.test\r\n\r\n",
			why:  "lenient servers (Go's) accept any token method: a line ending in HTTP/1.x is HTTP whatever its method",
			kind: HTTP, host: "other.test", method: "get", reason: ReasonHostMismatch},
		{name: "unknown method", in: "PURGE /x HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "extension methods are fine when the Host is",
			kind: HTTP, host: "app.test", method: "PURGE", allow: true, reason: ReasonHostMatch},
		{name: "connect", in: "CONNECT app.test:443 HTTP/1.1\r\nHost: app.test:443\r\n\r\n",
			why:  "the gateway is not a proxy: CONNECT is refused even to the flow's own name",
			kind: HTTP, host: "app.test", port: "443", method: "CONNECT", reason: ReasonConnect},
		{name: "http/1.0 without host", in: "GET / HTTP/1.0\r\nAccept: */*\r\n\r\n",
			why:  "no Host to check: the server would pick its default host",
			kind: HTTP, method: "GET", reason: ReasonNoHost},
		{name: "http/1.1 without host", in: get + "\r\n",
			why:  "same as HTTP/1.0: nothing to check",
			kind: HTTP, method: "GET", reason: ReasonNoHost},
		{name: "empty host", in: get + "Host:\r\n\r\n",
			why:  "an empty Host is no host",
			kind: HTTP, method: "GET", reason: ReasonNoHost},
		{name: "ipv6 literal host", in: get + "Host: [::1]:80\r\n\r\n",
			why:  "bracketed IPv6 literal parses; an address is never the flow's name",
			kind: HTTP, host: "::1", port: "80", method: "GET", reason: ReasonHostMismatch},
		{name: "ipv6 literal with zone", in: get + "Host: [fe80::1%25eth0]\r\n\r\n",
			why:  "zone identifiers have no place in a Host",
			kind: HTTP, err: errHTTPIPv6, reason: string(errHTTPIPv6)},
		{name: "ipv4 in brackets", in: get + "Host: [127.0.0.1]\r\n\r\n",
			why:  "brackets hold IPv6 literals only",
			kind: HTTP, err: errHTTPIPv6, reason: string(errHTTPIPv6)},
		{name: "percent-encoded host", in: get + "Host: app%2etest\r\n\r\n",
			why:  "some servers decode it, others do not: refused",
			kind: HTTP, err: errHTTPHostChar, reason: string(errHTTPHostChar)},
		{name: "host list", in: get + "Host: app.test, other.test\r\n\r\n",
			why:  "one host only",
			kind: HTTP, err: errHTTPHostChar, reason: string(errHTTPHostChar)},
		{name: "empty port", in: get + "Host: app.test:\r\n\r\n",
			why:  "an empty port is ambiguous",
			kind: HTTP, err: errHTTPPort, reason: string(errHTTPPort)},
		{name: "port too big", in: get + "Host: app.test:65536\r\n\r\n",
			why:  "not a port",
			kind: HTTP, err: errHTTPPort, reason: string(errHTTPPort)},
		{name: "h2c prior knowledge", in: h2Preface,
			why:  "the authority travels HPACK-compressed later: not checkable",
			kind: HTTP2, reason: ReasonH2C},
		{name: "h2c preface and settings", in: h2Preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00",
			why:  "what follows the preface does not matter",
			kind: HTTP2, reason: ReasonH2C},
		{name: "h2c upgrade", in: get + "Host: app.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: websocket, H2C\r\n\r\n",
			why:  "after the upgrade, requests are HTTP/2 with authorities the check cannot see",
			kind: HTTP, host: "app.test", method: "GET", reason: ReasonH2CUpgrade},
		{name: "websocket upgrade", in: get + "Host: app.test\r\nUpgrade: websocket\r\n\r\n",
			why:  "other upgrades are fine",
			kind: HTTP, host: "app.test", method: "GET", allow: true, reason: ReasonHostMatch},
		{name: "leading empty line", in: "\r\n" + get + "Host: other.test\r\n\r\n",
			why:  "servers skip empty lines before the request line; so does the check",
			kind: HTTP, host: "other.test", method: "GET", reason: ReasonHostMismatch},
		{name: "ssh banner with comment", in: "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n",
			why:  "a client-first text banner that is not HTTP passes without waiting",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "ssh banner", in: "SSH-2.0-Go\r\n\x00\x00\x01\x0c",
			why:  "no space before the line ends: not a request line",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "smtp command", in: "EHLO client.test\r\n",
			why:  "a text command without an HTTP version is Other",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "memcached get", in: "get some_key\r\n",
			why:  "lower-case get is not a common method, and the line has no version",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "redis resp", in: "*1\r\n$4\r\nPING\r\n",
			why:  "RESP arrays are not request lines",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "binary garbage", in: "\x00\x01\x02\x03\xff\xfe",
			why:  "a first byte that is no token character decides at once",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "postgres startup", in: "\x00\x00\x00\x08\x04\xd2\x16\x2f",
			why:  "binary client-first protocols pass",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "token then binary", in: "Hello \x00\x01",
			why:  "a control byte in the first line shows it is not text",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "http/0.9", in: "GET /\r\n",
			why:  "HTTP/0.9 has no Host; a server would serve its default host",
			kind: HTTP, err: errHTTPNoVersion, reason: string(errHTTPNoVersion)},
		{name: "redis inline get", in: "GET key\r\n",
			why:  "committed by the method: indistinguishable from HTTP/0.9, refused (documented trade-off)",
			kind: HTTP, err: errHTTPNoVersion, reason: string(errHTTPNoVersion)},
		{name: "obs-fold", in: get + "Host: app.test\r\n other.test\r\n\r\n",
			why:  "folded lines are read differently by different parsers",
			kind: HTTP, err: errHTTPObsFold, reason: string(errHTTPObsFold)},
		{name: "bare lf line end", in: "GET / HTTP/1.1\nHost: other.test\n\n",
			why:  "lenient servers accept bare LF; we refuse rather than guess",
			kind: HTTP, err: errHTTPBareLF, reason: string(errHTTPBareLF)},
		{name: "bare cr in header", in: get + "Host: app.test\rHost: other.test\r\n\r\n",
			why:  "a CR inside a line can end it for one parser and not another",
			kind: HTTP, err: errHTTPBareCR, reason: string(errHTTPBareCR)},
		{name: "bare cr after the method", in: "GET\r/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
			why:  "Python's http.server (and wsgiref, Django's runserver) split the request line on any whitespace, CR included: it serves this GET for other.test",
			kind: HTTP, err: errHTTPBareCR, reason: string(errHTTPBareCR)},
		{name: "bare cr before the version", in: "FOO x\rHTTP/1.1\r\nHost: other.test\r\n\r\n",
			why:  "the same split makes this a FOO request with version HTTP/1.1",
			kind: HTTP, err: errHTTPBareCR, reason: string(errHTTPBareCR)},
		{name: "token line ending in crlf", in: "STARTTLS\r\n",
			why:  "a lone command with its CRLF is still Other",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "nul in header value", in: get + "Host: app.test\x00.other.test\r\n\r\n",
			why:  "NUL truncates names in C servers",
			kind: HTTP, err: errHTTPHeaderValue, reason: string(errHTTPHeaderValue)},
		{name: "nul in request line", in: "GET /\x00 HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "control characters are not allowed in a request line",
			kind: HTTP, err: errHTTPCtl, reason: string(errHTTPCtl)},
		{name: "space before colon", in: get + "Host : other.test\r\n\r\n",
			why:  "whitespace between name and colon is a smuggling classic (RFC 9112 §5.1)",
			kind: HTTP, err: errHTTPHeaderName, reason: string(errHTTPHeaderName)},
		{name: "space in target", in: "GET /a b HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "exactly two spaces in a request line",
			kind: HTTP, err: errHTTPRequestLine, reason: string(errHTTPRequestLine)},
		{name: "unknown method, space in target", in: "FOO /a b HTTP/1.1\r\nHost: other.test\r\n\r\n",
			why:  "a line ending in HTTP/1.1 commits to HTTP: malformed, never Other",
			kind: HTTP, err: errHTTPRequestLine, reason: string(errHTTPRequestLine)},
		{name: "tab separator", in: "GET\t/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
			why:  "Python's http.server splits a request line on any whitespace: a tab is refused, never Other",
			kind: HTTP, err: errHTTPRequestLine, reason: string(errHTTPRequestLine)},
		{name: "http/2.0 request line", in: "GET / HTTP/2.0\r\nHost: app.test\r\n\r\n",
			why:  "only HTTP/1.x heads are parsed",
			kind: HTTP, err: errHTTPVersion, reason: string(errHTTPVersion)},
		{name: "non-ascii target", in: "GET /\xff HTTP/1.1\r\nHost: app.test\r\n\r\n",
			why:  "targets are ASCII; clients percent-encode",
			kind: HTTP, err: errHTTPTarget, reason: string(errHTTPTarget)},
		{name: "proxy protocol v1", in: "PROXY TCP4 192.0.2.1 192.0.2.2 1234 80\r\n" + get + "Host: other.test\r\n\r\n",
			why:  "the worker may not claim a client address, nor hide a request behind the header",
			kind: ProxyProtocol, reason: ReasonProxyProto},
		{name: "proxy protocol v2", in: proxyV2Sig + "\x21\x11\x00\x0c",
			why:  "the binary form likewise",
			kind: ProxyProtocol, reason: ReasonProxyProto},
		{name: "head beyond the hold", in: huge,
			why:  "a head that does not fit MaxHold is refused, not held without bound",
			kind: HTTP, err: errHTTPIncomplete, reason: string(errHTTPIncomplete)},
		{name: "incomplete head", in: get + "Host: app.test\r\n",
			why:  "the head has not ended: Classify waits; at the deadline it is refused",
			kind: HTTP, err: errHTTPIncomplete, reason: string(errHTTPIncomplete), partial: true},
		{name: "stalled token", in: "SSH-2.0-Open",
			why:  "a stalled line that could still become a request is refused at the deadline",
			kind: HTTP, err: errHTTPIncomplete, reason: string(errHTTPIncomplete), partial: true},
		{name: "stalled h2c preface", in: h2Preface[:10],
			why:  "a stalled preface is refused at the deadline",
			kind: HTTP2, err: errH2Incomplete, reason: string(errH2Incomplete), partial: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			r := checkStable(t, in, true)
			if c := Classify(in); c.NeedMore != tt.partial {
				t.Errorf("Classify NeedMore = %v, want %v (%s)", c.NeedMore, tt.partial, tt.why)
			}
			if r.Kind != tt.kind || r.Err != tt.err || r.Host != tt.host || r.Port != tt.port || r.Method != tt.method {
				t.Errorf("got kind %v err %v host %q port %q method %q; want %v %v %q %q %q (%s)",
					r.Kind, r.Err, r.Host, r.Port, r.Method, tt.kind, tt.err, tt.host, tt.port, tt.method, tt.why)
			}
			v := Check("app.test", 80, r, true, true)
			if v.Allow != tt.allow || v.Reason != tt.reason {
				t.Errorf("Check = %+v, want allow %v reason %q (%s)", v, tt.allow, tt.reason, tt.why)
			}
			checkAgainstGo(t, in, r)
		})
	}
}

// TestClassifyHTTPByteByByte feeds a request one byte at a time and checks
// the decision comes exactly with the head's last byte.
func TestClassifyHTTPByteByByte(t *testing.T) {
	in := []byte("POST /submit HTTP/1.1\r\nHost: app.test:8080\r\nContent-Length: 3\r\n\r\nabc")
	end := strings.Index(string(in), "\r\n\r\n") + 4
	for n := 0; n < end; n++ {
		if r := Classify(in[:n]); !r.NeedMore {
			t.Fatalf("decided after %d of %d bytes: %+v", n, end, r)
		}
	}
	for n := end; n <= len(in); n++ {
		r := Classify(in[:n])
		if r.Kind != HTTP || r.Host != "app.test" || r.Port != "8080" || r.Method != "POST" || r.Err != nil {
			t.Fatalf("%d bytes: %+v", n, r)
		}
		if v := Check("app.test", 8080, r, true, true); !v.Allow || v.HTTPHost != "app.test:8080" {
			t.Fatalf("Check = %+v", v)
		}
	}
}
