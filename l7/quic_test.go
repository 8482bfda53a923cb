package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// rfcHex reads a hex file from testdata (whitespace ignored).
func rfcHex(t testing.TB, name string) []byte {
	t.Helper()
	s, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(s)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The DCID of the RFC 9001 and RFC 9369 Appendix A examples.
const rfcDCID = "8394c8f03e515708"

// TestQUICInitialKeys checks the key schedule against RFC 9001 §A.1 and
// RFC 9369 §A.1.
func TestQUICInitialKeys(t *testing.T) {
	for _, tc := range []struct {
		name                string
		v                   *quicVersion
		secret, key, iv, hp string
	}{
		{"v1", &quicV1Params,
			"c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea",
			"1f369613dd76d5467730efcbe3b1a22d", "fa044b2f42a3fd3b46fb255c", "9f50449e04a0e810283a1e9933adedd2"},
		{"v2", &quicV2Params,
			"14ec9d6eb9fd7af83bf5a668bc17a7e283766aade7ecd0891f70f9ff7f4bf47b",
			"8b1a0bc121284290a29e0971b5cd045d", "91f73e2351d8fa91660e909f", "45b95e15235d6f45a6b19cbcb0294ba9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret := quicClientSecret(tc.v, mustHex(t, rfcDCID))
			if got := hex.EncodeToString(secret); got != tc.secret {
				t.Errorf("client secret %s, want %s", got, tc.secret)
			}
			for _, c := range []struct {
				label, want string
				n           int
			}{{tc.v.keyLabel, tc.key, 16}, {tc.v.ivLabel, tc.iv, 12}, {tc.v.hpLabel, tc.hp, 16}} {
				if got := hex.EncodeToString(hkdfExpandLabel(secret, c.label, c.n)); got != c.want {
					t.Errorf("%s: %s, want %s", c.label, got, c.want)
				}
			}
		})
	}
}

// TestQUICRFCSamples decrypts the client Initial of RFC 9001 §A.2 and RFC
// 9369 §A.2 (one 1200-byte datagram whose ClientHello names example.com),
// and checks that BuildQUICInitial makes the same bytes from the
// plaintext.
func TestQUICRFCSamples(t *testing.T) {
	// The CRYPTO frame of both examples (RFC 9001 §A.2).
	crypto := mustHex(t, "060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c"+
		"00000413011302010000c000000010000e00000b6578616d706c652e636f6dff01000100000a000800"+
		"06001d0017001800100007000504616c706e000500050100000000003300260024001d00209370b2c9"+
		"caa47fbabaf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b0003020304000d0010000e"+
		"0403050306030203080408050806002d00020101001c00024001003900320408ffffffffffffffff05"+
		"048000ffff07048000ffff0801100104800075300901100f088394c8f03e51570806048000ffff")
	for _, tc := range []struct {
		file string
		ver  uint32
	}{{"rfc9001-client-initial.hex", QUICv1}, {"rfc9369-client-initial.hex", QUICv2}} {
		t.Run(tc.file, func(t *testing.T) {
			pkt := rfcHex(t, tc.file)
			var q QUICAssembler
			r := q.Add(pkt)
			if r.NeedMore || r.Err != nil || r.Kind != TLS || r.SNI != "example.com" {
				t.Fatalf("got %+v, want the ClientHello for example.com", r)
			}
			if v := Check("example.com", 443, r, true, true); !v.Allow {
				t.Errorf("check: %+v", v)
			}
			if v := Check("app.test", 443, r, true, true); v.Allow || v.Reason != ReasonSNIMismatch {
				t.Errorf("check for another name: %+v", v)
			}
			built, err := BuildQUICInitial(QUICInitial{Version: tc.ver, DCID: mustHex(t, rfcDCID), PN: 2, Payload: crypto, PadTo: 1200})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(built, pkt) {
				t.Errorf("BuildQUICInitial differs from the RFC's packet")
			}
		})
	}
}

var testDCID = []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

