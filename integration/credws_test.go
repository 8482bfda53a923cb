//go:build integration

package integration

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wsAccept is the Sec-WebSocket-Accept answer to key (RFC 6455 §4.2.2).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsServe is the fake upstream's WebSocket side, written from RFC 6455
// here rather than with nsgate's relay: it reads masked client frames,
// records each data message, answers "ws-echo " + message, and answers
// "reflect" with the real secret split over two fragments.
func (u *credUpstream) wsServe(rw *bufio.ReadWriter) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(rw, h[:]); err != nil {
			return
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(rw, b[:]); err != nil {
				return
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(rw, b[:]); err != nil {
				return
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > 1<<20 || h[1]&0x80 == 0 {
			return
		}
		var key [4]byte
		if _, err := io.ReadFull(rw, key[:]); err != nil {
			return
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(rw, p); err != nil {
			return
		}
		for i := range p {
			p[i] ^= key[i&3]
		}
		op := h[0] & 0x0f
		if op >= 8 {
			if op == 8 {
				u.mu.Lock()
				u.ws = append(u.ws, "close")
				u.mu.Unlock()
				return
			}
			continue
		}
		msg = append(msg, p...)
		if h[0]&0x80 == 0 {
			continue
		}
		u.mu.Lock()
		u.ws = append(u.ws, string(msg))
		u.mu.Unlock()
		if string(msg) == "reflect" {
			half := len(credSecret) / 2
			a, b := "token="+credSecret[:half], credSecret[half:]
			rw.Write(append([]byte{0x01, byte(len(a))}, a...))
			rw.Write(append([]byte{0x80, byte(len(b))}, b...))
		} else {
			out := "ws-echo " + string(msg)
			rw.Write([]byte{0x81, byte(len(out))}) // short: under 126
			rw.WriteString(out)
		}
		rw.Flush()
		msg = msg[:0]
	}
}

// wsNode is a Node WebSocket client (undici's, which offers
// permessage-deflate): a normal message, an echo of the secret, then the
// placeholder in a message; it prints what it got and the close code.
const wsNode = `const ws = new WebSocket('wss://api.example.test:%d/repos/acme/ws');
const tok = process.env.API_TOKEN;
let n = 0;
ws.onopen = () => ws.send('hello');
ws.onmessage = (e) => {
  console.log('got ' + e.data);
  n++;
  if (n === 1) ws.send('reflect');
  if (n === 2) ws.send('leak ' + tok);
};
ws.onclose = (e) => { console.log('close=' + e.code); process.exit(0); };
ws.onerror = () => console.log('error');
setTimeout(() => { console.log('timeout'); process.exit(1); }, 20000);`

// TestCredentialsWebSocket: a real WebSocket client in the worker on a
// terminated host with a credential: a normal message passes, the real
// secret echoed by the upstream (split over two frames) reaches the
// worker only as the placeholder, and the placeholder in a message closes
// the connection with 1008: the upstream saw no message with it and the
// audit log has the credential deny.
func TestCredentialsWebSocket(t *testing.T) {
	up := startCredUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		up.reset()
		dir := workDir(t, m)
		caFile := writeFile(t, dir, "upstream-ca.pem", string(up.ca.PEM()))
		pol := writeFile(t, dir, "policy.yaml", credPolicy(caFile))
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/node", "--",
			"node", "--experimental-websocket", "--no-warnings", "-e", fmt.Sprintf(wsNode, credPort))
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		r := runBounded(t, cmd, 60*time.Second, "nsgate run (websocket)", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		if strings.Contains(r.stdout, credSecret) {
			t.Errorf("the worker saw the secret")
		}
		for _, want := range []string{"got ws-echo hello", "got token=nsgph", "close=1008"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("missing %q in:\n%s", want, r.stdout)
			}
		}
		up.mu.Lock()
		got := append([]string(nil), up.ws...)
		up.mu.Unlock()
		if len(got) < 2 || got[0] != "hello" || got[1] != "reflect" {
			t.Errorf("upstream messages %q, want hello and reflect", got)
		}
		for _, g := range got {
			if strings.Contains(g, "nsgph") || strings.Contains(g, credSecret) {
				t.Errorf("the upstream got %q", g)
			}
		}
		found := false
		for _, ar := range readAudit(t, log) {
			if strings.Contains(fmt.Sprint(ar), credSecret) {
				t.Errorf("audit record holds the secret: %v", ar)
			}
			if ar.str("event") == "credential" && ar.str("where") == "a WebSocket message" {
				found = true
			}
		}
		if !found {
			t.Errorf("no credential deny for the WebSocket message in the audit log")
		}
	})
}
