package l7

import (
	"bytes"
	"testing"
)

// watchAfter returns a watch whose first connection (DCID testDCID,
// SCID "c1") read a ClientHello for app.test in the datagrams first.
func watchAfter(t *testing.T, first ...[]byte) *QUICWatch {
	t.Helper()
	q := &QUICAssembler{}
	var r Result
	for _, d := range first {
		r = q.Add(d)
	}
	if r.NeedMore || r.Err != nil || r.SNI != "app.test" {
		t.Fatalf("first connection: %+v", r)
	}
	return NewQUICWatch(q)
}

// TestQUICWatch checks what the watch does with the datagrams that follow
// a flow's first QUIC connection.
func TestQUICWatch(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	chEvil := helloMsg([]ext{sniExt("evil.test")})
	big := helloMsg([]ext{sniExt("app.test"), {0x1234, make([]byte, 3000)}})
	bigEvil := helloMsg([]ext{{0x1234, make([]byte, 3000)}, sniExt("evil.test")})
	in := func(p QUICInitial) []byte {
		if p.PadTo == 0 {
			p.PadTo = 1200
		}
		if p.SCID == nil {
			p.SCID = []byte("c1")
		}
		return initialOf(t, p)
	}
	crypto := QUICCryptoFrame
	first := in(QUICInitial{PN: 0, Payload: crypto(0, ch)})
	dcid2 := []byte("second-connection")
	serverCID := []byte{0xee, 0xee, 0xee, 0xee}

	type step struct {
		d    []byte
		want WatchAction
		err  Error  // WatchDrop: this error (empty: none)
		sni  string // WatchDecide: this SNI
		fail bool   // WatchDecide: with an error
	}
	for _, tc := range []struct {
		name  string
		why   string
		steps []step
		allow bool // Allow the decided connection (else Refuse)
		after []step
	}{
		{name: "short header", why: "1-RTT packets cannot be read and belong to checked connections",
			steps: []step{{d: append([]byte{0x40}, bytes.Repeat([]byte{1}, 60)...), want: WatchPass}}},
		{name: "retransmitted first initial", why: "the same ClientHello under a new packet number",
			steps: []step{{d: in(QUICInitial{PN: 1, Payload: crypto(0, ch)}), want: WatchPass}}},
		{name: "0-RTT of the first connection", why: "unread, like at the gate",
			steps: []step{{d: zeroRTT(QUICv1, testDCID, 1300), want: WatchPass}}},
		{name: "later initial with the server's connection id", why: "it decrypts only with the first ID's keys: no server starts a connection from it",
			steps: []step{{d: in(QUICInitial{DCID: serverCID, KeyDCID: testDCID, PN: 2, Payload: []byte{frAck, 0, 0, 0, 0}}), want: WatchPass}}},
		{name: "second connection, another name", why: "the bypass: a new Destination Connection ID on the same 5-tuple naming another host",
			steps: []step{{d: in(QUICInitial{DCID: dcid2, Payload: crypto(0, chEvil)}), want: WatchDecide, sni: "evil.test"}},
			after: []step{
				{d: in(QUICInitial{DCID: dcid2, PN: 1, Payload: crypto(0, chEvil)}), want: WatchDrop},
				{d: zeroRTT(QUICv1, dcid2, 1300), want: WatchPass},
			}},
		{name: "second connection, same name", why: "a client may reuse its socket for another connection to the same server",
			steps: []step{{d: in(QUICInitial{DCID: dcid2, Payload: crypto(0, ch)}), want: WatchDecide, sni: "app.test"}},
			allow: true,
			after: []step{{d: in(QUICInitial{DCID: dcid2, PN: 1, Payload: crypto(0, ch)}), want: WatchPass}}},
		{name: "second connection over two datagrams", why: "held until whole",
			steps: []step{
				{d: in(QUICInitial{DCID: dcid2, PN: 0, Payload: crypto(0, bigEvil[:1000])}), want: WatchHold},
				{d: in(QUICInitial{DCID: dcid2, PN: 1, Payload: crypto(1000, bigEvil[1000:])}), want: WatchDecide, sni: "evil.test"},
			}},
		{name: "after a retry, a short connection id", why: "the client's Initial after a Retry carries the server's ID (4 bytes from quic-go) and its keys: read and checked, not refused for its length",
			steps: []step{{d: in(QUICInitial{DCID: []byte{0xab, 0xcd, 0xef, 0x01}, Token: []byte("retry-token"), Payload: crypto(0, ch)}), want: WatchDecide, sni: "app.test"}},
			allow: true},
		{name: "short connection id, another name", why: "as above, naming another host",
			steps: []step{{d: in(QUICInitial{DCID: []byte{0xab, 0xcd, 0xef, 0x01}, Payload: crypto(0, chEvil)}), want: WatchDecide, sni: "evil.test"}}},
		{name: "second connection, garbage hello", why: "decided with an error, so the caller refuses it",
			steps: []step{{d: in(QUICInitial{DCID: dcid2, Payload: crypto(0, []byte{9, 0, 0, 1, 0})}), want: WatchDecide, fail: true}}},
		{name: "first connection's ID, another name", why: "a new connection reusing the checked ID once the server forgot it: its bytes contradict the checked ClientHello",
			steps: []step{{d: in(QUICInitial{PN: 5, Payload: crypto(0, chEvil)}), want: WatchDrop, err: errQUICCryptoConfl}}},
		{name: "first connection's ID, more CRYPTO", why: "a client sends nothing after its ClientHello in Initials",
			steps: []step{{d: in(QUICInitial{PN: 5, Payload: crypto(len(ch), []byte{1, 2, 3})}), want: WatchDrop, err: errQUICAfterHello}}},
		{name: "first connection's ID, another SCID", why: "a server takes it for another connection",
			steps: []step{{d: in(QUICInitial{PN: 5, SCID: []byte("c2"), Payload: crypto(0, ch)}), want: WatchDrop, err: errQUICMixed}}},
		{name: "first connection's ID, repeated packet number", why: "the server drops it",
			steps: []step{{d: in(QUICInitial{PN: 0, Payload: crypto(0, ch)}), want: WatchDrop, err: errQUICDupPN}}},
		{name: "unknown version", why: "a server of another version could start a connection from it",
			steps: []step{{d: func() []byte {
				b := in(QUICInitial{DCID: dcid2, Payload: crypto(0, chEvil)})
				b[1], b[2], b[3], b[4] = 0xff, 0, 0, 0x1d
				return b
			}(), want: WatchDrop, err: errQUICVersion}}},
		{name: "new connection behind a handshake packet", why: "clients put Initials first: an Initial after another packet type is dropped",
			steps: []step{{d: cat(handshakePacket(QUICv1, serverCID, 40), in(QUICInitial{DCID: dcid2, Payload: crypto(0, chEvil)})), want: WatchDrop, err: errQUICLateInitial}}},
		{name: "initial behind a 0-RTT packet", why: "a server queues the datagram until an Initial starts the connection, then reads this Initial with that connection's packet numbers (1002 in one byte reads 234 here, 1002 after 1000 there)",
			steps: []step{{d: cat(zeroRTT(QUICv1, dcid2, 40), in(QUICInitial{DCID: dcid2, PN: 1002, PNLen: 1, Payload: crypto(40, chEvil[40:])})), want: WatchDrop, err: errQUICLateInitial}}},
		{name: "initial without the fixed bit", why: "a server drops it, so its bytes could come later under the server's connection ID, unread",
			steps: []step{{d: in(QUICInitial{DCID: dcid2, Payload: crypto(0, ch), ClearFixedBit: true}), want: WatchDecide, fail: true}}},
		{name: "big second hello naming the flow", why: "held, then passed on",
			steps: []step{
				{d: in(QUICInitial{DCID: dcid2, PN: 0, Payload: crypto(0, big[:1000])}), want: WatchHold},
				{d: in(QUICInitial{DCID: dcid2, PN: 1, Payload: crypto(1000, big[1000:])}), want: WatchDecide, sni: "app.test"},
			}, allow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := watchAfter(t, first)
			var decided WatchStep
			var held int
			run := func(steps []step) {
				for i, s := range steps {
					got := w.Datagram(s.d)
					if got.Action != s.want {
						t.Fatalf("step %d: action %d, want %d (%s); err %v", i, got.Action, s.want, tc.why, got.Err)
					}
					switch got.Action {
					case WatchHold:
						held++
					case WatchDrop:
						if s.err != "" && got.Err != s.err {
							t.Fatalf("step %d: drop error %v, want %v", i, got.Err, s.err)
						}
						if s.err == "" && got.Err != nil {
							t.Fatalf("step %d: drop error %v, want none", i, got.Err)
						}
					case WatchDecide:
						held++
						decided = got
						if s.fail != (got.Result.Err != nil) || (!s.fail && got.Result.SNI != s.sni) {
							t.Fatalf("step %d: decided %+v, want sni %q fail %v", i, got.Result, s.sni, s.fail)
						}
					}
				}
			}
			run(tc.steps)
			if decided.Action == WatchDecide {
				if tc.allow {
					if out := w.Allow(decided); len(out) != held {
						t.Fatalf("Allow returned %d datagrams, want the %d held", len(out), held)
					}
				} else {
					w.Refuse(decided)
				}
			}
			run(tc.after)
		})
	}
}

