package netstack

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/lab/internet"
)

// sniServer is a quic-go server on loopback (an early listener, as an
// HTTP/3 server is) that records the SNI of every ClientHello its TLS
// stack reads: it is the judge of which connections were started.
type sniServer struct {
	addr string
	mu   sync.Mutex
	snis []string
}

func newSNIServer(t *testing.T) *sniServer {
	t.Helper()
	ca, err := internet.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue([]string{"app.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sniServer{addr: pc.LocalAddr().String()}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h3"}}
	conf.GetConfigForClient = func(ch *tls.ClientHelloInfo) (*tls.Config, error) {
		s.mu.Lock()
		s.snis = append(s.snis, ch.ServerName)
		s.mu.Unlock()
		return nil, nil
	}
	tr := &quic.Transport{Conn: pc}
	ln, err := tr.ListenEarly(conf, &quic.Config{Allow0RTT: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			_ = c
		}
	}()
	t.Cleanup(func() { cancel(); ln.Close(); tr.Close(); pc.Close() })
	return s
}

func (s *sniServer) saw(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.snis, name)
}

// quicClientHello is a real TLS 1.3 ClientHello for QUIC (crypto/tls's
// QUIC client, one X25519 key share), naming sni, whose transport
// parameters give scid as the initial source connection ID.
// spliceHellos returns a real QUIC client's ClientHello naming bad.test,
// the same one naming app.test, and k, where the name starts in both.
func spliceHellos(t *testing.T, scid []byte) (good, bad []byte, k int) {
	t.Helper()
	bad = quicClientHello(t, "bad.test", scid)
	k = bytes.Index(bad, []byte("bad.test"))
	good = bytes.Clone(bad)
	copy(good[k:], "app.test")
	return good, bad, k
}

func quicClientHello(t *testing.T, sni string, scid []byte) []byte {
	t.Helper()
	qc := tls.QUICClient(&tls.QUICConfig{TLSConfig: &tls.Config{
		ServerName: sni, NextProtos: []string{"h3"}, MinVersion: tls.VersionTLS13,
		CurvePreferences: []tls.CurveID{tls.X25519}, InsecureSkipVerify: true,
	}})
	tp := []byte{0x0f, byte(len(scid))}
	tp = append(tp, scid...)
	qc.SetTransportParameters(tp)
	if err := qc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ch []byte
	for ev := qc.NextEvent(); ev.Kind != tls.QUICNoEvent; ev = qc.NextEvent() {
		if ev.Kind == tls.QUICWriteData && ev.Level == tls.QUICEncryptionLevelInitial {
			ch = append(ch, ev.Data...)
		}
	}
	if len(ch) == 0 {
		t.Fatal("no ClientHello")
	}
	return ch
}

