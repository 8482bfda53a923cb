package intercept

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// scrubResponse replaces every secret in the upstream's response headers
// and body with its placeholder before the worker sees it. The body is
// rewritten as it streams, so its length may change: Content-Length goes.
// A WebSocket switch (101) is checked here and its messages are read by
// the relay (websocket.go).
func (e *Engine) scrubResponse(resp *http.Response) error {
	if e.Vault.Empty() || e.NoSubstitute {
		return nil
	}
	secrets, phs := e.Vault.pairs()
	for k, vals := range resp.Header {
		for i, v := range vals {
			vals[i] = replaceAll(v, secrets, phs)
		}
		resp.Header[k] = vals
	}
	for k, vals := range resp.Trailer {
		for i, v := range vals {
			vals[i] = replaceAll(v, secrets, phs)
		}
		resp.Trailer[k] = vals
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return checkSwitch(resp)
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	resp.Body = &scrubBody{r: resp.Body, secrets: secrets, phs: phs, keep: maxLen(secrets) - 1}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// scrubString replaces secrets in a message.
func (e *Engine) scrubString(s string) string {
	if e.Vault.Empty() {
		return s
	}
	secrets, phs := e.Vault.pairs()
	return replaceAll(s, secrets, phs)
}

func replaceAll(s string, secrets, phs []string) string {
	for i, sec := range secrets {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, phs[i])
		}
	}
	return s
}

func maxLen(ss []string) int {
	n := 1
	for _, s := range ss {
		n = max(n, len(s))
	}
	return n
}

// scrubBody is a response body with the secrets replaced. It holds back
// the last keep bytes of what it read (a secret may straddle two reads)
// until more comes or the body ends.
type scrubBody struct {
	r       io.ReadCloser
	secrets []string
	phs     []string
	keep    int
	pend    []byte // read, not yet scrubbed and given
	out     []byte // scrubbed, not yet given
	eof     bool
	err     error
}

func (b *scrubBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.eof {
			return 0, b.err
		}
		var buf [32 << 10]byte
		n, err := b.r.Read(buf[:])
		b.pend = append(b.pend, buf[:n]...)
		if err != nil {
			b.eof, b.err = true, err
		}
		b.flush()
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// flush scrubs pend and moves all of it that no secret can still extend
// to out.
func (b *scrubBody) flush() {
	for i, s := range b.secrets {
		if bytes.Contains(b.pend, []byte(s)) {
			b.pend = bytes.ReplaceAll(b.pend, []byte(s), []byte(b.phs[i]))
		}
	}
	cut := len(b.pend)
	if !b.eof {
		cut = max(0, len(b.pend)-b.keep)
	}
	b.out = append(b.out[:0], b.pend[:cut]...)
	b.pend = append(b.pend[:0], b.pend[cut:]...)
}

func (b *scrubBody) Close() error { return b.r.Close() }