// handshakePacket is an (unreadable) client Handshake packet.
func handshakePacket(v uint32, dcid []byte, n int) []byte {
	return opaquePacket(v, quicParams(v).handshakeT, dcid, n)
}

// TestQUICWatchBounds checks that a worker cannot make the watch hold
// without bound: at most quicWatchPending connections wait at once.
func TestQUICWatchBounds(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	w := watchAfter(t, initialOf(t, QUICInitial{Payload: QUICCryptoFrame(0, ch), PadTo: 1200}))
	for i := 0; i < quicWatchPending+2; i++ {
		dcid := []byte{9, 9, 9, 9, 9, 9, 9, byte(i)}
		d := initialOf(t, QUICInitial{DCID: dcid, Payload: QUICCryptoFrame(0, ch[:10]), PadTo: 1200})
		s := w.Datagram(d)
		want := WatchHold
		if i >= quicWatchPending {
			want = WatchDrop
		}
		if s.Action != want {
			t.Fatalf("connection %d: action %d, want %d", i, s.Action, want)
		}
		if want == WatchDrop && s.Err != errQUICTooManyConns {
			t.Fatalf("connection %d: err %v", i, s.Err)
		}
	}
	// Decided connections are forgotten oldest first: many of them do
	// not grow the watch.
	w = watchAfter(t, initialOf(t, QUICInitial{Payload: QUICCryptoFrame(0, ch), PadTo: 1200}))
	for i := 0; i < 3*quicWatchConns; i++ {
		dcid := []byte{8, 8, 8, 8, 8, 8, byte(i >> 8), byte(i)}
		s := w.Datagram(initialOf(t, QUICInitial{DCID: dcid, Payload: QUICCryptoFrame(0, ch), PadTo: 1200}))
		if s.Action != WatchDecide {
			t.Fatalf("connection %d: action %d", i, s.Action)
		}
		w.Allow(s)
	}
	if len(w.conns) > quicWatchConns {
		t.Fatalf("watch remembers %d connections, bound %d", len(w.conns), quicWatchConns)
	}
}

