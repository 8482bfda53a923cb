package intercept

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/nsgate/nsgate/audit"
)

// WebSocket messages on a terminated flow that may carry a credential
// (docs/credentials.md, "WebSocket"). After the upstream answered 101, the
// worker's connection is read as RFC 6455 client frames and the upstream's
// as server frames:
//
//   - worker to upstream: the frames of a data message are held until the
//     message is complete (at most maxWSMessage of payload), the unmasked
//     payload is searched for any placeholder and any secret, and only then
//     are the frames passed on as they came (masking and fragmentation
//     untouched). A control frame is searched the same way on its own. A
//     hit closes the connection: a 1008 close to the worker, a 1008 close
//     to the upstream, a credential deny in the audit log.
//   - upstream to worker: a data message is held whole (same bound), every
//     secret in it is replaced by its placeholder and it is sent to the
//     worker as one frame (an intermediary may refragment, RFC 6455 §5.4);
//     control frames are scrubbed the same way.
//
// permessage-deflate and every other extension are taken out of the
// worker's offer (Sec-WebSocket-Extensions), so payloads are in clear; an
// upstream that answers with an extension anyway is refused. Bad frames
// (reserved bits, an unknown opcode, an unmasked client frame or a masked
// server frame, a fragmented or long control frame, a non-minimal or
// 64-bit-overflowing length, a message past maxWSMessage, continuation
// out of order) close the connection with 1002 (protocol error) or 1009
// (too big) to the worker. The relay never holds more than one message
// per direction.
const maxWSMessage = 1 << 20

// WebSocket opcodes and close codes.
const (
	wsCont  = 0x0
	wsText  = 0x1
	wsBin   = 0x2
	wsClose = 0x8
	wsPing  = 0x9
	wsPong  = 0xA

	closePolicy   = 1008
	closeProtocol = 1002
	closeTooBig   = 1009
)

// wsError ends a relayed WebSocket connection: code is the close code sent
// to the worker; cred names the credential of a leak.
type wsError struct {
	code   int
	reason string
	cred   string
}

func (e *wsError) Error() string { return "websocket: " + e.reason }

// wsFrame is one parsed frame; payload is unmasked, raw the frame's bytes
// as they came.
type wsFrame struct {
	fin     bool
	op      byte
	payload []byte
	raw     []byte
}

// parseFrame parses the frame at the start of b. fromClient says which
// side sent it (client frames must be masked, server frames must not).
// It returns n == 0 and no error while b holds less than a whole frame.
// A frame whose payload is over max is an error as soon as its header
// is read.
func parseFrame(b []byte, fromClient bool, max int) (f wsFrame, n int, err error) {
	if len(b) < 2 {
		return f, 0, nil
	}
	b0, b1 := b[0], b[1]
	if b0&0x70 != 0 {
		return f, 0, &wsError{code: closeProtocol, reason: "reserved bits set (no extension is negotiated)"}
	}
	f.fin, f.op = b0&0x80 != 0, b0&0x0f
	switch f.op {
	case wsCont, wsText, wsBin, wsClose, wsPing, wsPong:
	default:
		return f, 0, &wsError{code: closeProtocol, reason: "unknown opcode"}
	}
	masked := b1&0x80 != 0
	if masked != fromClient {
		if fromClient {
			return f, 0, &wsError{code: closeProtocol, reason: "unmasked client frame"}
		}
		return f, 0, &wsError{code: closeProtocol, reason: "masked server frame"}
	}
	hlen := 2
	plen := uint64(b1 & 0x7f)
	switch plen {
	case 126:
		if len(b) < 4 {
			return f, 0, nil
		}
		plen = uint64(binary.BigEndian.Uint16(b[2:4]))
		hlen = 4
		if plen < 126 {
			return f, 0, &wsError{code: closeProtocol, reason: "length not in its shortest form"}
		}
	case 127:
		if len(b) < 10 {
			return f, 0, nil
		}
		plen = binary.BigEndian.Uint64(b[2:10])
		hlen = 10
		if plen>>63 != 0 {
			return f, 0, &wsError{code: closeProtocol, reason: "64-bit length with its top bit set"}
		}
		if plen <= 0xffff {
			return f, 0, &wsError{code: closeProtocol, reason: "length not in its shortest form"}
		}
	}
	if f.op >= wsClose && (!f.fin || plen > 125) {
		return f, 0, &wsError{code: closeProtocol, reason: "fragmented or long control frame"}
	}
	if plen > uint64(max) {
		return f, 0, &wsError{code: closeTooBig, reason: "message over the relay's bound"}
	}
	var key []byte
	if masked {
		if len(b) < hlen+4 {
			return f, 0, nil
		}
		key = b[hlen : hlen+4]
		hlen += 4
	}
	total := hlen + int(plen)
	if len(b) < total {
		return f, 0, nil
	}
	f.raw = b[:total:total]
	f.payload = append([]byte(nil), b[hlen:total]...)
	if masked {
		for i := range f.payload {
			f.payload[i] ^= key[i&3]
		}
	}
	return f, total, nil
}

