package intercept

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

// scrubs reports whether responses are scrubbed: some credential, not
// switched off.
func (e *Engine) scrubs() bool { return !e.Vault.Empty() && !e.NoSubstitute && !e.NoScrub }

// errEncoded refuses a response the scrub cannot read.
var errEncoded = errors.New("the response has a Content-Encoding nsgate did not ask for: an echoed secret in it could not be scrubbed")

// scrubResponse replaces every secret in the upstream's response headers
// and body with its placeholder before the worker sees it. The body is
// rewritten as it streams, so its length may change: Content-Length goes.
// On a host a credential may go to, a body in an encoding the transport
// did not undo (the worker's Accept-Encoding is not passed on there; the
// transport asks for gzip and decompresses it) is refused: the scrub
// could not see a secret in it. The trailers and any informational
// response's headers are scrubbed by the recorder. A WebSocket switch
// (101) is checked here and its messages are read by the relay
// (websocket.go).
func (h *handler) scrubResponse(resp *http.Response) error {
	e := h.e
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if err := checkSwitch(resp); err != nil {
			return err
		}
	}
	if !e.scrubs() {
		return nil
	}
	if h.creds {
		switch enc := contentCodings(resp.Header); {
		case len(enc) == 0:
		case len(enc) == 1 && (enc[0] == "gzip" || enc[0] == "x-gzip"):
			// What nsgate asked for: inflated here, so the scrub reads
			// the echo in clear.
			resp.Header.Del("Content-Encoding")
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
			if resp.Body != nil && resp.Body != http.NoBody {
				resp.Body = &gunzipBody{r: resp.Body}
			}
		default:
			resp.Body.Close()
			return errEncoded
		}
	}
	scrubHeader(resp.Header, e.Vault)
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	v := e.Vault
	resp.Body = &scrubBody{r: resp.Body, echoes: v.echoSearches, keep: max(v.echoMax, 1) - 1}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// contentCodings returns every coding of every Content-Encoding value, in
// lower case, without "identity" and empty ones: a response whose first
// value is empty or identity may name gzip in the next.
func contentCodings(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// gunzipBody inflates a gzip body, opened at the first read (an empty body
// is an empty answer, as a HEAD's or a 204's, not an error).
type gunzipBody struct {
	r  io.ReadCloser
	zr *gzip.Reader
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	if g.zr == nil {
		zr, err := gzip.NewReader(g.r)
		if err != nil {
			if err == io.EOF {
				return 0, io.EOF
			}
			return 0, err
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

func (g *gunzipBody) Close() error { return g.r.Close() }

// scrubHeader replaces every secret in h's values with its placeholder,
// ASCII case ignored, and drops a header whose name holds one (a header
// name's case is not the upstream's to keep: Go canonicalises it).
func scrubHeader(h http.Header, v *Vault) {
	for k, vals := range h {
		if v.holdsEcho(k) {
			delete(h, k)
			continue
		}
		for i, val := range vals {
			vals[i] = v.scrub(val)
		}
	}
}

// indexFoldAny finds p in s, ASCII case ignored.
func indexFoldAny(s, p string) int {
	n := len(p)
	if n == 0 {
		return 0
	}
	// A cheap first test on the first byte (in either case) before the
	// whole comparison: every response header of a credential host goes
	// through here.
	lo, up := foldByte(p[0])
	for i := 0; i+n <= len(s); i++ {
		if c := s[i]; c != lo && c != up {
			continue
		}
		if strings.EqualFold(s[i:i+n], p) {
			return i
		}
	}
	return -1
}

// foldByte returns c in lower and upper ASCII case (c twice if no letter).
func foldByte(c byte) (lo, up byte) {
	switch {
	case 'a' <= c && c <= 'z':
		return c, c - 'a' + 'A'
	case 'A' <= c && c <= 'Z':
		return c - 'A' + 'a', c
	}
	return c, c
}

// replaceFold replaces each secret in s, ASCII case ignored, with its
// placeholder.
func replaceFold(s string, secrets, phs []string) string {
	for i, sec := range secrets {
		// Search on after each replacement: a placeholder may hold
		// the secret itself (a short secret of hex digits).
		for from := 0; ; {
			j := indexFoldAny(s[from:], sec)
			if j < 0 {
				break
			}
			j += from
			s = s[:j] + phs[i] + s[j+len(sec):]
			from = j + len(phs[i])
		}
	}
	return s
}

// scrubString replaces secrets in a message, in any ASCII case.
func (e *Engine) scrubString(s string) string {
	if e.Vault.Empty() {
		return s
	}
	return e.Vault.scrub(s)
}

// scrubBody is a response body with the secrets replaced. It holds back
// the last keep bytes of what it read (a secret may straddle two reads)
// until more comes or the body ends.
type scrubBody struct {
	r      io.ReadCloser
	echoes []*echoSearch // the secrets in every echo form, any ASCII case
	keep   int
	pend   []byte // read, not yet scrubbed and given
	out    []byte // scrubbed, not yet given (a view of outBuf)
	outBuf []byte // reused: out is empty whenever flush refills it
	eof    bool
	err    error
}

// readChunk is how much a scrub or scan reads at once. The buffers that
// receive it are kept and reused, so a long body costs no allocation per
// read (docs/performance.md, "TLS termination").
const readChunk = 32 << 10

// readMore reads up to readChunk bytes from r onto the end of buf,
// growing it only when its spare capacity is short.
func readMore(r io.Reader, buf []byte) ([]byte, error) {
	buf = slices.Grow(buf, readChunk)
	n, err := r.Read(buf[len(buf) : len(buf)+readChunk])
	return buf[:len(buf)+n], err
}

func (b *scrubBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.eof {
			return 0, b.err
		}
		var err error
		b.pend, err = readMore(b.r, b.pend)
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
	if out, found := replaceEchoes(b.pend, b.echoes); found {
		b.pend = out
	}
	cut := len(b.pend)
	if !b.eof {
		// Hold back only from where an echo cut short by the end of what
		// has come might begin: a stream of small events (server-sent
		// events from a model API) is not held an event behind.
		from := max(0, len(b.pend)-b.keep)
		for _, e := range b.echoes {
			cut = min(cut, e.holdFrom(b.pend, from))
		}
	}
	b.outBuf = append(b.outBuf[:0], b.pend[:cut]...)
	b.out = b.outBuf
	b.pend = append(b.pend[:0], b.pend[cut:]...)
}

func (b *scrubBody) Close() error { return b.r.Close() }