// TestQUICWatchForgotten: a connection the watch forgot keeps its server
// IDs, and a client Initial under one is dropped (the server may still
// route it to the connection and open it); once forgotten IDs would pass
// their bound, new connections are refused instead of forgetting more.
func TestQUICWatchForgotten(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	serverID := []byte{0x5e, 0x5e, 0x5e, 0x5e}
	w := NewQUICWatch(firstAssembler(t, ch))
	w.Server(initialOf(t, QUICInitial{DCID: []byte("c1"), SCID: serverID, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200}))
	newConn := func(i int) WatchStep {
		id := []byte{8, 8, 8, 8, 8, 8, byte(i >> 8), byte(i)}
		return w.Datagram(initialOf(t, QUICInitial{DCID: id, SCID: id[4:], Payload: QUICCryptoFrame(0, ch), PadTo: 1200}))
	}
	for i := range quicWatchConns {
		s := newConn(i)
		if s.Action != WatchDecide {
			t.Fatalf("connection %d: action %d err %v", i, s.Action, s.Err)
		}
		w.Allow(s)
		// Each answered by the server under an ID of its own.
		w.Server(initialOf(t, QUICInitial{DCID: []byte{8, 8, byte(i >> 8), byte(i)}, SCID: []byte{7, 7, byte(i >> 8), byte(i)}, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200}))
	}
	if w.find(testDCID) != nil {
		t.Fatal("the first connection is still remembered")
	}
	chEvil := helloMsg([]ext{sniExt("evil.test")})
	d := initialOf(t, QUICInitial{DCID: serverID, KeyDCID: testDCID, SCID: []byte("c1"), PN: 7, Payload: QUICCryptoFrame(0, chEvil), PadTo: 1200})
	if s := w.Datagram(d); s.Action != WatchDrop || s.Err != errQUICForgotten {
		t.Fatalf("an Initial under a forgotten connection's server ID: action %d err %v", s.Action, s.Err)
	}
	refused := false
	for i := quicWatchConns; i < quicWatchConns+2*quicWatchGone && !refused; i++ {
		s := newConn(i)
		switch {
		case s.Action == WatchDrop && s.Err == errQUICTooManyConns:
			refused = true
		case s.Action == WatchDecide:
			w.Allow(s)
			w.Server(initialOf(t, QUICInitial{DCID: []byte{8, 8, byte(i >> 8), byte(i)}, SCID: []byte{7, 7, byte(i >> 8), byte(i)}, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200}))
		default:
			t.Fatalf("connection %d: action %d err %v", i, s.Action, s.Err)
		}
	}
	if !refused || len(w.gone) > quicWatchGone {
		t.Fatalf("refused %v, %d forgotten server IDs (bound %d)", refused, len(w.gone), quicWatchGone)
	}
}

