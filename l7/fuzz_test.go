package l7

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
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

// FuzzHTTPStream checks, on arbitrary worker bytes after an allowed first
// request, that HTTPStream never panics, never keeps more than MaxHold
// bytes, decides the same whichever way the bytes are cut into reads, and
// that when it lets the whole stream through, every request net/http's
// parser reads from it (bodies included) is for app.test.
func FuzzHTTPStream(f *testing.F) {
	const get = "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"
	for _, s := range []string{
		get + get,
		get + "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n\r\nhello" + get,
		"POST / HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX: y\r\n\r\n" + get,
		"POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG",
		"GET / HTTP/1.1\r\nHost: app.test\r\nUpgrade: websocket\r\n\r\n\x81\x82\x01\x02\x03\x04hi",
		"\r\nGET http://app.test:80/ HTTP/1.0\r\nHost: app.test\r\n\r\n",
		get + h2Preface,
	} {
		f.Add([]byte(s), uint16(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		whole, vw := relayThrough(NewHTTPStream("app.test", 80), data)
		size := int(cut)%97 + 1
		var parts [][]byte
		for b := data; len(b) > 0; {
			k := min(size, len(b))
			parts = append(parts, b[:k])
			b = b[k:]
		}
		split, vs := relayThrough(NewHTTPStream("app.test", 80), parts...)
		if vw != vs {
			t.Fatalf("whole: %+v, in reads of %d: %+v", vw, size, vs)
		}
		if vw.Allow && !bytes.Equal(whole, split) {
			t.Fatalf("forwarded %d bytes whole, %d in reads of %d", len(whole), len(split), size)
		}
		// With the server's answer watched and not a 101, the bytes after
		// an upgrade are requests too, so net/http may read them all.
		ns := NewHTTPStream("app.test", 80)
		ns.WatchUpgrade(func() (bool, bool) { return true, false })
		if fwd, v := relayThrough(ns, data); v.Allow && len(fwd) == len(data) {
			allForApp(t, data)
		}
		if !vw.Allow || len(whole) != len(data) {
			return
		}
		allForApp(t, data)
	})
}

// allForApp fails t if net/http's parser reads from data a request for a
// host other than app.test.
func allForApp(t *testing.T, data []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(data))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, host := goRequestHost([]byte(req.Method + " / HTTP/1.1\r\nHost: " + req.Host + "\r\n\r\n")); host != "app.test" {
			t.Fatalf("net/http read a request for %q (%q) from a stream let through", req.Host, req.Host)
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
	}
}