func buildInitial(t *testing.T, p l7.QUICInitial) []byte {
	t.Helper()
	b, err := l7.BuildQUICInitial(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// zeroRTT is a QUIC v1 0-RTT long-header packet of the connection dcid
// whose payload no one can read.
func zeroRTT(dcid, scid []byte) []byte {
	b := []byte{0xc0 | 1<<4 | 3}
	b = append(b, 0, 0, 0, 1, byte(len(dcid)))
	b = append(b, dcid...)
	b = append(b, byte(len(scid)))
	b = append(b, scid...)
	payload := bytes.Repeat([]byte{0x5a}, 40)
	b = append(b, 0x40|byte(len(payload)>>8), byte(len(payload)))
	return append(b, payload...)
}

// serverSCID returns the Source Connection ID of the server's long-header
// packet d (its connection ID for the client's connection).
func serverSCID(d []byte) []byte {
	if len(d) < 7 || d[0]&0x80 == 0 {
		return nil
	}
	p := 6 + int(d[5])
	if len(d) < p+1 || len(d) < p+1+int(d[p]) {
		return nil
	}
	return d[p+1 : p+1+int(d[p])]
}

// TestQUICWatchSplice: after a first connection passed, a second
// connection's ClientHello is read by the watch from two Initials naming
// app.test, but the server reads the part after the name from another
// Initial the watch passes unread, so that it reads a ClientHello naming
// bad.test. The server (quic-go) is the judge.
func TestQUICWatchSplice(t *testing.T) {
	for _, tc := range []struct{ name, why string }{
		// A datagram sent before the two, led by a 0-RTT packet,
		// carries an Initial with packet number 1002 in one byte: the
		// watch decodes it as 234 (no packet seen yet), cannot decrypt
		// it and passes it; the server queues the datagram (0-RTT before
		// its Initial), hands it to the connection after the first
		// Initial (1000), decodes 1002, takes the tail of a ClientHello
		// naming bad.test from it, and drops the second approved
		// Initial (1002) as a duplicate.
		{"0-rtt queue", "an Initial behind a 0-RTT packet"},
		// The second approved Initial has its fixed bit clear: the
		// watch reads it, the server drops it. The server acknowledges
		// the first one with its own connection ID; an Initial under
		// that ID, with the keys of the client's, carries the tail of a
		// ClientHello naming bad.test: the watch cannot decrypt it with
		// the ID's own keys and passes it, the server's connection takes
		// it.
		{"fixed bit", "an approved Initial the server drops, the gap filled under the server's ID"},
		// The same on the flow's first connection, which the gate
		// reads: no watch is needed.
		{"fixed bit, first connection", "the gate's own ClientHello spliced the same way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newSNIServer(t)
			h, _ := quicHarness(t)
			h.dialer.route("udp", "203.0.113.10:443", srv.addr)
			c := h.dialUDP(t, "198.18.0.10:443")

			if tc.name == "fixed bit, first connection" {
				spliceFirst(t, srv, h, c)
				return
			}
			// The first connection: app.test, checked by the gate.
			d1, s1 := []byte("first-connection"), []byte("scid-one")
			c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: d1, SCID: s1,
				Payload: l7.QUICCryptoFrame(0, quicClientHello(t, "app.test", s1)), PadTo: 1200}))
			buf := make([]byte, 2000)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(buf); err != nil {
				t.Fatalf("first connection: no answer from the server: %v", err)
			}
			_, seq := h.sink.flow(t, "198.18.0.10:443")
			// Drain the first connection's answers.
			for {
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := c.Read(buf); err != nil {
					break
				}
			}

			// The second connection.
			dcid, scid := []byte("second-connection"), []byte("scid-two")
			good, bad, k := spliceHellos(t, scid)
			switch tc.name {
			case "0-rtt queue":
				z := zeroRTT(dcid, scid)
				a := append(z, buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
					PN: 1002, PNLen: 1, Payload: l7.QUICCryptoFrame(k, bad[k:]), PadTo: 1200 - len(z)})...)
				c.Write(a)
				time.Sleep(20 * time.Millisecond)
				c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
					PN: 1000, PNLen: 2, Payload: l7.QUICCryptoFrame(0, good[:k]), PadTo: 1200}))
				c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
					PN: 1002, PNLen: 2, Payload: l7.QUICCryptoFrame(k, good[k:]), PadTo: 1200}))
			case "fixed bit":
				c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
					PN: 0, Payload: l7.QUICCryptoFrame(0, good[:k]), PadTo: 1200}))
				c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
					PN: 1, Payload: l7.QUICCryptoFrame(k, good[k:]), PadTo: 1200, ClearFixedBit: true}))
				// The server's acknowledgement names its connection ID.
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := c.Read(buf)
				if err != nil {
					break // the connection was refused: nothing to learn
				}
				sid := serverSCID(buf[:n])
				if len(sid) == 0 {
					t.Fatalf("the server's answer has no connection ID: % x", buf[:min(n, 32)])
				}
				c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: sid, KeyDCID: dcid, SCID: scid,
					PN: 2, Payload: l7.QUICCryptoFrame(k, bad[k:]), PadTo: 1200}))
			}

			checkUnspliced(t, h, srv, seq, tc.why)
		})
	}
}

// spliceFirst is TestQUICWatchSplice's "fixed bit" case on the flow's
// first connection, read by the gate.
func spliceFirst(t *testing.T, srv *sniServer, h *harness, c net.Conn) {
	dcid, scid := []byte("first-connection"), []byte("scid-one")
	good, bad, k := spliceHellos(t, scid)
	c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
		PN: 0, Payload: l7.QUICCryptoFrame(0, good[:k]), PadTo: 1200}))
	c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
		PN: 1, Payload: l7.QUICCryptoFrame(k, good[k:]), PadTo: 1200, ClearFixedBit: true}))
	buf := make([]byte, 2000)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := c.Read(buf); err == nil {
		if sid := serverSCID(buf[:n]); len(sid) > 0 {
			c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: sid, KeyDCID: dcid, SCID: scid,
				PN: 2, Payload: l7.QUICCryptoFrame(k, bad[k:]), PadTo: 1200}))
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !srv.saw("bad.test") {
		time.Sleep(20 * time.Millisecond)
	}
	srv.mu.Lock()
	t.Logf("server read SNIs %q", srv.snis)
	srv.mu.Unlock()
	if srv.saw("bad.test") {
		t.Fatal("the server read a ClientHello naming bad.test on a flow opened to app.test")
	}
	_, seq := h.sink.flow(t, "198.18.0.10:443")
	if l := h.sink.l7Of(t, seq); l.Action != "deny" {
		t.Fatalf("the first connection was not refused: %+v", l)
	}
}

