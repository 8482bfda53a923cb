package l7

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
)

// tlsThrough feeds parts to s and returns how many bytes went upstream and
// the last verdict.
func tlsThrough(s *TLSStream, parts ...[]byte) (fwd int, v Verdict) {
	for _, p := range parts {
		n, v := s.Next(p)
		fwd += n
		if !v.Allow {
			return fwd, v
		}
		if n != len(p) {
			panic("TLSStream held bytes back")
		}
	}
	return fwd, Verdict{Allow: true}
}

func TestTLSStream(t *testing.T) {
	app := helloFor(t, "app.test")
	evil := helloFor(t, "evil.test")
	ccs := []byte{20, 3, 3, 0, 1, 1}
	appData := []byte{23, 3, 3, 0, 5, 1, 2, 3, 4, 5}
	alert := []byte{21, 3, 3, 0, 2, 1, 90} // warning, user_canceled
	// A TLS 1.2 encrypted Finished that happens to start like a
	// ClientHello header whose length runs past the record.
	noise := []byte{22, 3, 3, 0, 8, 1, 0xff, 0xff, 0xff, 9, 9, 9, 9}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name   string
		in     []byte
		reason string // "" for a control
		sni    string
		why    string
	}{
		{name: "first hello only", in: cat(app, appData),
			why: "the first ClientHello is checked again and passes"},
		{name: "second hello, same name", in: cat(app, ccs, app, appData),
			why: "a second ClientHello after a HelloRetryRequest names the same host"},
		{name: "encrypted noise", in: cat(app, ccs, noise, appData, noise),
			why: "an encrypted handshake record that starts like a hello is noise: its length runs past every later record"},
		{name: "second hello, other name", in: cat(app, ccs, evil), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "OpenSSL servers take the second ClientHello's name"},
		{name: "second hello after early data", in: cat(app, appData, ccs, evil), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "application data records from the worker do not end the watch"},
		{name: "second hello in one-byte records", in: cat(app, resplit(t, evil, 1)), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "a message split over records is reassembled"},
		{name: "second hello without sni", in: cat(app, helloFor(t, "")), reason: ReasonNoSNI,
			why: "a server would pick its default host"},
		{name: "second hello pipelined with the first", in: cat(app, evil), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "a second hello pipelined with the first"},
		{name: "second hello cut by a change_cipher_spec", in: cat(app, ccs, interleave(t, evil, 1, ccs)), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "OpenSSL 3.0 reads a handshake message on across a change_cipher_spec record (and took evil.test's context)"},
		{name: "second hello cut by a warning alert", in: cat(app, ccs, interleave(t, evil, 1, alert)), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "OpenSSL 3.0 reads a handshake message on across a warning alert record"},
		{name: "second hello cut by records in its header and body", in: cat(app, interleave(t, evil, 2, alert, ccs, alert)), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "every piece of the message is reassembled, however many such records cut it"},
		{name: "second hello cut by a heartbeat and an unknown record", in: cat(app, interleave(t, evil, 3, []byte{24, 3, 3, 0, 1, 1}, []byte{30, 3, 3, 0, 0})), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "a server that ignores records it does not know (TLS 1.1 let it) reads the message on"},
		{name: "encrypted noise across an alert", in: cat(app, ccs, noise, alert, noise, appData),
			why: "noise stays noise when an alert cuts it: its length runs past what follows"},
		{name: "second hello cut by application data in its header", in: cat(app, appData, ccs, interleave(t, evil, 1, appData)), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "OpenSSL 3.0, after a HelloRetryRequest that turned down early data, skips an application data record that comes before the message header is whole (and took evil.test's context)"},
		{name: "second hello cut by application data in its body", in: cat(app, ccs, interleave(t, evil, 10, appData, appData)), reason: ReasonSNIMismatch, sni: "evil.test",
			why: "no record type ends a message in progress: a server that skips one there reads the message on"},
		{name: "second hello, same name, cut by a change_cipher_spec", in: cat(app, ccs, interleave(t, app, 1, ccs), appData),
			why: "the control: the reassembled hello names the flow's host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for how, parts := range splits(tt.in) {
				fwd, v := tlsThrough(NewTLSStream("app.test", 443), parts...)
				if tt.reason == "" {
					if !v.Allow || fwd != len(tt.in) {
						t.Fatalf("%s: %+v after %d of %d bytes (%s)", how, v, fwd, len(tt.in), tt.why)
					}
					continue
				}
				if v.Allow || v.Reason != tt.reason || v.SNI != tt.sni {
					t.Fatalf("%s: verdict %+v, want reason %q sni %q (%s)", how, v, tt.reason, tt.sni, tt.why)
				}
				if fwd >= len(tt.in) {
					t.Fatalf("%s: forwarded all %d bytes, the refused hello's last byte too (%s)", how, fwd, tt.why)
				}
			}
		})
	}
}

