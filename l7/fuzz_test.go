package l7

import (
	"crypto/tls"
	"testing"
)

// FuzzClassifyTLS checks, on arbitrary client bytes, that Classify never
// panics, keeps Result's invariants, is prefix-stable (a prefix that
// decides decides as the whole input does), and never reads a different
// SNI than crypto/tls's server, nor lets pass as Other a ClientHello that
// crypto/tls parses.
//
// With chunk == 0, data is the client's bytes as is (record layer
// included). Otherwise data is a handshake message, framed into records of
// chunk%2^14+1 bytes: mutations then reach the ClientHello's structure
// without first breaking the record layer.
func FuzzClassifyTLS(f *testing.F) {
	withSNI := helloFor(f, "app.test")
	f.Add(withSNI, uint16(0))
	f.Add(helloFor(f, ""), uint16(0))
	f.Add(goClientHello(f, &tls.Config{ServerName: "app.test", MaxVersion: tls.VersionTLS12}), uint16(0))
	f.Add(echHello(f, "secret.test", "public.test"), uint16(0))
	f.Add(resplit(f, withSNI, 100, 4000), uint16(0))
	f.Add(withSNI[5:], uint16(1))
	f.Add(withSNI[5:], uint16(99))
	f.Add(helloMsg([]ext{sniExt("App.Test.", "app.test"), {extECH, []byte{0}}}), uint16(500))
	f.Add(helloMsg([]ext{sniExt("a\x00b")}), uint16(1000))
	f.Add(helloMsg(nil), uint16(1000))
	f.Add([]byte{0x80, 0x2e, 1, 3, 1, 0, 0x15, 0, 0, 0, 0x10}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		in := data
		if chunk != 0 {
			in = frame(data, int(chunk)%maxRecordPayload+1)
		}
		r := checkStable(t, in, false)
		checkAgainstGo(t, in, r)
	})
}

// FuzzClassifyHTTP checks, on arbitrary client bytes, that Classify never
// panics, keeps Result's invariants, is prefix-stable, and that whatever
// net/http's request parser accepts is never Other and, when Classify
// finds a well-formed HTTP head, has the host Classify read.
func FuzzClassifyHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n",
		"GET http://App.Test.:8080/x HTTP/1.1\r\nHost: app.test:8080\r\nUpgrade: h2c\r\n\r\n",
		"get /a HTTP/1.0\r\n\r\n",
		"CONNECT app.test:443 HTTP/1.1\r\nHost: app.test:443\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		"\r\nPOST /x HTTP/1.1\r\nhost: a.test\r\nContent-Length: 1\r\n\r\nx",
		"GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"FOO /a b HTTP/1.1\r\nHost: b\r\n\r\n",
		h2Preface,
		"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\n",
		proxyV2Sig,
		"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n",
		"EHLO x\r\n",
		"GET /\r\n",
		"\x00\x01\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := checkStable(t, data, false)
		checkAgainstGo(t, data, r)
	})
}