// initialOf builds an Initial for tests; it fails t on error.
func initialOf(t testing.TB, p QUICInitial) []byte {
	t.Helper()
	if p.Version == 0 {
		p.Version = QUICv1
	}
	if p.DCID == nil {
		p.DCID = testDCID
	}
	b, err := BuildQUICInitial(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// zeroRTT is an (undecryptable) 0-RTT packet with the given DCID.
func zeroRTT(v uint32, dcid []byte, n int) []byte {
	return opaquePacket(v, quicParams(v).zeroRTT, dcid, n)
}

// opaquePacket is a long-header packet of type typ (0-RTT or Handshake)
// with the given DCID and n bytes nobody can decrypt.
func opaquePacket(v uint32, typ byte, dcid []byte, n int) []byte {
	b := []byte{0xc0 | typ<<4 | 3, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v), byte(len(dcid))}
	b = append(b, dcid...)
	b = append(b, 0)
	b = appendVarint(b, uint64(n))
	return append(b, bytes.Repeat([]byte{0x5a}, n)...)
}

// TestQUICAssembler feeds built datagrams and checks the decision.
func TestQUICAssembler(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	chEvil := helloMsg([]ext{sniExt("evil.test")})
	big := helloMsg([]ext{sniExt("app.test"), {0x1234, make([]byte, 3000)}})
	half := len(ch) / 2
	in := func(p QUICInitial) []byte { return initialOf(t, p) }
	crypto := QUICCryptoFrame
	pad := 1200
	for _, tc := range []struct {
		name      string
		why       string
		datagrams [][]byte
		final     bool   // call Final after the datagrams
		sni       string // want this SNI, no error
		err       Error  // or this error
		needMore  bool   // or still undecided
	}{
		{name: "one packet", why: "the usual case",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, ch), PadTo: pad})}, sni: "app.test"},
		{name: "v2", why: "RFC 9369's salt, labels and type bits",
			datagrams: [][]byte{in(QUICInitial{Version: QUICv2, Payload: crypto(0, ch), PadTo: pad})}, sni: "app.test"},
		{name: "two datagrams", why: "a post-quantum key share makes the ClientHello span datagrams",
			datagrams: [][]byte{
				in(QUICInitial{PN: 0, Payload: crypto(0, big[:1000]), PadTo: pad}),
				in(QUICInitial{PN: 1, Payload: crypto(1000, big[1000:]), PadTo: pad}),
			}, sni: "app.test"},
		{name: "first half only", why: "needs the rest",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, ch[:half]), PadTo: pad})}, needMore: true},
		{name: "first half then timeout", why: "a ClientHello that never completes is refused",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, ch[:half]), PadTo: pad})}, final: true, err: errQUICIncomplete},
		{name: "reversed frames", why: "CRYPTO frames are put in order by offset",
			datagrams: [][]byte{in(QUICInitial{Payload: cat(crypto(half, ch[half:]), []byte{frPing}, crypto(0, ch[:half])), PadTo: pad})}, sni: "app.test"},
		{name: "coalesced", why: "two Initials in one datagram",
			datagrams: [][]byte{cat(
				in(QUICInitial{PN: 0, Payload: crypto(0, ch[:half])}),
				in(QUICInitial{PN: 1, Payload: crypto(half, ch[half:]), PadTo: pad}))}, sni: "app.test"},
		{name: "duplicate data", why: "a retransmission with equal bytes is fine",
			datagrams: [][]byte{
				in(QUICInitial{PN: 0, Payload: crypto(0, ch[:half]), PadTo: pad}),
				in(QUICInitial{PN: 1, Payload: cat(crypto(0, ch[:half+3]), crypto(half+3, ch[half+3:])), PadTo: pad}),
			}, sni: "app.test"},
		{name: "conflicting retransmission", why: "the second ClientHello names another host at the same offsets",
			datagrams: [][]byte{
				in(QUICInitial{PN: 0, Payload: crypto(0, chEvil[:half]), PadTo: pad}),
				in(QUICInitial{PN: 1, Payload: crypto(0, ch), PadTo: pad}),
			}, err: errQUICCryptoConfl},
		{name: "repeated packet number", why: "a server drops the repeat, so the bytes checked there would come later unchecked (another SNI)",
			datagrams: [][]byte{cat(
				in(QUICInitial{PN: 0, Payload: crypto(0, ch[:half])}),
				in(QUICInitial{PN: 0, Payload: crypto(half, ch[half:]), PadTo: pad}))}, err: errQUICDupPN},
		{name: "repeated packet number across datagrams", why: "as above, over two datagrams",
			datagrams: [][]byte{
				in(QUICInitial{PN: 3, Payload: crypto(0, ch[:half]), PadTo: pad}),
				in(QUICInitial{PN: 3, Payload: crypto(half, ch[half:]), PadTo: pad}),
			}, err: errQUICDupPN},
		{name: "other source connection id", why: "a server drops a packet of the connection with another SCID",
			datagrams: [][]byte{cat(
				in(QUICInitial{PN: 0, SCID: []byte("sA"), Payload: crypto(0, ch[:half])}),
				in(QUICInitial{PN: 1, SCID: []byte("sB"), Payload: crypto(half, ch[half:]), PadTo: pad}))}, err: errQUICMixed},
		{name: "evil sni", why: "decided on the name the client sent",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, chEvil), PadTo: pad})}, sni: "evil.test"},
		{name: "ack and close frames", why: "allowed in an Initial",
			datagrams: [][]byte{in(QUICInitial{Payload: cat([]byte{frAck, 0, 0, 1, 0, 0, 0}, []byte{frAckECN, 0, 0, 0, 0, 1, 2, 3}, crypto(0, ch), []byte{frConnClose, 1, 0, 2, 'h', 'i'}), PadTo: pad})}, sni: "app.test"},
		{name: "stream frame", why: "STREAM is not allowed in an Initial",
			datagrams: [][]byte{in(QUICInitial{Payload: cat(crypto(0, ch), []byte{0x08, 0, 1, 'x'}), PadTo: pad})}, err: errQUICFrame},
		{name: "long frame type", why: "frame types must use the shortest encoding",
			datagrams: [][]byte{in(QUICInitial{Payload: cat([]byte{0x40, 0x06}, crypto(0, ch)[1:]), PadTo: pad})}, err: errQUICFrame},
		{name: "app close", why: "the application CONNECTION_CLOSE is not allowed in an Initial",
			datagrams: [][]byte{in(QUICInitial{Payload: cat([]byte{0x1d, 0, 0}), PadTo: pad})}, err: errQUICFrame},
		{name: "crypto overrun", why: "a frame longer than its packet",
			datagrams: [][]byte{in(QUICInitial{Payload: []byte{frCrypto, 0, 0x44, 0}})}, err: errQUICFrameLen},
		{name: "no frames", why: "an empty payload is a protocol violation",
			datagrams: [][]byte{in(QUICInitial{PNLen: 4})}, err: errQUICNoFrames},
		{name: "small datagram", why: "servers drop Initials in datagrams under 1200 bytes",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, ch)})}, err: errQUICSmall},
		{name: "fixed bit clear", why: "a server drops the packet: the part of the ClientHello it carries would come later, unread, in an Initial under the server's connection ID",
			datagrams: [][]byte{
				in(QUICInitial{PN: 0, Payload: crypto(0, ch[:40]), PadTo: pad}),
				in(QUICInitial{PN: 1, Payload: crypto(40, ch[40:]), PadTo: pad, ClearFixedBit: true}),
			}, err: errQUICFixedBit},
		{name: "reserved bits", why: "must be zero once unprotected",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, ch), PadTo: pad, Reserved: 2})}, err: errQUICReserved},
		{name: "short dcid", why: "a client's first DCID has 8 bytes or more",
			datagrams: [][]byte{in(QUICInitial{DCID: []byte{1, 2, 3}, Payload: crypto(0, ch), PadTo: pad})}, err: errQUICDCID},
		{name: "other dcid", why: "Initials of one flow use one DCID until the server answers",
			datagrams: [][]byte{
				in(QUICInitial{Payload: crypto(0, ch[:half]), PadTo: pad}),
				in(QUICInitial{DCID: []byte("otherdcid"), Payload: crypto(half, ch[half:]), PadTo: pad}),
			}, err: errQUICMixed},
		{name: "other version", why: "one version per flow",
			datagrams: [][]byte{
				in(QUICInitial{Payload: crypto(0, ch[:half]), PadTo: pad}),
				in(QUICInitial{Version: QUICv2, Payload: crypto(half, ch[half:]), PadTo: pad}),
			}, err: errQUICMixed},
		{name: "tampered", why: "a packet that does not decrypt",
			datagrams: [][]byte{flip(in(QUICInitial{Payload: crypto(0, ch), PadTo: pad}), 100)}, err: errQUICDecrypt},
		{name: "unknown version", why: "only v1 and v2 are understood",
			datagrams: [][]byte{withVersion(in(QUICInitial{Payload: crypto(0, ch), PadTo: pad}), 0xff00001d)}, err: errQUICVersion},
		{name: "version negotiation", why: "a client never sends one",
			datagrams: [][]byte{withVersion(in(QUICInitial{Payload: crypto(0, ch), PadTo: pad}), 0)}, err: errQUICVersion},
		{name: "short header", why: "no 1-RTT before the handshake",
			datagrams: [][]byte{append([]byte{0x40}, make([]byte, 1300)...)}, err: errQUICNotLong},
		{name: "dns", why: "not QUIC at all",
			datagrams: [][]byte{mustHex(t, "12340100000100000000000003617070047465737400000100 01")}, err: errQUICNotLong},
		{name: "trailing zeros", why: "zero bytes after the packets pad the datagram",
			datagrams: [][]byte{cat(in(QUICInitial{Payload: crypto(0, ch)}), make([]byte, 1200))}, sni: "app.test"},
		{name: "trailing junk", why: "a short header packet cannot follow before the handshake",
			datagrams: [][]byte{cat(in(QUICInitial{Payload: crypto(0, ch), PadTo: pad}), []byte{0x41, 1, 2})}, err: errQUICShort},
		{name: "0-rtt skipped", why: "0-RTT coalesced after the Initial is held, not read",
			datagrams: [][]byte{cat(in(QUICInitial{Payload: crypto(0, ch[:half])}), zeroRTT(QUICv1, testDCID, 1200)),
				in(QUICInitial{PN: 1, Payload: crypto(half, ch[half:]), PadTo: pad})}, sni: "app.test"},
		{name: "0-rtt first", why: "a 0-RTT packet cannot come before any Initial",
			datagrams: [][]byte{zeroRTT(QUICv1, testDCID, 1200)}, err: errQUICNoInitial},
		{name: "handshake packet", why: "the client has no handshake keys yet",
			datagrams: [][]byte{withType(in(QUICInitial{Payload: crypto(0, ch), PadTo: pad}), 2)}, err: errQUICPacketType},
		{name: "truncated", why: "a length past the datagram's end",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, ch), PadTo: pad})[:1000]}, err: errQUICTruncated},
		{name: "not a client hello", why: "the CRYPTO stream must start with a ClientHello",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, append([]byte{2, 0, 0, 1}, 0)), PadTo: pad})}, err: errTLSNotHello},
		{name: "data after hello", why: "nothing may follow the ClientHello in the Initial's CRYPTO stream",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, append(ch[:len(ch):len(ch)], 1)), PadTo: pad})}, err: errQUICAfterHello},
		{name: "too large", why: "a ClientHello past the hold limit",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(QUICMaxHello-1, []byte{1, 2}), PadTo: pad})}, err: errQUICTooLarge},
		{name: "malformed hello", why: "the TLS parser's errors pass through",
			datagrams: [][]byte{in(QUICInitial{Payload: crypto(0, helloMsg([]ext{sniExt("app.test", "evil.test")})), PadTo: pad})}, err: errTLSSNIConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q QUICAssembler
			var r Result
			for _, d := range tc.datagrams {
				r = q.Add(d)
				if !r.NeedMore {
					break
				}
			}
			if tc.final {
				r = q.Final()
			}
			switch {
			case tc.needMore:
				if !r.NeedMore {
					t.Fatalf("%s: got %+v, want NeedMore", tc.why, r)
				}
			case tc.err != "":
				if r.Err != tc.err || r.Kind != TLS {
					t.Fatalf("%s: got %+v, want error %q", tc.why, r, tc.err)
				}
				if v := Check("app.test", 443, r, true, true); v.Allow {
					t.Fatalf("%s: garbage allowed: %+v", tc.why, v)
				}
			default:
				if r.Err != nil || r.SNI != tc.sni || r.Kind != TLS {
					t.Fatalf("%s: got %+v, want sni %q", tc.why, r, tc.sni)
				}
			}
			if again := q.Add(tc.datagrams[0]); !r.NeedMore && again != r {
				t.Errorf("decision changed: %+v then %+v", r, again)
			}
		})
	}
}

