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
	// Torn is set when Line is the log's last line and has no newline: a
	// write was cut short. Offset is where that line starts (the size of
	// the records before it) and Head the hash of the last of those.
	Torn   bool
	Offset int64
	Head   string
}

// Error returns "FILE:LINE: Msg", or "line LINE: Msg" without a File. For a
// torn last record it also says what happened and what to do.
func (e *VerifyError) Error() string {
	where := fmt.Sprintf("line %d", e.Line)
	if e.File != "" {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if !e.Torn {
		return where + ": " + e.Msg
	}
	file := e.File
	if file == "" {
		file = "FILE"
	}
	return fmt.Sprintf("%s: %s: the log was cut mid-write (a crash, a full disk, an older nsgate); "+
		"the %d records before it verify (head %s): to keep the log, cut the torn line off with `truncate -s %d %s`, "+
		"or move the file aside to start a new log", where, e.Msg, e.Line-1, e.Head, e.Offset, file)
}

// tornMsg is VerifyError.Msg for a last line without its newline.
const tornMsg = "torn last record (no newline)"

// Verify reads an audit log from r and checks its chain: each line is one
// JSON object whose seq is 1 on the first line and one more on each next
// one, whose time is RFC 3339, whose event is a non-empty string, whose prev
// is the hex SHA-256 of the previous line (64 zeros on the first), and, when
// key is not empty, whose mac is present, last, and the HMAC-SHA256 of the line
// without it. A line that has a mac is accepted without a key (the chain is
// still checked; Check says so). The input must end with a newline: a last
// line without one is a torn record (VerifyError.Torn).
//
// What a chain proves: without a key, any change to a record other than the
// last breaks the next record's prev (or the record itself); a change to the
// last record, or its removal, changes only the head, so it is caught by
// comparing the head with one anchored elsewhere (the head file nsgate
// writes next to the log, or the head it prints on exit; see Check). With
// a key, each record's mac covers it, so a change anywhere is caught by
// whoever holds the key; but a key does not help against removing records
// from the end: what is left is still a valid keyed log. Only the anchor
// catches that.
//
// It returns the number of records and the head (hex SHA-256 of the last
// line; 64 zeros for an empty log). At the first broken record it returns a
// *VerifyError with the records and head verified before it; a read error is
// returned wrapped, not as a *VerifyError. It reads r to the end (or to the
// first broken record) and does not retain it.
func Verify(r io.Reader, key []byte) (n int, head string, err error) {
	s, err := scan(r, key, "")
	return s.Records, s.Head, err
}

// Summary is what Check found in a log besides a valid chain: what the
// chain cannot tell, said out loud.
type Summary struct {
	Records int    // records verified
	Head    string // hash of the last of them
	// MACs counts records that carry a mac; MACsChecked says a key was
	// given, so every record's mac was checked.
	MACs        int
	MACsChecked bool
	// Runs counts start records. LastStart is the line of the last one
	// (0: none). Closed says the last record is an exit record: the run
	// ended as nsgate ends it. Unclosed lists (up to 20 of) the start
	// records that follow a record other than exit, that is runs before
	// which one was not closed; UnclosedRuns counts them all.
	Runs         int
	LastStart    int
	Closed       bool
	Unclosed     []int
	UnclosedRuns int
	// Anchor is the head Check compared the log with: --head, or the head
	// file (AnchorFile); "" for none. AnchorLine is the line whose hash it
	// is (0 when no line has it, or it is 64 zeros: the empty log).
	Anchor     string
	AnchorFile string
	AnchorLine int
	// Live says a running nsgate holds the log (it is being written).
	// Writing says its last line was incomplete when read (Live only):
	// Records stops before it.
	Live    bool
	Writing bool
}

// scan is Verify, also filling in the Summary's counts and the line of
// anchor (when not "").
func scan(r io.Reader, key []byte, anchor string) (s Summary, err error) {
	br := bufio.NewReader(r)
	v := verifier{prev: zeroHash}
	if len(key) > 0 {
		v.mac = hmac.New(sha256.New, key)
		s.MACsChecked = true
	}
	s.Anchor = anchor
	var (
		buf    []byte
		offset int64
		last   string // event of the previous record
	)
	defer func() { s.Head = v.prev }()
	for lineNo := 1; ; lineNo++ {
		var complete bool
		buf, complete, err = readLine(br, buf[:0])
		if err != nil && err != io.EOF {
			if errors.Is(err, errLineTooLong) {
				return s, &VerifyError{Line: lineNo, Msg: err.Error()}
			}
			return s, fmt.Errorf("read audit log: %w", err)
		}
		if err == io.EOF && len(buf) == 0 {
			s.Closed = s.Records > 0 && last == "exit"
			return s, nil
		}
		if !complete {
			return s, &VerifyError{Line: lineNo, Msg: tornMsg, Torn: true, Offset: offset, Head: v.prev}
		}
		if msg := v.check(buf, uint64(lineNo)); msg != "" {
			return s, &VerifyError{Line: lineNo, Msg: msg}
		}
		sum := sha256.Sum256(buf)
		v.prev = hex.EncodeToString(sum[:])
		offset += int64(len(buf)) + 1
		s.Records++
		if v.hasMac {
			s.MACs++
		}
		if v.event == "start" {
			if lineNo > 1 && last != "exit" {
				s.UnclosedRuns++
				if len(s.Unclosed) < 20 {
					s.Unclosed = append(s.Unclosed, lineNo)
				}
			}
			s.Runs++
			s.LastStart = lineNo
		}
		last = v.event
		if anchor != "" && v.prev == anchor {
			s.AnchorLine = lineNo
		}
	}
}

// VerifyFile is Verify on the file at path; a *VerifyError it returns has
// File set to path. Check does more (the head file, whether the log was
// closed, whether macs were checked); `nsgate audit verify` uses it.
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

// Check verifies the log at path as `nsgate audit verify` does:
// the chain (Verify, with key when not nil), then the end of the log
// against an anchor: head when not "" (it must be the log's head), else the
// head file next to the log (HeadFile) when there is one. It returns a
// *VerifyError (File set) for the first thing that is wrong:
//
//   - a broken record, or a torn last line (unless a running nsgate is
//     writing it: then Summary.Writing);
//   - a head that is not the anchored one: records were removed from the
//     end, or the last one changed;
//   - with a head file, an empty log (its records were removed), or
//     records after the anchored one that end with an exit record (nsgate
//     rewrites the head file when it closes the log, so something else
//     added them).
//
// Other errors (the file cannot be opened or read) are returned wrapped.
// What the chain cannot tell is in the Summary: Notes and Warnings render
// it.
func Check(path string, key []byte, head string) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	live := isLocked(f)
	anchor, anchorFile, anchorMAC := head, "", ""
	if anchor == "" {
		hf := HeadFile(path)
		a, mac, err := readHeadFileMAC(hf)
		if err != nil {
			return Summary{}, &VerifyError{File: hf, Line: 1, Msg: err.Error()}
		}
		if a != "" {
			anchor, anchorFile, anchorMAC = a, hf, mac
		}
	}
	s, err := scan(f, key, anchor)
	s.Live, s.AnchorFile = live, anchorFile
	var ve *VerifyError
	if errors.As(err, &ve) {
		ve.File = path
		if ve.Torn && live {
			s.Writing = true
			err = nil
		}
	}
	if err != nil {
		return s, err
	}
	if anchorFile != "" {
		if err := checkHeadMAC(anchorFile, anchor, anchorMAC, key); err != nil {
			return s, &VerifyError{File: anchorFile, Line: 1, Msg: err.Error()}
		}
	}
	if s.Writing {
		return s, nil
	}
	if ve := s.anchorError(); ve != nil {
		ve.File = path
		return s, ve
	}
	return s, nil
}