// TestQUICWatchSpliceLostInitial: the gateway reads an approved Initial
// that the server never gets (here a datagram longer than the 1452 bytes
// quic-go reads, which it drops truncated; on a real path, any lost
// datagram). Its packet number (200) is then the largest the gateway has
// seen, while the server's is 0: an Initial under the server's connection
// ID with packet number 1 in one byte decodes to 257 for the gateway,
// which cannot decrypt it, and to 1 for the server, which can and reads
// the tail of a ClientHello naming bad.test from it. The server (quic-go)
// is the judge; both the flow's first connection (read by the gate) and
// a second one (read by the watch) are tried, and a second one the watch
// forgot (16 later connections) before the filler came.
func TestQUICWatchSpliceLostInitial(t *testing.T) {
	for _, name := range []string{"first connection", "second connection", "forgotten"} {
		second := name != "first connection"
		t.Run(name, func(t *testing.T) {
			srv := newSNIServer(t)
			h, _ := quicHarness(t)
			h.dialer.route("udp", "203.0.113.10:443", srv.addr)
			c := h.dialUDP(t, "198.18.0.10:443")
			buf := make([]byte, 2000)
			dcid, scid := []byte("first-connection"), []byte("scid-one")
			if second {
				c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
					Payload: l7.QUICCryptoFrame(0, quicClientHello(t, "app.test", scid)), PadTo: 1200}))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(buf); err != nil {
					t.Fatalf("first connection: no answer from the server: %v", err)
				}
				for {
					c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				dcid, scid = []byte("second-connection"), []byte("scid-two")
			}
			good, bad, k := spliceHellos(t, scid)
			c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
				PN: 0, Payload: l7.QUICCryptoFrame(0, good[:k]), PadTo: 1200}))
			c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: scid,
				PN: 200, PNLen: 2, Payload: l7.QUICCryptoFrame(k, good[k:]), PadTo: 1460}))
			// The server's answer to this connection (sent to scid)
			// names its connection ID.
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			for {
				n, err := c.Read(buf)
				if err != nil {
					break
				}
				if n < 7 || buf[0]&0x80 == 0 || !bytes.Equal(buf[6:6+min(int(buf[5]), n-6)], scid) {
					continue
				}
				if sid := serverSCID(buf[:n]); len(sid) > 0 {
					pn := uint32(1) // decoded as 257 by the gateway
					if name == "forgotten" {
						// 16 more connections naming app.test make
						// the watch forget this one, and with it the
						// server's ID: it no longer reads the filler,
						// even with a packet number it would decode
						// as the server does.
						for i := range 16 {
							id := []byte(fmt.Sprintf("filler-conn-%02d", i))
							c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: id, SCID: id[:8],
								Payload: l7.QUICCryptoFrame(0, quicClientHello(t, "app.test", id[:8])), PadTo: 1200}))
						}
						time.Sleep(200 * time.Millisecond)
						pn = 201
					}
					c.Write(buildInitial(t, l7.QUICInitial{Version: l7.QUICv1, DCID: sid, KeyDCID: dcid, SCID: scid,
						PN: pn, PNLen: 1, Payload: l7.QUICCryptoFrame(k, bad[k:]), PadTo: 1200}))
					break
				}
			}
			_, seq := h.sink.flow(t, "198.18.0.10:443")
			checkUnspliced(t, h, srv, seq, "the spliced Initial")
		})
	}
}

// checkUnspliced waits up to 2 s for the server to read a ClientHello
// naming bad.test and fails if it did, or if flow seq has no l7 deny
// record (why says what was refused).
func checkUnspliced(t *testing.T, h *harness, srv *sniServer, seq uint64, why string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !srv.saw("bad.test") {
		time.Sleep(20 * time.Millisecond)
	}
	recs := h.sink.l7Records(seq)
	srv.mu.Lock()
	t.Logf("server read SNIs %q; l7 records %+v", srv.snis, recs)
	srv.mu.Unlock()
	if srv.saw("bad.test") {
		t.Fatalf("%s: the server read a ClientHello naming bad.test on a flow opened to app.test", why)
	}
	if !slices.ContainsFunc(recs, func(l audit.L7) bool { return l.Action == "deny" }) {
		t.Fatalf("%s: no l7 deny record", why)
	}
}