func flip(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 1; return b }

func withVersion(b []byte, v uint32) []byte {
	b = bytes.Clone(b)
	b[1], b[2], b[3], b[4] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return b
}

func withType(b []byte, typ byte) []byte {
	b = bytes.Clone(b)
	b[0] = b[0]&^0x30 | typ<<4
	return b
}

// TestQUICLimits checks the datagram and byte bounds.
func TestQUICLimits(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	var q QUICAssembler
	var r Result
	for i := 0; i < QUICMaxDatagrams; i++ {
		// One byte of the ClientHello per datagram: never whole.
		r = q.Add(initialOf(t, QUICInitial{PN: uint32(i), Payload: QUICCryptoFrame(i, ch[i:i+1]), PadTo: 1200}))
		if !r.NeedMore {
			break
		}
	}
	if r.Err != errQUICTooMany {
		t.Fatalf("after %d datagrams: %+v", QUICMaxDatagrams, r)
	}
	q = QUICAssembler{}
	var n int
	for i := 0; i < 5; i++ {
		// Each its own packet number: a repeated one is refused.
		huge := initialOf(t, QUICInitial{PN: uint32(i), Payload: QUICCryptoFrame(0, ch[:5]), PadTo: 16000})
		n += len(huge)
		if r = q.Add(huge); !r.NeedMore {
			break
		}
	}
	if r.Err != errQUICTooMany {
		t.Fatalf("after %d bytes: %+v", n, r)
	}
}