// FuzzQUICWatch feeds a watch arbitrary datagrams after a first
// connection: Initials sealed for one of three connection IDs (so that
// mutations reach behind the AEAD) or, with flags bit 7, the raw bytes.
// Decided connections are allowed when they name app.test, else refused,
// as the gateway does. Invariant: a datagram the watch passes holds no
// Initial that would start a connection at a server (one that decrypts
// with the keys of its own ID) unless that connection passed.
func FuzzQUICWatch(f *testing.F) {
	ch := helloMsg([]ext{sniExt("app.test")})
	chEvil := helloMsg([]ext{sniExt("evil.test")})
	f.Add(QUICCryptoFrame(0, ch), uint8(0))
	f.Add(QUICCryptoFrame(0, chEvil), uint8(1))
	f.Add(cat(QUICCryptoFrame(0, chEvil[:30]), []byte("QQQQ"), QUICCryptoFrame(30, chEvil[30:])), uint8(2))
	f.Add(cat(QUICCryptoFrame(0, ch), []byte("QQQQ"), QUICCryptoFrame(0, chEvil)), uint8(4))
	f.Add(zeroRTT(QUICv1, testDCID, 1300), uint8(0x80))
	ids := [][]byte{testDCID, []byte("second-connection"), {0xee, 0xee, 0xee, 0xee}}
	f.Fuzz(func(t *testing.T, data []byte, flags uint8) {
		payloads := splitDatagrams(data)
		if len(payloads) > 6 {
			return
		}
		w := NewQUICWatch(firstAssembler(t, ch))
		for i, p := range payloads {
			d := p
			if flags&0x80 == 0 {
				var err error
				d, err = BuildQUICInitial(QUICInitial{Version: QUICv1, DCID: ids[int(flags>>(2*i%6))%3], SCID: []byte("c1"),
					PN: uint32(i + 1), Payload: p, PadTo: 1200})
				if err != nil {
					continue
				}
			}
			if flags&0x40 != 0 && i == 0 {
				// The raw bytes as the server's: IDs to learn.
				w.Server(p)
			}
			s := w.Datagram(d)
			switch s.Action {
			case WatchDecide:
				if s.Result.Err == nil && s.Result.SNI == "app.test" {
					w.Allow(s)
				} else {
					w.Refuse(s)
				}
			case WatchPass:
				for rest := d; len(rest) > 0 && rest[0]&0x80 != 0; {
					h, err := parseLongHeader(rest)
					if err != nil {
						t.Fatalf("passed a datagram whose header does not parse: %v", err)
					}
					if h.initial() && w.opens(&h, rest[:h.end]) {
						if c := w.find(h.dcid); c == nil || c.state != watchAllowed {
							t.Fatalf("passed an Initial of connection %x, which did not pass", h.dcid)
						}
					}
					rest = rest[h.end:]
				}
			}
		}
	})
}

// firstAssembler is an assembler that read the ClientHello ch whole.
func firstAssembler(t *testing.T, ch []byte) *QUICAssembler {
	q := &QUICAssembler{}
	d, err := BuildQUICInitial(QUICInitial{Version: QUICv1, DCID: testDCID, SCID: []byte("c1"), Payload: QUICCryptoFrame(0, ch), PadTo: 1200})
	if err != nil {
		t.Fatal(err)
	}
	if r := q.Add(d); r.NeedMore || r.Err != nil {
		t.Fatalf("first connection: %+v", r)
	}
	return q
}

