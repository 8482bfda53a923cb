package attack

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"time"

	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/lab/internet"
)

// The QUIC splices: the gateway reads one ClientHello, a server another,
// because a packet that carries a part of the checked one is dropped by
// the server (then the part comes later in an Initial the gateway cannot
// read), or because the server reads an Initial later than the gateway
// sees it, in the state of the connection it joins.

// quicSplit returns crypto/tls's ClientHello for approved and the offset
// of the name in it, and the same ClientHello naming other (as long).
func quicSplit(approved, other string) (good, bad []byte, k int, err error) {
	good, err = clientHello(approved)
	if err != nil {
		return nil, nil, 0, err
	}
	k = bytes.Index(good, []byte(approved))
	if k < 0 || len(approved) != len(other) {
		return nil, nil, 0, fmt.Errorf("cannot split the ClientHello (%d bytes)", len(good))
	}
	bad = bytes.Clone(good)
	copy(bad[k:], other)
	return good, bad, k, nil
}

// quicZeroRTT is a QUIC v1 0-RTT packet of the connection dcid whose
// payload no one can read.
func quicZeroRTT(dcid, scid []byte) []byte {
	b := []byte{0xc0 | 1<<4 | 3, 0, 0, 0, 1, byte(len(dcid))}
	b = append(b, dcid...)
	b = append(b, byte(len(scid)))
	b = append(b, scid...)
	b = append(b, 0x40, 40)
	return append(b, bytes.Repeat([]byte{0x5a}, 40)...)
}

// echoed sends each datagram on c and reports whether one came back from
// the echo server (nil: none did, the flow was refused or timed out).
// A precondition (an echo the attempt needs) waits the whole operation
// timeout: on a loaded machine an echo took longer than a fraction of it,
// the attempt errored, and the late echo counted as a stray hit against
// the attempt after it.
func echoed(c net.Conn, wait time.Duration, ds ...[]byte) (bool, error) {
	for _, d := range ds {
		c.Write(d)
	}
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(wait))
	for {
		n, err := c.Read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); !isRefusal(err) && !(ok && ne.Timeout()) {
				return false, err
			}
			return false, nil
		}
		for _, d := range ds {
			if bytes.Equal(buf[:n], d) {
				return true, nil
			}
		}
	}
}

// echoVerdict turns echoed's answer into the attempt's result: an echo
// means what the attack sent (named by what) reached the server.
func echoVerdict(ok bool, err error, what string) result {
	switch {
	case err != nil:
		return erroredf("%v", err)
	case ok:
		return allowedf("%s reached the server and came back", what)
	}
	return blockedf("%s got no answer", what)
}

// afterFirstConnection opens a flow to quic.test:443/udp with a QUIC
// connection naming quic.test, which must reach the echo server (the
// attack's set-up: SetupHits 1), then sends attack on the same socket: if
// the echo server answers it, the attack got through (what names it in
// the result).
func afterFirstConnection(ctx context.Context, a *attacker, attack []byte, what string) result {
	first, err := quicInitial(internet.QUICName)
	if err != nil {
		return erroredf("precondition: build the Initial: %v", err)
	}
	c, err := a.dialer().DialContext(ctx, "udp", hostPort(internet.QUICName, 443))
	if err != nil {
		return erroredf("precondition: %v", err)
	}
	defer c.Close()
	if ok, err := echoed(c, a.cfg.Timeout, first); !ok {
		return erroredf("precondition: the first connection (quic.test) did not reach the server: %v", err)
	}
	ok, err := echoed(c, a.cfg.Timeout/3, attack)
	return echoVerdict(ok, err, what)
}

// l7QUICFixedBit sends a flow's first QUIC connection as two Initials:
// the ClientHello up to the name, then the rest (quic.test) in an Initial
// without the fixed bit. A server drops that packet and acknowledges the
// first; an Initial under the server's connection ID (with the keys of
// the client's, which the gateway cannot tell from garbage) then carries
// the rest naming evil.test, and the server reads that. The echo server
// cannot play the server's part: the attempt checks that the gateway
// refuses the connection, so that nothing of it reaches the server.
func l7QUICFixedBit() Attempt {
	return Attempt{
		ID: "l7-quic-fixed-bit", Category: "l7", Layer: LayerL7,
		Description: "a QUIC ClientHello naming quic.test whose second Initial has its fixed bit clear (a server drops it, so the rest of the ClientHello could come later, unread, under the server's connection ID, naming evil.test)",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"app-udp"},
		run: func(ctx context.Context, a *attacker) result {
			good, _, k, err := quicSplit(internet.QUICName, "evil.test")
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			dcid := make([]byte, 8)
			rand.Read(dcid)
			b1, err := l7.BuildQUICInitial(l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: dcid[:4],
				PN: 0, Payload: l7.QUICCryptoFrame(0, good[:k]), PadTo: 1200})
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			b2, err := l7.BuildQUICInitial(l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: dcid[:4],
				PN: 1, Payload: l7.QUICCryptoFrame(k, good[k:]), PadTo: 1200, ClearFixedBit: true})
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			c, err := a.dialer().DialContext(ctx, "udp", hostPort(internet.QUICName, 443))
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			defer c.Close()
			ok, err := echoed(c, a.cfg.Timeout/3, b1, b2)
			return echoVerdict(ok, err, "the Initials, the one without the fixed bit among them (checked, and a server drops it),")
		},
	}
}