// capturePC is a net.PacketConn that records what a QUIC client sends and
// answers nothing: no socket, no packet leaves the process.
type capturePC struct {
	mu       sync.Mutex
	sent     [][]byte
	deadline time.Time
	closed   chan struct{}
	once     sync.Once
}

func newCapturePC() *capturePC { return &capturePC{closed: make(chan struct{})} }

func (c *capturePC) ReadFrom(p []byte) (int, net.Addr, error) {
	// Nothing ever arrives: wait for Close or the read deadline, which
	// quic-go sets to unblock its reader when it gives up.
	for {
		select {
		case <-c.closed:
			return 0, nil, net.ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
		c.mu.Lock()
		dl := c.deadline
		c.mu.Unlock()
		if !dl.IsZero() && time.Now().After(dl) {
			return 0, nil, os.ErrDeadlineExceeded
		}
	}
}
func (c *capturePC) WriteTo(p []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	c.sent = append(c.sent, bytes.Clone(p))
	c.mu.Unlock()
	return len(p), nil
}
func (c *capturePC) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
func (c *capturePC) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(10, 0, 2, 100), Port: 40000}
}
func (c *capturePC) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }
func (c *capturePC) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}
func (c *capturePC) SetWriteDeadline(t time.Time) error { return nil }

// quicGoFirstFlight returns the datagrams quic-go's client sends first for
// serverName with version v (a real client: its ClientHello, with a
// post-quantum key share, spans two datagrams).
func quicGoFirstFlight(t testing.TB, serverName string, v quic.Version) [][]byte {
	t.Helper()
	pc := newCapturePC()
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := quic.Dial(ctx, pc, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443},
		&tls.Config{ServerName: serverName, NextProtos: []string{"h3"}},
		&quic.Config{Versions: []quic.Version{v}})
	if err == nil {
		t.Fatal("dial without a server succeeded")
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.sent) == 0 {
		t.Fatalf("quic-go sent nothing: %v", err)
	}
	return pc.sent
}

