package intercept

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// clientFrame is a masked client frame (fin or not) with payload.
func clientFrame(op byte, fin bool, payload []byte) []byte {
	b := appendFrame(nil, op, payload, true)
	if !fin {
		b[0] &^= 0x80
	}
	return b
}

// readServerMsg reads one whole message (or control frame) the relay
// sent the worker; it fails the test on a bad frame.
func readServerMsg(t *testing.T, br *bufio.Reader) (byte, string) {
	t.Helper()
	var buf []byte
	var msg []byte
	var op byte
	for {
		f, n, err := parseFrame(buf, false, maxWSMessage)
		if err != nil {
			t.Fatalf("relay sent a bad frame: %v", err)
		}
		if n == 0 {
			b, err := br.ReadByte()
			if err != nil {
				t.Fatalf("reading a frame: %v (have %q)", err, buf)
			}
			buf = append(buf, b)
			continue
		}
		buf = buf[n:]
		if f.op != wsCont {
			op = f.op
		}
		msg = append(msg, f.payload...)
		if f.fin {
			return op, string(msg)
		}
	}
}

// wsEcho is the fake upstream's WebSocket endpoint: it records each
// message and answers "echo " + message; a message "reflect" is answered
// with the Authorization secret, split over two fragments.
func (u *upstream) wsEcho(brw *bufio.ReadWriter) {
	var in wsStream
	in.fromClient = true
	buf := make([]byte, 4096)
	for {
		n, err := brw.Read(buf)
		if n > 0 {
			_, ferr := in.feed(buf[:n], func(f wsFrame, msg []byte) ([]byte, error) {
				if f.op == wsClose {
					u.mu.Lock()
					u.wsMsgs = append(u.wsMsgs, "close:"+string(msg[min(2, len(msg)):]))
					u.mu.Unlock()
					return nil, io.EOF
				}
				if f.op >= wsClose {
					return nil, nil
				}
				u.mu.Lock()
				u.wsMsgs = append(u.wsMsgs, string(msg))
				u.mu.Unlock()
				if string(msg) == "reflect" {
					half := len(secret) / 2
					first := appendFrame(nil, wsText, []byte("token="+secret[:half]), false)
					first[0] &^= 0x80
					brw.Write(first)
					brw.Write(appendFrame(nil, wsCont, []byte(secret[half:]+" end"), false))
				} else {
					brw.Write(appendFrame(nil, wsText, append([]byte("echo "), msg...), false))
				}
				brw.Flush()
				return nil, nil
			})
			if ferr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (u *upstream) messages() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.wsMsgs...)
}

// wsDial upgrades to WebSocket on /ws through the rig, with an extension
// offer.
func (r *rig) wsDial() (*tls.Conn, *bufio.Reader) {
	r.t.Helper()
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: "api.example.test", RootCAs: r.e.CA.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		r.t.Fatalf("upgrade: %v %v", resp, err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, br
}

// closeCode reads until a close frame and returns its code.
func closeCode(t *testing.T, br *bufio.Reader) int {
	t.Helper()
	for {
		op, msg := readServerMsg(t, br)
		if op == wsClose {
			if len(msg) < 2 {
				t.Fatalf("close frame without a code")
			}
			return int(binary.BigEndian.Uint16([]byte(msg)))
		}
	}
}

func TestWebSocketMessages(t *testing.T) {
	r := newRig(t, nil)
	c, br := r.wsDial()
	// A normal message, fragmented, with a ping in between.
	c.Write(clientFrame(wsText, false, []byte("hel")))
	c.Write(clientFrame(wsPing, true, []byte("p")))
	c.Write(clientFrame(wsCont, true, []byte("lo")))
	if op, msg := readServerMsg(t, br); op != wsText || msg != "echo hello" {
		t.Errorf("normal message: op %d %q", op, msg)
	}
	// The upstream echoes the secret split over two frames: the worker
	// sees the placeholder, whole.
	c.Write(clientFrame(wsText, true, []byte("reflect")))
	if op, msg := readServerMsg(t, br); op != wsText || msg != "token="+r.ph+" end" {
		t.Errorf("echo: op %d %q, want the placeholder", op, msg)
	}
	// The placeholder split across two fragments: refused, 1008, and the
	// upstream never saw any part of that message.
	half := len(r.ph) / 2
	c.Write(clientFrame(wsText, false, []byte("leak "+r.ph[:half])))
	c.Write(clientFrame(wsCont, true, []byte(r.ph[half:])))
	if code := closeCode(t, br); code != closePolicy {
		t.Errorf("close code %d, want 1008", code)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the connection stayed open after the refusal")
	}
	waitFor(t, func() bool { return len(r.credentialDenies()) > 0 })
	for _, m := range r.up.messages() {
		if strings.Contains(m, r.ph[:half]) || strings.Contains(m, secret) {
			t.Errorf("the upstream saw %q", m)
		}
	}
	if d := r.credentialDenies(); len(d) != 1 || d[0].Where != "a WebSocket message" || d[0].Credential != "gh" {
		t.Errorf("credential denies: %+v", d)
	}
	r.up.mu.Lock()
	ext := r.up.wsExt
	r.up.mu.Unlock()
	for _, e := range ext {
		if e != "" {
			t.Errorf("the extension offer reached the upstream: %q", e)
		}
	}
	r.noSecretInAudit()
}

func TestWebSocketSecretFromWorker(t *testing.T) {
	r := newRig(t, nil)
	c, br := r.wsDial()
	c.Write(clientFrame(wsBin, true, []byte("x"+secret)))
	if code := closeCode(t, br); code != closePolicy {
		t.Errorf("close code %d, want 1008", code)
	}
	waitFor(t, func() bool { return len(r.credentialDenies()) > 0 })
	if m := r.up.messages(); len(m) != 0 && m[len(m)-1] != "close:" {
		t.Errorf("the upstream saw %q", m)
	}
}

func TestWebSocketBadFrames(t *testing.T) {
	long := make([]byte, 10)
	long[0], long[1] = 0x81, 0x80|127
	binary.BigEndian.PutUint64(long[2:], 1<<62)
	cases := map[string][]byte{
		"reserved bits":  {0xC1, 0x80, 1, 2, 3, 4},
		"unmasked":       {0x81, 0x01, 'a'},
		"huge length":    long,
		"opcode 3":       {0x83, 0x80, 1, 2, 3, 4},
		"long ping":      append([]byte{0x89, 0x80 | 126, 0, 200}, make([]byte, 204)...),
		"lone cont":      clientFrame(wsCont, true, []byte("x")),
		"over the bound": clientFrame(wsBin, true, make([]byte, maxWSMessage+1)),
	}
	r := newRig(t, nil)
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			c, br := r.wsDial()
			c.Write(b)
			code := closeCode(t, br)
			if code != closeProtocol && code != closeTooBig {
				t.Errorf("close code %d", code)
			}
		})
	}
	if m := r.up.messages(); len(m) != 0 {
		for _, x := range m {
			if x != "close:" {
				t.Errorf("the upstream got a message: %.40q", x)
			}
		}
	}
}

