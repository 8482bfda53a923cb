package l7

import (
	"bytes"
	"crypto/tls"
	"strings"
	"testing"
)

// feedQUIC gives the datagrams to a fresh assembler, then Final, and
// checks that every answer keeps Result's invariants and that a decision,
// once made, never changes.
func feedQUIC(t *testing.T, datagrams [][]byte) Result {
	var q QUICAssembler
	var decided *Result
	for _, d := range datagrams {
		in := bytes.Clone(d)
		r := q.Add(d)
		if !bytes.Equal(in, d) {
			t.Fatal("Add modified its datagram")
		}
		checkInvariants(t, r)
		if decided != nil && r != *decided {
			t.Fatalf("decision changed: %+v then %+v", *decided, r)
		}
		if !r.NeedMore && decided == nil {
			decided = &r
		}
	}
	r := q.Final()
	checkInvariants(t, r)
	if r.NeedMore {
		t.Fatal("Final returned NeedMore")
	}
	if decided != nil && r != *decided {
		t.Fatalf("Final changed the decision: %+v then %+v", *decided, r)
	}
	if r.Err == nil && r.Kind != TLS {
		t.Fatalf("a QUIC flow passed as %v", r.Kind)
	}
	return r
}

// splitDatagrams cuts data into datagrams at each 4-byte separator "QQQQ".
func splitDatagrams(data []byte) [][]byte {
	return bytes.Split(data, []byte("QQQQ"))
}

// FuzzQUICDatagrams feeds arbitrary datagrams (separated by "QQQQ"): the
// header parser, the key schedule and the decryption must never panic,
// hang or pass anything but a decrypted ClientHello.
func FuzzQUICDatagrams(f *testing.F) {
	ch := helloMsg([]ext{sniExt("app.test")})
	for _, name := range []string{"rfc9001-client-initial.hex", "rfc9369-client-initial.hex"} {
		f.Add(rfcHex(f, name))
	}
	one := initialOf(f, QUICInitial{Payload: QUICCryptoFrame(0, ch), PadTo: 1200})
	f.Add(one)
	f.Add(cat(initialOf(f, QUICInitial{Payload: QUICCryptoFrame(0, ch[:40])}),
		initialOf(f, QUICInitial{PN: 1, Payload: QUICCryptoFrame(40, ch[40:]), PadTo: 1200})))
	f.Add(cat(initialOf(f, QUICInitial{Payload: QUICCryptoFrame(0, ch[:40]), PadTo: 1200}), []byte("QQQQ"),
		initialOf(f, QUICInitial{PN: 1, Payload: QUICCryptoFrame(40, ch[40:]), PadTo: 1200})))
	f.Add(zeroRTT(QUICv2, testDCID, 1200))
	f.Add([]byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x40, 0x20})
	f.Fuzz(func(t *testing.T, data []byte) {
		feedQUIC(t, splitDatagrams(data))
	})
}

// FuzzQUICFrames seals arbitrary plaintext as Initial payloads, so that
// mutations reach the frame parser and the CRYPTO reassembly behind the
// AEAD: data is the payloads of up to four packets (separated by "QQQQ"),
// each sent in a datagram of its own, or all coalesced in one when
// coalesce is set. A ClientHello that passes must be one crypto/tls's
// server reads the same SNI from.
func FuzzQUICFrames(f *testing.F) {
	ch := helloMsg([]ext{sniExt("app.test")})
	f.Add(QUICCryptoFrame(0, ch), false, uint8(0))
	f.Add(cat(QUICCryptoFrame(50, ch[50:]), []byte("QQQQ"), QUICCryptoFrame(0, ch[:50])), false, uint8(1))
	f.Add(cat(QUICCryptoFrame(0, ch[:50]), []byte("QQQQ"), QUICCryptoFrame(50, ch[50:])), true, uint8(2))
	f.Add(cat([]byte{frAck, 0, 0, 1, 0, 0, 0, frPing}, QUICCryptoFrame(0, ch), []byte{frConnClose, 1, 0, 2, 'h', 'i'}), false, uint8(3))
	f.Add(cat(QUICCryptoFrame(0, goClientHello(f, &tls.Config{ServerName: "app.test", NextProtos: []string{"h3"}, MinVersion: tls.VersionTLS13})[5:])), false, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, coalesce bool, flags uint8) {
		payloads := splitDatagrams(data)
		if len(payloads) > 4 {
			return
		}
		v := QUICv1
		if flags&1 != 0 {
			v = QUICv2
		}
		var datagrams [][]byte
		var all [][]byte
		for i, p := range payloads {
			pad := 1200
			if coalesce && i < len(payloads)-1 {
				pad = 0
			}
			pkt, err := BuildQUICInitial(QUICInitial{Version: v, DCID: testDCID, PN: uint32(i), PNLen: int(flags>>1&3) + 1, Payload: p, PadTo: pad})
			if err != nil {
				return
			}
			all = append(all, pkt)
			if !coalesce {
				datagrams = append(datagrams, pkt)
			}
		}
		if coalesce {
			datagrams = [][]byte{bytes.Join(all, nil)}
		}
		r := feedQUIC(t, datagrams)
		if r.Err == nil && r.SNI != "" {
			// Rebuild the stream the way a server would (in offset
			// order, first copy wins) and ask crypto/tls.
			if ok, sni := goServerSNI(frame(reassemble(t, payloads), maxRecordPayload)); ok && strings.ToLower(sni) != r.SNI {
				t.Fatalf("sni %q, crypto/tls reads %q", r.SNI, sni)
			}
		}
	})
}

// reassemble collects the CRYPTO data of plaintext payloads that the
// assembler accepted, in offset order (as sealed: padded with zeros).
func reassemble(t *testing.T, payloads [][]byte) []byte {
	var stream []byte
	for _, p := range payloads {
		// BuildQUICInitial pads with zeros (PADDING frames).
		p = append(p[:len(p):len(p)], make([]byte, 1200)...)
		for len(p) > 0 {
			typ := p[0]
			p = p[1:]
			switch typ {
			case frPadding, frPing:
			case frAck, frAckECN:
				p, _ = skipAck(p, typ == frAckECN)
			case frConnClose:
				p, _ = skipClose(p)
			case frCrypto:
				var h [2]uint64
				p, _ = varints(p, h[:])
				end := int(h[0] + h[1])
				if end > len(stream) {
					stream = append(stream, make([]byte, end-len(stream))...)
				}
				copy(stream[h[0]:], p[:h[1]])
				p = p[h[1]:]
			default:
				t.Fatalf("accepted a payload with frame %#x", typ)
			}
		}
	}
	return stream
}