// appendFrame appends a final frame of op with payload, masked with a
// fresh key if mask (a frame to the upstream).
func appendFrame(dst []byte, op byte, payload []byte, mask bool) []byte {
	dst = append(dst, 0x80|op)
	var mbit byte
	if mask {
		mbit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		dst = append(dst, mbit|byte(n))
	case n <= 0xffff:
		dst = append(dst, mbit|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, mbit|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if !mask {
		return append(dst, payload...)
	}
	var key [4]byte
	rand.Read(key[:])
	dst = append(dst, key[:]...)
	for i, c := range payload {
		dst = append(dst, c^key[i&3])
	}
	return dst
}

// closeFrame is a close frame with code and a short reason.
func closeFrame(code int, reason string, mask bool) []byte {
	if len(reason) > 120 {
		reason = reason[:120]
	}
	p := binary.BigEndian.AppendUint16(nil, uint16(code))
	return appendFrame(nil, wsClose, append(p, reason...), mask)
}

// wsStream reassembles the frames of one direction.
type wsStream struct {
	fromClient bool
	in         []byte // bytes not yet a whole frame
	op         byte   // opcode of the open message, 0 if none
	raw        []byte // raw frames of the open message
	payload    []byte // its payload so far
}

// feed takes bytes of the stream and calls frame for each whole frame,
// with msg set to the whole message's payload when the frame ends a data
// message (nil for the earlier fragments; control frames have their own
// payload). frame returns what to forward.
func (s *wsStream) feed(b []byte, frame func(f wsFrame, msg []byte) ([]byte, error)) ([]byte, error) {
	s.in = append(s.in, b...)
	var out []byte
	for {
		room := max(maxWSMessage-len(s.payload), 125)
		f, n, err := parseFrame(s.in, s.fromClient, room)
		if err != nil {
			return out, err
		}
		if n == 0 {
			if len(s.in) > maxWSMessage+14 {
				return out, &wsError{code: closeTooBig, reason: "message over the relay's bound"}
			}
			return out, nil
		}
		var msg []byte
		switch {
		case f.op >= wsClose:
			msg = f.payload
		case f.op == wsCont && s.op == 0:
			return out, &wsError{code: closeProtocol, reason: "continuation frame without a message"}
		case f.op != wsCont && s.op != 0:
			return out, &wsError{code: closeProtocol, reason: "new message before the last one ended"}
		default:
			if f.op != wsCont {
				s.op = f.op
			}
			s.raw = append(s.raw, f.raw...)
			s.payload = append(s.payload, f.payload...)
			if f.fin {
				msg = s.payload
			}
		}
		if msg != nil || f.op >= wsClose {
			o, err := frame(f, msg)
			out = append(out, o...)
			if err != nil {
				return out, err
			}
			if f.op < wsClose {
				s.op, s.raw, s.payload = 0, s.raw[:0], s.payload[:0]
			}
		}
		s.in = append(s.in[:0], s.in[n:]...)
	}
}

// wsRelay is the worker's hijacked connection after a 101 on a terminated
// flow with credentials: Read gives the worker's frames once checked, Write
// takes the upstream's and sends them to the worker scrubbed.
type wsRelay struct {
	net.Conn
	h    *handler
	up   io.Writer // the upstream connection, for its close frame
	wmu  sync.Mutex
	dead bool // a close went to the worker: nothing more does

	fromWorker, fromUp wsStream
	fwd                []byte // checked worker bytes not yet given to Read
	rbuf               []byte // Read's buffer, made once
	err                error  // why the relay ended, for the request record
	phs                []string
}

func (h *handler) newWSRelay(c net.Conn) *wsRelay {
	w := &wsRelay{Conn: c, h: h, fromWorker: wsStream{fromClient: true}}
	_, w.phs = h.e.Vault.pairs()
	return w
}

// toWorker writes b to the worker unless a close already went.
func (w *wsRelay) toWorker(b []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.dead {
		return net.ErrClosed
	}
	_, err := w.Conn.Write(b)
	return err
}

// fail sends the worker a close for err, once, and records a leak.
func (w *wsRelay) fail(err error, toUpstream bool) {
	var we *wsError
	if !errors.As(err, &we) {
		return
	}
	if we.cred != "" {
		// Recorded before either side hears of it.
		f := &w.h.f
		f.Audit.Log(audit.Credential{Action: "deny", FlowSeq: f.Seq, Credential: we.cred, Host: f.Host,
			Where: "a WebSocket message", Reason: "credential " + we.cred + ": " + we.reason})
	}
	w.wmu.Lock()
	if !w.dead {
		w.dead = true
		w.Conn.Write(closeFrame(we.code, we.reason, false))
	}
	w.err = err
	w.wmu.Unlock()
	if toUpstream && w.up != nil {
		w.up.Write(closeFrame(we.code, "", true))
	}
}

// checkOut is the worker-to-upstream decision on one message or control
// frame: a placeholder or a secret in it ends the connection.
func (w *wsRelay) checkOut(f wsFrame, msg []byte) ([]byte, error) {
	v := w.h.e.Vault
	if name, found := v.Find(msg); found {
		return nil, &wsError{code: closePolicy, cred: name, reason: "placeholder in a WebSocket message, where it may not go"}
	}
	for i := range v.pats {
		if v.pats[i].index(msg) >= 0 {
			return nil, &wsError{code: closePolicy, cred: v.creds[i].spec.Name, reason: "the secret itself in a WebSocket message"}
		}
	}
	if f.op >= wsClose {
		return f.raw, nil
	}
	return append([]byte(nil), w.fromWorker.raw...), nil
}

// Read gives the upstream the worker's bytes, whole checked messages only.
func (w *wsRelay) Read(p []byte) (int, error) {
	if w.rbuf == nil {
		w.rbuf = make([]byte, 32<<10)
	}
	for len(w.fwd) == 0 {
		n, rerr := w.Conn.Read(w.rbuf)
		if n > 0 {
			out, err := w.fromWorker.feed(w.rbuf[:n], w.checkOut)
			w.fwd = append(w.fwd, out...)
			if err != nil {
				if len(w.fwd) > 0 && w.up != nil {
					w.up.Write(w.fwd) // the messages before the bad one passed
				}
				w.fwd = nil
				w.fail(err, true)
				return 0, err
			}
		}
		if rerr != nil && len(w.fwd) == 0 {
			return 0, rerr
		}
	}
	n := copy(p, w.fwd)
	w.fwd = w.fwd[n:]
	return n, nil
}

// scrubIn is the upstream-to-worker rewrite of one message or control
// frame: secrets become placeholders, the message goes as one frame.
func (w *wsRelay) scrubIn(f wsFrame, msg []byte) ([]byte, error) {
	op := f.op
	if op < wsClose {
		op = w.fromUp.op
	}
	if out, found := replaceEchoes(msg, w.h.e.Vault.echoSearches); found {
		msg = out
	}
	if op >= wsClose && len(msg) > 125 {
		msg = msg[:125]
	}
	return appendFrame(nil, op, msg, false), nil
}

// Write takes the upstream's bytes and sends the worker whole scrubbed
// messages.
func (w *wsRelay) Write(p []byte) (int, error) {
	out, err := w.fromUp.feed(p, w.scrubIn)
	if len(out) > 0 {
		if werr := w.toWorker(out); werr != nil && err == nil {
			return 0, werr
		}
	}
	if err != nil {
		w.fail(err, false)
		return 0, err
	}
	return len(p), nil
}

// why is the error that ended the relay, if nsgate ended it.
func (w *wsRelay) why() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.err
}

func (w *wsRelay) Close() error {
	return w.Conn.Close()
}

// wsKey is the context key of a WebSocket upgrade's state.
type wsKey struct{}

// wsUpgrade is the state of one upgrade request: the upstream's side of
// the switched connection (set by scrubResponse) and the relay (set when
// the worker's connection is hijacked).
type wsUpgrade struct {
	h     *handler
	up    io.Writer
	relay *wsRelay
}

// wsWriter is the ResponseWriter of an upgrade request: its Hijack puts the
// relay between the worker and the reverse proxy's copy loops.
type wsWriter struct {
	*recorder
	u *wsUpgrade
}

func (w *wsWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.recorder.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if w.u.up == nil {
		// No switch was checked (scrubResponse did not see a 101):
		// refuse to relay unread.
		c.Close()
		return nil, nil, errors.New("websocket: switch not checked")
	}
	w.recorder.status = http.StatusSwitchingProtocols
	r := w.u.h.newWSRelay(c)
	r.up = w.u.up
	w.u.relay = r
	return r, brw, nil
}

// wsWanted reports whether an upgrade request's messages must be read: a
// WebSocket upgrade on a flow with credentials in force.
func (h *handler) wsWanted(r *http.Request) bool {
	return !h.e.Vault.Empty() && !h.e.NoSubstitute && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// prepareWS strips the worker's extension offer and returns the request and
// writer to proxy with.
func (h *handler) prepareWS(r *http.Request, rec *recorder) (*http.Request, http.ResponseWriter, *wsUpgrade) {
	u := &wsUpgrade{h: h}
	r.Header.Del("Sec-WebSocket-Extensions")
	r = r.WithContext(context.WithValue(r.Context(), wsKey{}, u))
	return r, &wsWriter{recorder: rec, u: u}, u
}

// checkSwitch is scrubResponse's part for a 101 to a read WebSocket: no
// extension may be in force, and the upstream's side must be writable.
func checkSwitch(resp *http.Response) error {
	u, _ := resp.Request.Context().Value(wsKey{}).(*wsUpgrade)
	if u == nil {
		return nil
	}
	if resp.Header.Get("Sec-WebSocket-Extensions") != "" {
		return errors.New("the upstream switched to WebSocket with an extension nsgate did not offer")
	}
	up, ok := resp.Body.(io.Writer)
	if !ok {
		return errors.New("the upstream's switched connection is not writable")
	}
	u.up = up
	return nil
}