// anchorError says what is wrong between the log and its anchor, or nil.
func (s *Summary) anchorError() *VerifyError {
	switch {
	case s.Anchor == "" || s.Anchor == s.Head:
		return nil
	case s.AnchorFile == "":
		// --head: the head printed at exit; the log must end there.
		msg := fmt.Sprintf("head %s does not match the anchored head %s (the log was truncated or its last record changed)", s.Head, s.Anchor)
		if s.AnchorLine > 0 {
			msg = fmt.Sprintf("head %s does not match the anchored head %s, which is the head of line %d: %d records were added after it",
				s.Head, s.Anchor, s.AnchorLine, s.Records-s.AnchorLine)
		}
		return &VerifyError{Line: s.Records, Msg: msg}
	case s.Records == 0:
		return &VerifyError{Line: 1, Msg: fmt.Sprintf("the log is empty, but %s anchors head %s: its records were removed (a rotated log leaves its head file behind: move it along)",
			s.AnchorFile, s.Anchor)}
	case s.Anchor == zeroHash || s.AnchorLine > 0:
		if !s.Closed || s.Live {
			return nil // a run still open, or killed: Warnings say so
		}
		what := fmt.Sprintf("line %d", s.AnchorLine)
		if s.AnchorLine == 0 {
			what = "the empty log"
		}
		return &VerifyError{Line: s.Records, Msg: fmt.Sprintf("%s anchors %s, but %d records follow it, ending with an exit record: "+
			"nsgate rewrites the head file when it closes the log, so they were added by something else (or by an nsgate that could not write %s)",
			s.AnchorFile, what, s.Records-s.AnchorLine, s.AnchorFile)}
	}
	return &VerifyError{Line: s.Records, Msg: fmt.Sprintf("no record has the head %s anchored in %s: records were removed from the end of the log, or changed (its last record has head %s)",
		s.Anchor, s.AnchorFile, s.Head)}
}

