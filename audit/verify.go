package audit

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"time"
)

// maxLineLen bounds one record line while verifying; a longer line is
// reported as broken instead of being buffered.
const maxLineLen = 16 << 20

// VerifyError reports the first broken record of an audit log.
type VerifyError struct {
	File string // the log's path when known (VerifyFile, Open); else ""
	Line int    // 1-based line number of the first broken record
	Msg  string // what is wrong, e.g. "seq 5, want 4", "mac mismatch"
}

// Error returns "FILE:LINE: Msg", or "line LINE: Msg" without a File.
func (e *VerifyError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// Verify reads an audit log from r and checks its chain: each line is one
// JSON object whose seq is 1 on the first line and one more on each next
// one, whose time is RFC 3339, whose event is a non-empty string, whose prev
// is the hex SHA-256 of the previous line (64 zeros on the first), and, when
// key is not empty, whose mac is present, last, and the HMAC-SHA256 of the line
// without it. A line that has a mac is accepted without a key (the chain is
// still checked). The input must end with a newline.
//
// What a chain proves: without a key, any change to a record other than the
// last breaks the next record's prev (or the record itself); a change to the
// last record, or its removal, changes only the head, so it is caught by
// comparing the head with one anchored elsewhere (nsgate prints it on exit).
// With a key, each record's mac covers it, so a change anywhere is caught by
// whoever holds the key; removing trailing records still needs the anchor.
//
// It returns the number of records and the head (hex SHA-256 of the last
// line; 64 zeros for an empty log). At the first broken record it returns a
// *VerifyError with the records and head verified before it; a read error is
// returned wrapped, not as a *VerifyError. It reads r to the end (or to the
// first broken record) and does not retain it.
func Verify(r io.Reader, key []byte) (n int, head string, err error) {
	br := bufio.NewReader(r)
	v := verifier{prev: zeroHash}
	if len(key) > 0 {
		v.mac = hmac.New(sha256.New, key)
	}
	var buf []byte
	for lineNo := 1; ; lineNo++ {
		var complete bool
		buf, complete, err = readLine(br, buf[:0])
		if err != nil && err != io.EOF {
			if errors.Is(err, errLineTooLong) {
				return n, v.prev, &VerifyError{Line: lineNo, Msg: err.Error()}
			}
			return n, v.prev, fmt.Errorf("read audit log: %w", err)
		}
		if err == io.EOF && len(buf) == 0 {
			return n, v.prev, nil
		}
		if !complete {
			return n, v.prev, &VerifyError{Line: lineNo, Msg: "truncated line (no newline at the end of the log)"}
		}
		if msg := v.check(buf, uint64(lineNo)); msg != "" {
			return n, v.prev, &VerifyError{Line: lineNo, Msg: msg}
		}
		sum := sha256.Sum256(buf)
		v.prev = hex.EncodeToString(sum[:])
		n++
	}
}

// VerifyFile is Verify on the file at path; a *VerifyError it returns has
// File set to path. `nsgate audit verify [--key FILE] FILE` (SPEC §2) prints
// from its results:
//
//	n, head, err := audit.VerifyFile(file, key)
//	var ve *audit.VerifyError
//	switch {
//	case errors.As(err, &ve): // the chain is broken
//		fmt.Fprintln(stderr, ve) // "FILE:LINE: what is wrong"; exit 1
//	case err != nil: // the file could not be opened or read
//		fmt.Fprintln(stderr, "nsgate:", err) // exit 2
//	default:
//		fmt.Fprintf(stdout, "ok: %d records, head %s\n", n, head) // exit 0
//	}
func VerifyFile(path string, key []byte) (n int, head string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	n, head, err = Verify(f, key)
	var ve *VerifyError
	if errors.As(err, &ve) {
		ve.File = path
	}
	return n, head, err
}

var errLineTooLong = fmt.Errorf("line longer than %d bytes", maxLineLen)

// readLine appends the next line of br to buf, without its newline.
// complete reports whether the newline was there. At the end of the input
// err is io.EOF.
func readLine(br *bufio.Reader, buf []byte) (line []byte, complete bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > maxLineLen+1 {
			return buf, false, errLineTooLong
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, false, err
		}
	}
}