// TestQUICWatchServerIDs: the client's Initials sent to the server's
// connection ID (learned from the server's packets) are verified against
// the connection's ClientHello, with the keys of the client's first ID.
func TestQUICWatchServerIDs(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	chEvil := helloMsg([]ext{sniExt("evil.test")})
	serverID := []byte{0x5e, 0x5e, 0x5e, 0x5e}
	// What the server sends back: an Initial to the client's ID ("c1").
	fromServer := initialOf(t, QUICInitial{DCID: []byte("c1"), SCID: serverID, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200})
	toServer := func(pn uint32, payload []byte) []byte {
		return initialOf(t, QUICInitial{DCID: serverID, KeyDCID: testDCID, SCID: []byte("c1"), PN: pn, Payload: payload, PadTo: 1200})
	}
	for _, tc := range []struct {
		name    string
		learned bool
		d       []byte
		want    WatchAction
		err     Error
	}{
		{"an ACK under the server's ID", true, toServer(3, []byte{frAck, 0, 0, 0, 0}), WatchPass, ""},
		{"the ClientHello again under the server's ID", true, toServer(3, QUICCryptoFrame(0, ch)), WatchPass, ""},
		{"another ClientHello under the server's ID", true, toServer(3, QUICCryptoFrame(0, chEvil)), WatchDrop, errQUICCryptoConfl},
		{"CRYPTO past the ClientHello under the server's ID", true, toServer(3, QUICCryptoFrame(len(ch), []byte{1, 2})), WatchDrop, errQUICAfterHello},
		{"a repeated packet number under the server's ID", true, toServer(0, []byte{frAck, 0, 0, 0, 0}), WatchDrop, errQUICDupPN},
		{"unread before the server answered", false, toServer(3, QUICCryptoFrame(0, chEvil)), WatchPass, ""},
		{"a packet number the watch decodes otherwise", true, initialOf(t, QUICInitial{DCID: serverID, KeyDCID: testDCID, SCID: []byte("c1"), PN: 300, PNLen: 1, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200}), WatchDrop, errQUICDecrypt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewQUICWatch(firstAssembler(t, ch))
			if tc.learned {
				w.Server(fromServer)
			}
			s := w.Datagram(tc.d)
			if s.Action != tc.want || (tc.err != "" && s.Err != tc.err) {
				t.Fatalf("action %d err %v, want %d %v", s.Action, s.Err, tc.want, tc.err)
			}
		})
	}
}

// TestQUICWatchRetryServerIDs: after a Retry the first connection and the
// one the client starts over with share the client's ID, so the server's
// answers teach both the same server ID; the client's Initials under it
// belong to the connection whose keys open them (the new one), not to the
// first (the attack review's Retry test refused a real client's ACK).
func TestQUICWatchRetryServerIDs(t *testing.T) {
	ch := helloMsg([]ext{sniExt("app.test")})
	retryID := []byte{0x7e, 0x7e, 0x7e, 0x7e}
	serverID := []byte{0x5e, 0x5e, 0x5e, 0x5e}
	w := NewQUICWatch(firstAssembler(t, ch))
	again := initialOf(t, QUICInitial{DCID: retryID, SCID: []byte("c1"), Token: []byte("t"), Payload: QUICCryptoFrame(0, ch), PadTo: 1200})
	s := w.Datagram(again)
	if s.Action != WatchDecide || s.Result.SNI != "app.test" {
		t.Fatalf("the Initial after the Retry: %+v", s)
	}
	w.Allow(s)
	w.Server(initialOf(t, QUICInitial{DCID: []byte("c1"), SCID: serverID, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200}))
	ack := initialOf(t, QUICInitial{DCID: serverID, KeyDCID: retryID, SCID: []byte("c1"), PN: 1, Payload: []byte{frAck, 0, 0, 0, 0}, PadTo: 1200})
	if s := w.Datagram(ack); s.Action != WatchPass {
		t.Fatalf("the client's ACK under the server's ID, with the new connection's keys: action %d err %v", s.Action, s.Err)
	}
	evil := initialOf(t, QUICInitial{DCID: serverID, KeyDCID: retryID, SCID: []byte("c1"), PN: 2, Payload: QUICCryptoFrame(0, helloMsg([]ext{sniExt("evil.test")})), PadTo: 1200})
	if s := w.Datagram(evil); s.Action != WatchDrop || s.Err != errQUICCryptoConfl {
		t.Fatalf("another ClientHello under the server's ID: action %d err %v", s.Action, s.Err)
	}
}