// interleave re-frames the handshake message carried by the records of
// hello into records of at bytes each, and puts the records ins between
// them, one after each (a record of another type inside the message).
func interleave(t testing.TB, hello []byte, at int, ins ...[]byte) []byte {
	t.Helper()
	recs := resplit(t, hello, at)
	var out []byte
	for i := 0; len(recs) > 0; i++ {
		n := 5 + (int(recs[3])<<8 | int(recs[4]))
		out = append(out, recs[:n]...)
		recs = recs[n:]
		if i < len(ins) {
			out = append(out, ins[i]...)
		} else {
			out = append(out, recs...)
			break
		}
	}
	return out
}

// TestTLSStreamRealHandshakes: whole client streams of real crypto/tls
// connections (TLS 1.2 with ChaCha20 and AES-GCM, whose encrypted
// Finished is a handshake record, and TLS 1.3; then application data and,
// for 1.2, a renegotiation-free close) pass whole.
func TestTLSStreamRealHandshakes(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"app.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	for _, cfg := range []struct {
		name  string
		max   uint16
		suite uint16
	}{
		{"tls1.2 chacha20", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256},
		{"tls1.2 aes-gcm", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		{"tls1.3", tls.VersionTLS13, 0},
	} {
		for i := 0; i < 50; i++ {
			c, s := net.Pipe()
			var sent bytes.Buffer
			done := make(chan error, 1)
			go func() {
				srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}})
				buf := make([]byte, 64)
				_, err := io.ReadFull(srv, buf[:5])
				srv.Write([]byte("bye"))
				srv.Close()
				done <- err
			}()
			var suites []uint16
			if cfg.suite != 0 {
				suites = []uint16{cfg.suite}
			}
			cli := tls.Client(teeConn{c, &sent}, &tls.Config{ServerName: "app.test", InsecureSkipVerify: true,
				MaxVersion: cfg.max, CipherSuites: suites})
			if _, err := cli.Write([]byte("hello")); err != nil {
				t.Fatalf("%s: %v", cfg.name, err)
			}
			io.ReadAll(cli)
			cli.Close()
			if err := <-done; err != nil {
				t.Fatalf("%s: server: %v", cfg.name, err)
			}
			in := sent.Bytes()
			if fwd, v := tlsThrough(NewTLSStream("app.test", 443), in); !v.Allow || fwd != len(in) {
				t.Fatalf("%s: %+v after %d of %d bytes", cfg.name, v, fwd, len(in))
			}
		}
	}
}

// teeConn copies what is written to it into w.
type teeConn struct {
	net.Conn
	w *bytes.Buffer
}

func (c teeConn) Write(p []byte) (int, error) {
	c.w.Write(p)
	return c.Conn.Write(p)
}

// FuzzTLSStream checks, on arbitrary worker bytes after a first
// ClientHello, that TLSStream never panics, forwards everything or refuses,
// and decides the same whichever way the bytes are cut into reads.
func FuzzTLSStream(f *testing.F) {
	f.Add(helloFor(f, "app.test"))
	f.Add(append(helloFor(f, "app.test"), helloFor(f, "evil.test")...))
	f.Add([]byte{22, 3, 3, 0, 8, 1, 0xff, 0xff, 0xff, 9, 9, 9, 9, 23, 3, 3, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var want *Verdict
		for how, parts := range splits(data) {
			fwd, v := tlsThrough(NewTLSStream("app.test", 443), parts...)
			if v.Allow && fwd != len(data) {
				t.Fatalf("%s: allowed but forwarded %d of %d", how, fwd, len(data))
			}
			if want == nil {
				want = &v
			} else if *want != v {
				t.Fatalf("%s: verdict %+v, another split gave %+v", how, v, *want)
			}
		}
	})
}

// BenchmarkTLSStream: the cost of following a bulk TLS flow, full
// application data records read 32 KiB at a time.
func BenchmarkTLSStream(b *testing.B) {
	rec := append([]byte{23, 3, 3, 0x40, 0}, make([]byte, 1<<14)...)
	buf := bytes.Repeat(rec, 2)
	s := NewTLSStream("app.test", 443)
	s.Next(helloFor(b, "app.test"))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if n, v := s.Next(buf); !v.Allow || n != len(buf) {
			b.Fatal(v)
		}
	}
}