// verifier holds the chain state while verifying.
type verifier struct {
	prev string    // hash of the previous line
	mac  hash.Hash // nil: macs are not checked

	members []member // scratch, reused across lines
}

// check returns what is wrong with line as record number want, or "".
func (v *verifier) check(line []byte, want uint64) string {
	if len(line) == 0 {
		return "empty line"
	}
	members, msg := topMembers(line, v.members)
	if msg != "" {
		return msg
	}
	v.members = members
	raw, ok := lookup(members, "seq")
	if !ok {
		return "seq is missing"
	}
	seq, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return fmt.Sprintf("seq %s is not a whole number", raw)
	}
	if seq != want {
		return fmt.Sprintf("seq %d, want %d", seq, want)
	}
	ts, msg := stringMember(members, "time")
	if msg != "" {
		return msg
	}
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		return fmt.Sprintf("time %q is not RFC 3339", ts)
	}
	ev, msg := stringMember(members, "event")
	if msg != "" {
		return msg
	}
	if ev == "" {
		return "event is empty"
	}
	prev, msg := stringMember(members, "prev")
	if msg != "" {
		return msg
	}
	if prev != v.prev {
		if want == 1 {
			return "prev of the first record is not 64 zeros"
		}
		return fmt.Sprintf("prev does not match line %d", want-1)
	}
	if v.mac == nil {
		return ""
	}
	mac, msg := stringMember(members, "mac")
	if msg != "" {
		return msg
	}
	if !isLowerHex(mac, 2*sha256.Size) {
		// Lower case only: "A" and "a" decode alike, and a mac must have
		// one spelling or a change to it would go unseen.
		return "mac is not 64 lower-case hex digits"
	}
	got, _ := hex.DecodeString(mac)
	suffix := `,"mac":"` + mac + `"}`
	if !bytes.HasSuffix(line, []byte(suffix)) {
		return "mac is not the last member"
	}
	v.mac.Reset()
	v.mac.Write(line[:len(line)-len(suffix)])
	v.mac.Write([]byte("}"))
	var sum [sha256.Size]byte
	if !hmac.Equal(v.mac.Sum(sum[:0]), got) {
		return "mac mismatch"
	}
	return ""
}

// member is one top-level member of a record, raw.
type member struct {
	name []byte // unescaped
	raw  []byte
}

// topMembers parses line as one JSON object and returns its members, raw,
// in order. Duplicate member names and trailing data are errors. It
// validates with json.Valid, then walks the top level by hand (much faster
// than a token decoder; verifying is linear in the log's size).
func topMembers(line []byte, dst []member) ([]member, string) {
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		if err == nil {
			err = errors.New("not valid")
		}
		return nil, "invalid JSON: " + err.Error()
	}
	i := skipSpace(line, 0)
	if line[i] != '{' {
		return nil, "not a JSON object"
	}
	i = skipSpace(line, i+1)
	members := dst[:0]
	for line[i] != '}' {
		j := skipString(line, i)
		name := line[i+1 : j-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			json.Unmarshal(line[i:j], &s)
			name = []byte(s)
		}
		i = skipSpace(line, j)
		i = skipSpace(line, i+1) // the colon
		j = skipValue(line, i)
		for _, m := range members {
			if bytes.Equal(m.name, name) {
				return nil, fmt.Sprintf("duplicate member %q", name)
			}
		}
		members = append(members, member{name, line[i:j]})
		i = skipSpace(line, j)
		if line[i] == ',' {
			i = skipSpace(line, i+1)
		}
	}
	return members, ""
}

// The skip functions walk JSON that json.Valid accepted; they return the
// index just past what they skip.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	// A number, true, false or null: up to the next delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// lookup returns the raw value of member name.
func lookup(members []member, name string) ([]byte, bool) {
	for _, m := range members {
		if string(m.name) == name {
			return m.raw, true
		}
	}
	return nil, false
}

// stringMember returns the string value of member name.
func stringMember(members []member, name string) (string, string) {
	raw, ok := lookup(members, name)
	if !ok {
		return "", name + " is missing"
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", name + " is not a string"
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", name + " is not a string"
	}
	return s, ""
}

// isLowerHex reports whether s is exactly n lower-case hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
