package l7

import (
	"bufio"
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// captureConn is a net.Conn for one side of a TLS handshake run without a
// peer: writes are recorded, reads serve in (then EOF). No goroutines.
type captureConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *captureConn) Read(p []byte) (int, error) {
	if c.in == nil {
		return 0, io.EOF
	}
	return c.in.Read(p)
}
func (c *captureConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *captureConn) Close() error                     { return nil }
func (c *captureConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *captureConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *captureConn) SetDeadline(time.Time) error      { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error  { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }

// goClientHello returns the first bytes crypto/tls's client sends with cfg:
// its ClientHello, in one record.
func goClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &captureConn{}
	err := tls.Client(c, cfg).Handshake()
	if err == nil {
		t.Fatal("handshake without a server succeeded")
	}
	if c.out.Len() == 0 {
		t.Fatalf("client wrote nothing: %v", err)
	}
	return c.out.Bytes()
}

// helloFor is a ClientHello from crypto/tls for serverName ("" means none:
// crypto/tls then sends no server_name extension).
func helloFor(t testing.TB, serverName string) []byte {
	return goClientHello(t, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""})
}

// echHello is a real ECH ClientHello from crypto/tls: the inner name is
// inner, the outer (cleartext) server_name is the config's public name.
func echHello(t testing.TB, inner, public string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.PublicKey().Bytes()
	// ECHConfigContents (draft-ietf-tls-esni §4): config_id, kem_id
	// (X25519 HKDF-SHA256), public_key, cipher_suites (HKDF-SHA256,
	// AES-128-GCM), maximum_name_length, public_name, extensions.
	var c []byte
	c = append(c, 7, 0x00, 0x20)
	c = append(c, byte(len(pub)>>8), byte(len(pub)))
	c = append(c, pub...)
	c = append(c, 0, 4, 0x00, 0x01, 0x00, 0x01)
	c = append(c, 0, byte(len(public)))
	c = append(c, public...)
	c = append(c, 0, 0)
	cfg := append([]byte{0xfe, 0x0d, byte(len(c) >> 8), byte(len(c))}, c...)
	list := append([]byte{byte(len(cfg) >> 8), byte(len(cfg))}, cfg...)
	return goClientHello(t, &tls.Config{
		ServerName:                     inner,
		MinVersion:                     tls.VersionTLS13,
		EncryptedClientHelloConfigList: list,
	})
}

// resplit re-frames the handshake bytes carried by the records in b into
// records whose payloads have the given sizes (the last size repeats).
func resplit(t testing.TB, b []byte, sizes ...int) []byte {
	t.Helper()
	var payload []byte
	for len(b) > 0 {
		if len(b) < 5 || b[0] != recordTypeHandshake {
			t.Fatalf("resplit: not a handshake record: % x", b[:min(len(b), 5)])
		}
		n := int(b[3])<<8 | int(b[4])
		payload = append(payload, b[5:5+n]...)
		b = b[5+n:]
	}
	return frame(payload, sizes...)
}