// TestQUICRealClient reads quic-go's first flight, v1 and v2, and its
// retransmissions.
func TestQUICRealClient(t *testing.T) {
	for _, v := range []quic.Version{quic.Version1, quic.Version2} {
		for _, name := range []string{"app.test", "evil.test"} {
			t.Run(v.String()+"/"+name, func(t *testing.T) {
				flight := quicGoFirstFlight(t, name, v)
				var q QUICAssembler
				var r Result
				n := 0
				for _, d := range flight {
					n++
					if r = q.Add(d); !r.NeedMore {
						break
					}
				}
				if r.NeedMore || r.Err != nil || r.SNI != name {
					t.Fatalf("after %d of %d datagrams: %+v", n, len(flight), r)
				}
				t.Logf("decided after %d datagram(s) of %d sent", n, len(flight))
				// Every later datagram (retransmissions) is a valid
				// Initial flight too.
				for i := range flight {
					var q2 QUICAssembler
					r2 := q2.Add(flight[i])
					if r2.Err != nil {
						t.Errorf("datagram %d alone: %+v", i, r2)
					}
				}
			})
		}
	}
}

// BenchmarkQUICInitial measures reading the ClientHello from one
// datagram (keys derived per flow).
func BenchmarkQUICInitial(b *testing.B) {
	d := initialOf(b, QUICInitial{Payload: QUICCryptoFrame(0, helloMsg([]ext{sniExt("app.test")})), PadTo: 1200})
	b.ReportAllocs()
	b.SetBytes(int64(len(d)))
	for b.Loop() {
		var q QUICAssembler
		if r := q.Add(d); r.SNI != "app.test" {
			b.Fatal(r)
		}
	}
}