// l7QUICLateInitial opens a QUIC connection naming quic.test, which
// passes, then sends on the same socket a datagram led by a 0-RTT packet
// of a new connection ID and holding an Initial of it: packet number 1002
// in one byte, the tail of a ClientHello naming evil.test. The gateway
// reads the number as 234 (no packet of that connection seen) and cannot
// decrypt it; a server (quic-go) queues the datagram until an Initial
// starts the connection (say packet 1000, naming quic.test, which passes
// the check), then reads 1002 and takes the evil.test tail. The gateway
// must drop the datagram.
func l7QUICLateInitial() Attempt {
	return Attempt{
		ID: "l7-quic-late-initial", Category: "l7", Layer: LayerL7,
		Description: "a QUIC connection naming quic.test, then a datagram led by a 0-RTT packet whose Initial (packet number 1002 in one byte) carries the tail of a ClientHello naming evil.test",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"app-udp"}, SetupHits: 1,
		run: func(ctx context.Context, a *attacker) result {
			_, bad, k, err := quicSplit(internet.QUICName, "evil.test")
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			dcid := make([]byte, 8)
			rand.Read(dcid)
			z := quicZeroRTT(dcid, dcid[:4])
			in, err := l7.BuildQUICInitial(l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: dcid[:4],
				PN: 1002, PNLen: 1, Payload: l7.QUICCryptoFrame(k, bad[k:]), PadTo: 1200 - len(z)})
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			return afterFirstConnection(ctx, a, append(z, in...), "the datagram with the late Initial (evil.test)")
		},
	}
}

// quicFillerAfterLoss opens a flow's first QUIC connection naming
// quic.test in two Initials, the second with packet number 200 in a
// datagram longer than quic-go reads (1452 bytes: it drops it truncated;
// on a real path any lost datagram will do), so the gateway has read the
// whole ClientHello and the server only its head. A 0-RTT packet sent to
// the client's own ID under a chosen "server ID" comes back from the echo
// server as a server's answer would, and teaches the gateway that ID.
// With forget, 16 more connections naming quic.test follow. The filler
// is the tail of a ClientHello naming evil.test in an Initial under the
// server ID with the keys of the client's ID, packet number 1 in one
// byte: the server decodes 1 and reads it; the gateway decoded 257 (its
// largest was 200) and could not decrypt it, or no longer knew the ID.
func quicFillerAfterLoss(ctx context.Context, a *attacker, forget bool) result {
	good, bad, k, err := quicSplit(internet.QUICName, "evil.test")
	if err != nil {
		return erroredf("precondition: %v", err)
	}
	dcid := make([]byte, 8)
	rand.Read(dcid)
	scid, serverID := dcid[:4], []byte{0x5e, dcid[1], dcid[2], dcid[3]}
	var ds [][]byte
	for _, p := range []l7.QUICInitial{
		{Version: l7.QUICv1, DCID: dcid, SCID: scid, PN: 0, Payload: l7.QUICCryptoFrame(0, good[:k]), PadTo: 1200},
		{Version: l7.QUICv1, DCID: dcid, SCID: scid, PN: 200, PNLen: 2, Payload: l7.QUICCryptoFrame(k, good[k:]), PadTo: 1460},
		{Version: l7.QUICv1, DCID: serverID, KeyDCID: dcid, SCID: scid, PN: 1, PNLen: 1, Payload: l7.QUICCryptoFrame(k, bad[k:]), PadTo: 1200},
	} {
		b, err := l7.BuildQUICInitial(p)
		if err != nil {
			return erroredf("precondition: %v", err)
		}
		ds = append(ds, b)
	}
	c, err := a.dialer().DialContext(ctx, "udp", hostPort(internet.QUICName, 443))
	if err != nil {
		return erroredf("precondition: %v", err)
	}
	defer c.Close()
	if ok, err := echoed(c, a.cfg.Timeout, ds[0], ds[1]); !ok {
		return erroredf("precondition: the first connection (quic.test) did not reach the server: %v", err)
	}
	if ok, err := echoed(c, a.cfg.Timeout, quicZeroRTT(scid, serverID)); !ok {
		return erroredf("precondition: the server ID was not echoed: %v", err)
	}
	if forget {
		for i := range 16 {
			id := make([]byte, 8)
			rand.Read(id)
			in, err := l7.BuildQUICInitial(l7.QUICInitial{Version: l7.QUICv1, DCID: id, SCID: id[:4],
				Payload: l7.QUICCryptoFrame(0, good), PadTo: 1200})
			if err != nil {
				return erroredf("precondition: %v", err)
			}
			if ok, err := echoed(c, a.cfg.Timeout, in); !ok {
				return erroredf("precondition: connection %d (quic.test) did not reach the server: %v", i+2, err)
			}
		}
	}
	// Half the timeout for the echo that must not come: on a loaded
	// machine the gateway's deny of the filler was recorded after a
	// quarter of it, in the next attempt's window (a CI run beside
	// another test run).
	ok, err := echoed(c, a.cfg.Timeout/2, ds[2])
	return echoVerdict(ok, err, "the filler naming evil.test, under the server's connection ID,")
}

func l7QUICLostInitial() Attempt {
	return Attempt{
		ID: "l7-quic-lost-initial", Category: "l7", Layer: LayerL7,
		Description: "a QUIC ClientHello naming quic.test whose second Initial (packet number 200) the server never gets, then the tail naming evil.test under the server's connection ID, packet number 1 in one byte (257 to the gateway, 1 to the server)",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"app-udp"}, SetupHits: 3,
		run: func(ctx context.Context, a *attacker) result {
			return quicFillerAfterLoss(ctx, a, false)
		},
	}
}

func l7QUICForgottenConn() Attempt {
	return Attempt{
		ID: "l7-quic-forgotten-conn", Category: "l7", Layer: LayerL7,
		Description: "as l7-quic-lost-initial, but 16 more QUIC connections on the flow first make the gateway forget the spliced one and its server ID",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"app-udp"}, SetupHits: 19,
		run: func(ctx context.Context, a *attacker) result {
			return quicFillerAfterLoss(ctx, a, true)
		},
	}
}