// frame wraps handshake bytes in records of the given payload sizes (the
// last size repeats), with record version 0x0301.
func frame(payload []byte, sizes ...int) []byte {
	var out []byte
	for i := 0; len(payload) > 0; i++ {
		n := sizes[min(i, len(sizes)-1)]
		n = min(n, len(payload))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

// ext is one ClientHello extension for handBuilt hellos.
type ext struct {
	typ  uint16
	data []byte
}

func u16(n int) []byte { return []byte{byte(n >> 8), byte(n)} }

// sniExt is a server_name extension with one host_name entry per name.
func sniExt(names ...string) ext {
	var list []byte
	for _, n := range names {
		list = append(list, sniHostName)
		list = append(list, u16(len(n))...)
		list = append(list, n...)
	}
	return ext{extServerName, append(u16(len(list)), list...)}
}

// helloMsg is a handshake message holding a ClientHello with exts (nil:
// no extensions block at all).
func helloMsg(exts []ext) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, randomLen)...)
	body = append(body, 32)
	body = append(body, bytes.Repeat([]byte{0xaa}, 32)...)
	body = append(body, 0, 4, 0x13, 0x01, 0xc0, 0x2f)
	body = append(body, 1, 0)
	if exts != nil {
		var e []byte
		for _, x := range exts {
			e = append(e, u16(int(x.typ))...)
			e = append(e, u16(len(x.data))...)
			e = append(e, x.data...)
		}
		body = append(body, u16(len(e))...)
		body = append(body, e...)
	}
	n := len(body)
	return append([]byte{handshakeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// handHello is helloMsg in one record.
func handHello(exts ...ext) []byte { return frame(helloMsg(exts), maxRecordPayload) }

// checkInvariants fails t if r breaks Result's documented contract.
func checkInvariants(t testing.TB, r Result) {
	t.Helper()
	if r.NeedMore != (r.Kind == Unknown) {
		t.Fatalf("NeedMore=%v with Kind %v", r.NeedMore, r.Kind)
	}
	if r.NeedMore && r != (Result{NeedMore: true}) {
		t.Fatalf("NeedMore with fields set: %+v", r)
	}
	if r.Err != nil {
		var e Error
		if !errors.As(r.Err, &e) {
			t.Fatalf("Err %T is not an Error", r.Err)
		}
		if r.Kind == Other || r.Kind == Unknown {
			t.Fatalf("Err %v with Kind %v", r.Err, r.Kind)
		}
		if r.SNI != "" || r.Host != "" || r.Port != "" {
			t.Fatalf("Err %v with names set: %+v", r.Err, r)
		}
	}
	if r.Kind != TLS && (r.SNI != "" || r.ECH) {
		t.Fatalf("SNI on Kind %v: %+v", r.Kind, r)
	}
	if r.Kind != HTTP && (r.Host != "" || r.Port != "" || r.Method != "" || r.Absolute || r.UpgradeH2C) {
		t.Fatalf("HTTP fields on Kind %v: %+v", r.Kind, r)
	}
	if r.Kind == HTTP && r.Err == nil && r.Method == "" {
		t.Fatalf("HTTP without a method: %+v", r)
	}
	for _, s := range []string{r.SNI, r.Host} {
		if s != strings.ToLower(s) || strings.HasSuffix(s, ".") || strings.ContainsAny(s, "\x00\r\n []@%/:") && !strings.Contains(r.authority, "[") {
			t.Fatalf("name %q not normalized: %+v", s, r)
		}
	}
	if r.Port != "" && (r.Port[0] == '0' && r.Port != "0" || len(r.Port) > 5) {
		t.Fatalf("port %q not canonical", r.Port)
	}
}

// checkStable checks the prefix contract on b: every prefix's result keeps
// the invariants, and a prefix that decides decides as b does; ClassifyFinal
// always decides, and agrees with Classify where Classify decides. Every
// prefix is tried up to 256 bytes; beyond, and beyond 24 with every=false
// (fuzzing), evenly spaced ones and the input one byte short. It returns
// ClassifyFinal(b).
func checkStable(t testing.TB, b []byte, every bool) Result {
	t.Helper()
	full := ClassifyFinal(b)
	checkInvariants(t, full)
	if full.NeedMore {
		t.Fatalf("ClassifyFinal asked for more: %q", b)
	}
	if r := Classify(b); !r.NeedMore && r != full {
		t.Fatalf("Classify %+v != ClassifyFinal %+v", r, full)
	}
	limit := 256
	if !every {
		limit = 24 // fuzzing: keep each run cheap, the fuzzer varies lengths itself
	}
	step := 1
	if len(b) > limit {
		step = len(b)/limit + 1
	}
	lens := make([]int, 0, limit+2)
	for n := 0; n < len(b); n += step {
		lens = append(lens, n)
	}
	if len(b) > 0 {
		lens = append(lens, len(b)-1, len(b)) // one byte short, and whole
	}
	for _, n := range lens {
		r := Classify(b[:n])
		checkInvariants(t, r)
		f := ClassifyFinal(b[:n])
		checkInvariants(t, f)
		if f.NeedMore {
			t.Fatalf("ClassifyFinal(prefix %d) asked for more", n)
		}
		if r.NeedMore {
			continue
		}
		if f != r {
			t.Fatalf("prefix %d: Classify %+v != ClassifyFinal %+v", n, r, f)
		}
		if r != full {
			t.Fatalf("prefix %d of %d decided %+v, the whole input %+v", n, len(b), r, full)
		}
	}
	for _, vs := range [][2]bool{{true, true}, {false, false}, {true, false}, {false, true}} {
		v := Check("app.test", 443, full, vs[0], vs[1])
		if v.Reason == "" {
			t.Fatalf("Check(%+v) gave no reason", full)
		}
		if full.Err != nil && vs[0] && vs[1] && v.Allow {
			t.Fatalf("malformed %+v allowed", full)
		}
	}
	return full
}

// goServerSNI runs crypto/tls's server on b and reports whether it parsed
// a ClientHello, and its server name.
func goServerSNI(b []byte) (ok bool, sni string) {
	abort := errors.New("abort")
	c := &captureConn{in: bytes.NewReader(b)}
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		ok, sni = true, h.ServerName
		return nil, abort
	}}
	_ = tls.Server(c, cfg).Handshake()
	return ok, sni
}

// goRequestHost runs net/http's request parser on b and reports whether it
// parsed a request head, and the host it would serve (port stripped,
// normalized like Result.Host).
func goRequestHost(b []byte) (ok bool, host string) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return false, ""
	}
	h := req.Host
	if strings.HasPrefix(h, "[") {
		if k := strings.IndexByte(h, ']'); k > 0 {
			h = h[1:k]
		}
	} else if k := strings.IndexByte(h, ':'); k >= 0 {
		h = h[:k]
	}
	return true, strings.TrimSuffix(strings.ToLower(h), ".")
}

// checkAgainstGo fails t if a parser of the Go standard library reads b as
// a ClientHello or a request while Classify lets it pass as Other, or
// reads a different name than Classify does.
func checkAgainstGo(t testing.TB, b []byte, r Result) {
	t.Helper()
	// crypto/tls needs a handshake record first; where Classify found a
	// malformed one, what crypto/tls makes of it does not matter.
	if len(b) > 0 && b[0] == recordTypeHandshake && r.Err != nil {
		// nothing to compare
	} else if ok, sni := goServerSNI(b); ok {
		if r.Kind != TLS {
			t.Fatalf("crypto/tls parsed a ClientHello (sni %q); Classify: %+v", sni, r)
		}
		if r.Err == nil && r.SNI != strings.ToLower(sni) {
			t.Fatalf("crypto/tls read sni %q; Classify %q", sni, r.SNI)
		}
	}
	if len(b) > 0 && b[0] == recordTypeHandshake {
		return // net/http never reads a request starting with 0x16
	}
	if ok, host := goRequestHost(b); ok {
		if r.Kind != HTTP && r.Kind != HTTP2 && r.Kind != ProxyProtocol {
			t.Fatalf("net/http parsed a request (host %q); Classify: %+v", host, r)
		}
		if r.Kind == HTTP && r.Err == nil && r.Host != host {
			t.Fatalf("net/http read host %q; Classify %q", host, r.Host)
		}
	}
}