// Notes are what Check confirmed beyond the chain, one line each, for
// stdout after the "ok" line.
func (s *Summary) Notes() []string {
	var out []string
	switch {
	case s.Anchor == "":
	case s.Anchor == s.Head && s.AnchorFile != "":
		out = append(out, fmt.Sprintf("anchored: the head matches %s (nothing was cut from the end)", s.AnchorFile))
	case s.Anchor == s.Head:
		out = append(out, "anchored: the head matches --head (nothing was cut from the end)")
	}
	if s.MACsChecked && s.Records > 0 {
		out = append(out, fmt.Sprintf("MACs checked: all %d records", s.Records))
	}
	return out
}

// Warnings are what Check could not confirm, one line each, for stderr;
// none of them makes the log broken.
func (s *Summary) Warnings(file string) []string {
	var out []string
	if s.Writing {
		out = append(out, fmt.Sprintf("warning: %s:%d: the last record is still being written by the running nsgate; only the %d before it were verified",
			file, s.Records+1, s.Records))
	}
	for _, line := range s.Unclosed {
		out = append(out, fmt.Sprintf("warning: %s:%d: the run before this start record has no exit record (nsgate was killed, or its audit log failed)", file, line))
	}
	if n := s.UnclosedRuns - len(s.Unclosed); n > 0 {
		out = append(out, fmt.Sprintf("warning: %s: %d more runs have no exit record", file, n))
	}
	if s.Records > 0 && !s.Closed {
		from := ""
		if s.LastStart > 0 {
			from = fmt.Sprintf(" (from line %d)", s.LastStart)
		}
		var end string
		switch {
		case s.Live:
			end = "a running nsgate holds the log: the run is in progress"
		case s.Anchor != "" && s.Anchor == s.Head:
			end = "nsgate was killed or its audit log failed; the anchored head is its last record, so nothing was cut from its end"
		case s.AnchorLine > 0 || s.Anchor == zeroHash:
			end = fmt.Sprintf("nsgate was killed or its audit log failed, or records were cut from its end: the anchor (%s) covers only lines up to %d", s.anchorName(), s.AnchorLine)
		default:
			end = "nsgate is still running, was killed, or its audit log failed; or the log was cut after its last record: nothing anchors its end (compare the head with the one nsgate printed at exit)"
		}
		out = append(out, fmt.Sprintf("warning: %s: not closed: the last run%s has no exit record: %s", file, from, end))
	} else if s.Records > 0 && s.Anchor == "" {
		out = append(out, fmt.Sprintf("warning: %s: nothing anchors the end of the log (no %s, no --head): whole runs cut from its end would go unseen",
			file, HeadFile(file)))
	}
	if s.MACs > 0 && !s.MACsChecked {
		out = append(out, fmt.Sprintf("warning: %s: %d of %d records carry a MAC, but no --key was given: MACs not checked (only the hash chain was)",
			file, s.MACs, s.Records))
	}
	return out
}

func (s *Summary) anchorName() string {
	if s.AnchorFile != "" {
		return s.AnchorFile
	}
	return "--head"
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

	// Of the line just checked: its event, and whether it has a mac.
	event  string
	hasMac bool

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
		return fmt.Sprintf("seq %s is not a whole number", lineText(raw))
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
	v.event = ev
	_, v.hasMac = lookup(members, "mac")
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
// in order. Duplicate member names (also two that differ only in case)
// and trailing data are errors. It
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
			// Folded: encoding/json, which `audit show` and `audit
			// stats` read records with, matches names to fields
			// without regard to case ("Seq", "ſeq" are "seq"), so two
			// such members would verify one value and show another.
			if bytes.EqualFold(m.name, name) {
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

// lineText is part of a line for a message: at most 64 bytes of it, as
// it is when that is printable ASCII, else Go-quoted in ASCII, so that no
// byte of a hostile log reaches the terminal as it is.
func lineText(b []byte) string {
	const most = 64
	more := ""
	if len(b) > most {
		b, more = b[:most], "..."
	}
	for _, c := range b {
		if c < ' ' || c > '~' {
			return strconv.QuoteToASCII(string(b)) + more
		}
	}
	return string(b) + more
}