// The RFC 6455 §5.7 examples.
func TestParseFrameRFC(t *testing.T) {
	f, n, err := parseFrame([]byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}, true, 100)
	if err != nil || n != 11 || string(f.payload) != "Hello" || !f.fin || f.op != wsText {
		t.Errorf("masked Hello: %+v %d %v", f, n, err)
	}
	f, n, err = parseFrame([]byte{0x01, 0x03, 0x48, 0x65, 0x6c}, false, 100)
	if err != nil || n != 5 || string(f.payload) != "Hel" || f.fin {
		t.Errorf("fragment: %+v %d %v", f, n, err)
	}
	b := append([]byte{0x82, 0x7E, 0x01, 0x00}, make([]byte, 256)...)
	if _, n, err = parseFrame(b, false, 1000); err != nil || n != 260 {
		t.Errorf("256 bytes: %d %v", n, err)
	}
	if _, n, err = parseFrame(b[:100], false, 1000); err != nil || n != 0 {
		t.Errorf("partial: %d %v", n, err)
	}
	if _, _, err = parseFrame([]byte{0x82, 0x7E, 0x00, 0x05}, false, 1000); err == nil {
		t.Errorf("non-minimal length taken")
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for i := 0; i < 500 && !ok(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !ok() {
		t.Fatal("condition not met")
	}
}

// FuzzWSStream feeds arbitrary bytes, in two chunks, to both directions'
// parsers: no panic, the worker side forwards exactly the bytes of the
// whole frames it accepted, and nothing over the bound is held.
func FuzzWSStream(f *testing.F) {
	f.Add([]byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}, 3)
	f.Add(append(clientFrame(wsText, false, []byte("ab")), clientFrame(wsCont, true, []byte("cd"))...), 5)
	f.Add([]byte{0x82, 0x7E, 0x01, 0x00, 1, 2}, 1)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if cut < 0 || cut > len(b) {
			cut = len(b) / 2
		}
		for _, client := range []bool{true, false} {
			s := wsStream{fromClient: client}
			var out []byte
			var accepted int
			pass := func(f wsFrame, msg []byte) ([]byte, error) {
				if f.op >= wsClose {
					return f.raw, nil
				}
				return append([]byte(nil), s.raw...), nil
			}
			o1, err := s.feed(b[:cut], pass)
			out = append(out, o1...)
			if err == nil {
				o2, err2 := s.feed(b[cut:], pass)
				out = append(out, o2...)
				err = err2
			}
			if len(s.payload) > maxWSMessage || len(s.in) > maxWSMessage+14 {
				t.Fatalf("held %d+%d", len(s.payload), len(s.in))
			}
			// What went on is whole valid frames, no more bytes than
			// came (control frames may overtake a held message).
			if len(out) > len(b) {
				t.Fatalf("forwarded %d bytes of %d", len(out), len(b))
			}
			for rest := out; len(rest) > 0; {
				_, n, err := parseFrame(rest, client, maxWSMessage)
				if err != nil || n == 0 {
					t.Fatalf("forwarded a bad or partial frame: %v", err)
				}
				accepted += n
				rest = rest[n:]
			}
			if err == nil && accepted != len(out) {
				t.Fatalf("accepted %d of %d forwarded", accepted, len(out))
			}
		}
	})
}

// With substitution switched off (--break), messages pass unread: the
// placeholder reaches the upstream, so TestWebSocketMessages can fail.
func TestWebSocketBreak(t *testing.T) {
	r := newRig(t, func(e *Engine) { e.NoSubstitute = true })
	c, br := r.wsDial()
	c.Write(clientFrame(wsText, true, []byte("leak "+r.ph)))
	if op, msg := readServerMsg(t, br); op != wsText || msg != "echo leak "+r.ph {
		t.Errorf("op %d %q", op, msg)
	}
	if m := r.up.messages(); len(m) != 1 || m[0] != "leak "+r.ph {
		t.Errorf("upstream saw %q, want the placeholder through", m)
	}
}
