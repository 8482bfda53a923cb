package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strconv"
	"time"
)

// zeroHash is the prev of the first record of a file: 64 hex zeros.
const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// chain turns events into chained record lines. It is owned by one goroutine
// (the Logger's writer) and is not safe for concurrent use.
type chain struct {
	prev string    // hex SHA-256 of the last line written, or zeroHash
	mac  hash.Hash // HMAC-SHA256 keyed with Options.Key; nil = no mac
	body bytes.Buffer
	enc  *json.Encoder
	line []byte // the line being built; reused
}

func newChain(key []byte, prev string) *chain {
	c := &chain{prev: prev}
	if len(key) > 0 {
		c.mac = hmac.New(sha256.New, key)
	}
	c.enc = json.NewEncoder(&c.body)
	c.enc.SetEscapeHTML(false)
	return c
}

// record builds the line for one record (without its newline), advances the
// chain, and returns the line. The slice is valid until the next call.
//
// Layout: {"seq":N,"time":"...","event":"...",<event fields>,"prev":"..."}
// and, with a key, the mac member spliced in before the closing brace. The
// mac covers the line exactly as it is without `,"mac":"…"`.
func (c *chain) record(seq uint64, t time.Time, ev Event) []byte {
	b := c.line[:0]
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"time":"`...)
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","event":`...)
	b = c.appendJSON(b, ev.EventName())
	b = c.appendFields(b, ev)
	b = append(b, `,"prev":"`...)
	b = append(b, c.prev...)
	b = append(b, `"}`...)
	if c.mac != nil {
		c.mac.Reset()
		c.mac.Write(b)
		var sum [sha256.Size]byte
		m := c.mac.Sum(sum[:0])
		b = b[:len(b)-1]
		b = append(b, `,"mac":"`...)
		b = hex.AppendEncode(b, m)
		b = append(b, `"}`...)
	}
	sum := sha256.Sum256(b)
	c.prev = hex.EncodeToString(sum[:])
	c.line = b
	return b
}

// appendJSON appends v encoded as JSON (no trailing newline).
func (c *chain) appendJSON(b []byte, v any) []byte {
	c.body.Reset()
	if err := c.enc.Encode(v); err != nil {
		return append(b, `null`...)
	}
	return append(b, bytes.TrimSuffix(c.body.Bytes(), []byte("\n"))...)
}

// appendFields appends ev's own members, each preceded by a comma. An event
// that does not marshal to a JSON object is recorded as an "error" member so
// that its seq still gets a record (the log never has gaps).
func (c *chain) appendFields(b []byte, ev Event) []byte {
	c.body.Reset()
	err := c.enc.Encode(ev)
	obj := bytes.TrimSpace(c.body.Bytes())
	if err != nil || len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		msg := "event does not marshal to a JSON object"
		if err != nil {
			msg = "marshal event: " + err.Error()
		}
		b = append(b, `,"error":`...)
		return c.appendJSON(b, msg)
	}
	inner := bytes.TrimSpace(obj[1 : len(obj)-1])
	if len(inner) == 0 {
		return b
	}
	b = append(b, ',')
	return append(b, inner...)
}
