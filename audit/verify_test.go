package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

var testKey = []byte("verify-test-key-0123456789")

// sampleLog returns a log of the first n events of allEvents.
func sampleLog(t testing.TB, n int, key []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	clock := newFakeClock()
	l := startMem(Options{Key: key, Now: clock.Now}, &buf)
	for _, ev := range allEvents[:n] {
		l.Log(ev)
		clock.Advance(time.Microsecond)
	}
	mustClose(t, l)
	return buf.Bytes()
}

// verifyErr runs Verify and returns its head and the failing line (0 if ok)
// and message.
func verifyErr(t *testing.T, b []byte, key []byte) (head string, line int, msg string) {
	t.Helper()
	_, head, err := Verify(bytes.NewReader(b), key)
	if err == nil {
		return head, 0, ""
	}
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("Verify error %v is not a *VerifyError", err)
	}
	return head, ve.Line, ve.Msg
}

func forKeys(t *testing.T, f func(t *testing.T, key []byte)) {
	for _, key := range [][]byte{nil, testKey} {
		t.Run(fmt.Sprintf("key=%v", key != nil), func(t *testing.T) { f(t, key) })
	}
}

func TestVerifyCatchesChangedByte(t *testing.T) {
	forKeys(t, func(t *testing.T, key []byte) {
		orig := sampleLog(t, 6, key)
		_, origHead, err := Verify(bytes.NewReader(orig), key)
		if err != nil {
			t.Fatal(err)
		}
		lines := splitLines(orig)
		start := 0 // offset of the current line in orig
		for i, line := range lines {
			lineNo := i + 1
			for j := 0; j <= len(line); j++ { // j == len(line) is the newline
				for _, flip := range []byte{0x01, 0x20, 0x80} {
					b := bytes.Clone(orig)
					b[start+j] ^= flip
					head, got, msg := verifyErr(t, b, key)
					switch {
					case key != nil && got == lineNo:
						// The mac (or the JSON around it) catches a change
						// on its own line.
					case key == nil && (got == lineNo || got == lineNo+1):
						// The line itself is broken, or the next prev.
					case key == nil && got == 0 && lineNo == len(lines) && head != origHead:
						// The last record without a key: only the head,
						// anchored elsewhere, shows the change.
					default:
						t.Fatalf("byte %d of line %d ^ %#x: Verify line %d %q head changed %v",
							j, lineNo, flip, got, msg, head != origHead)
					}
				}
			}
			start += len(line) + 1
		}
	})
}

func TestVerifyCatchesDeletedLine(t *testing.T) {
	forKeys(t, func(t *testing.T, key []byte) {
		orig := sampleLog(t, 6, key)
		lines := splitLines(orig)
		_, origHead, _ := Verify(bytes.NewReader(orig), key)
		for i := range lines {
			rest := append(append([][]byte{}, lines[:i]...), lines[i+1:]...)
			head, got, msg := verifyErr(t, joinLines(rest), key)
			if i == len(lines)-1 {
				// Dropping the last record leaves a valid shorter chain
				// whose head no longer matches the anchored one.
				if got != 0 || head == origHead {
					t.Errorf("deleted last line: Verify line %d %q, head changed %v", got, msg, head != origHead)
				}
				continue
			}
			if want := fmt.Sprintf("seq %d, want %d", i+2, i+1); got != i+1 || msg != want {
				t.Errorf("deleted line %d: Verify line %d %q, want line %d %q", i+1, got, msg, i+1, want)
			}
		}
	})
}

func TestVerifyCatchesSwappedLines(t *testing.T) {
	forKeys(t, func(t *testing.T, key []byte) {
		lines := splitLines(sampleLog(t, 6, key))
		for i := 0; i+1 < len(lines); i++ {
			sw := append([][]byte{}, lines...)
			sw[i], sw[i+1] = sw[i+1], sw[i]
			_, got, msg := verifyErr(t, joinLines(sw), key)
			if want := fmt.Sprintf("seq %d, want %d", i+2, i+1); got != i+1 || msg != want {
				t.Errorf("swapped lines %d,%d: Verify line %d %q, want line %d %q", i+1, i+2, got, msg, i+1, want)
			}
		}
	})
}

func TestVerifyCatchesReplayedLine(t *testing.T) {
	forKeys(t, func(t *testing.T, key []byte) {
		lines := splitLines(sampleLog(t, 6, key))
		for i := range lines {
			dup := append(append(append([][]byte{}, lines[:i+1]...), lines[i]), lines[i+1:]...)
			_, got, msg := verifyErr(t, joinLines(dup), key)
			if want := fmt.Sprintf("seq %d, want %d", i+1, i+2); got != i+2 || msg != want {
				t.Errorf("line %d repeated: Verify line %d %q, want line %d %q", i+1, got, msg, i+2, want)
			}
		}
	})
}

func TestVerifyCatchesTruncation(t *testing.T) {
	forKeys(t, func(t *testing.T, key []byte) {
		orig := sampleLog(t, 6, key)
		lines := splitLines(orig)
		end := 0
		for i, line := range lines {
			// Cut inside the line, and just before its newline.
			for _, cut := range []int{end + 1, end + len(line)/2, end + len(line)} {
				_, got, msg := verifyErr(t, orig[:cut], key)
				if got != i+1 || !strings.HasPrefix(msg, "torn last record") {
					t.Errorf("cut at %d (line %d): Verify line %d %q, want a torn last record at %d", cut, i+1, got, msg, i+1)
				}
			}
			end += len(line) + 1
			// Cut right after the newline: a valid, shorter log.
			n, _, err := Verify(bytes.NewReader(orig[:end]), key)
			if err != nil || n != i+1 {
				t.Errorf("log cut after line %d: Verify = %d, %v", i+1, n, err)
			}
		}
	})
}

func TestVerifyMessages(t *testing.T) {
	c := newChain(testKey, zeroHash)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l1 := string(c.record(1, at, Exit{Code: 1}))
	h1 := c.prev
	l2 := string(c.record(2, at, Exit{Code: 2}))
	// Lines built by hand, without a mac (verified with key nil).
	plain := func(seq, tm, ev, prev string) string {
		return fmt.Sprintf(`{"seq":%s,"time":%s,"event":%s,"prev":%s}`, seq, tm, ev, prev)
	}
	okTime, okEv, okPrev := `"2030-01-01T00:00:00Z"`, `"exit"`, `"`+zeroHash+`"`
	cases := []struct {
		why  string
		in   string
		key  []byte
		line int
		msg  string
	}{
		{"an empty log is valid", "", nil, 0, ""},
		{"a good keyed log", l1 + "\n" + l2 + "\n", testKey, 0, ""},
		{"a blank line is not a record", "\n", nil, 1, "empty line"},
		{"garbage", "hello\n", nil, 1, "invalid JSON"},
		{"an array is not a record", "[1]\n", nil, 1, "not a JSON object"},
		{"two objects on one line", plain("1", okTime, okEv, okPrev) + "{}\n", nil, 1, "invalid JSON: invalid character '{' after top-level value"},
		{"a record without seq", `{"time":"x"}` + "\n", nil, 1, "seq is missing"},
		{"seq as a string", plain(`"1"`, okTime, okEv, okPrev) + "\n", nil, 1, `seq "1" is not a whole number`},
		{"negative seq", plain(`-1`, okTime, okEv, okPrev) + "\n", nil, 1, `seq -1 is not a whole number`},
		{"seq must start at 1", plain("2", okTime, okEv, okPrev) + "\n", nil, 1, "seq 2, want 1"},
		{"bad time", plain("1", `"yesterday"`, okEv, okPrev) + "\n", nil, 1, `time "yesterday" is not RFC 3339`},
		{"time not a string", plain("1", `5`, okEv, okPrev) + "\n", nil, 1, `time is not a string`},
		{"empty event", plain("1", okTime, `""`, okPrev) + "\n", nil, 1, "event is empty"},
		{"missing prev", `{"seq":1,"time":"2030-01-01T00:00:00Z","event":"exit"}` + "\n", nil, 1, "prev is missing"},
		{"first prev must be zeros", plain("1", okTime, okEv, `"`+h1+`"`) + "\n", nil, 1, "prev of the first record is not 64 zeros"},
		{"duplicate member", `{"seq":1,"seq":1}` + "\n", nil, 1, `duplicate member "seq"`},
		{"second line's prev", l1 + "\n" + plain("2", okTime, okEv, okPrev) + "\n", nil, 2, "prev does not match line 1"},
		{"mac missing with a key", plain("1", okTime, okEv, okPrev) + "\n", testKey, 1, "mac is missing"},
		{"mac in upper case", macAt(l1, strings.ToUpper) + "\n", testKey, 1, "mac is not 64 lower-case hex digits"},
		{"mac not last", l1[:len(l1)-1] + `,"x":1}` + "\n", testKey, 1, "mac is not the last member"},
		{"mac changed", macAt(l1, func(m string) string { return "f" + m[1:] }) + "\n", testKey, 1, "mac mismatch"},
		{"no newline at the end", l1, testKey, 1, "torn last record (no newline)"},
		{"an over-long line", strings.Repeat("x", maxLineLen+10) + "\n", nil, 1, "line longer than"},
	}
	for _, tc := range cases {
		_, got, msg := verifyErr(t, []byte(tc.in), tc.key)
		if got != tc.line || !strings.HasPrefix(msg, tc.msg) {
			t.Errorf("%s: Verify line %d %q, want line %d %q", tc.why, got, msg, tc.line, tc.msg)
		}
	}
}

// macAt returns line with f applied to its mac's hex digits.
func macAt(line string, f func(string) string) string {
	i := strings.Index(line, `"mac":"`) + len(`"mac":"`)
	return line[:i] + f(line[i:i+64]) + line[i+64:]
}

func TestVerifyErrorText(t *testing.T) {
	e := &VerifyError{Line: 5, Msg: "seq 6, want 5"}
	if e.Error() != "line 5: seq 6, want 5" {
		t.Errorf("Error() = %q", e.Error())
	}
	e.File = "audit.jsonl"
	if e.Error() != "audit.jsonl:5: seq 6, want 5" {
		t.Errorf("Error() = %q", e.Error())
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("i/o error") }

func TestVerifyReadErrorIsNotAVerifyError(t *testing.T) {
	_, _, err := Verify(errReader{}, nil)
	var ve *VerifyError
	if err == nil || errors.As(err, &ve) {
		t.Errorf("Verify(failing reader) = %v; want a plain read error", err)
	}
	_, _, err = VerifyFile("/nonexistent/audit.jsonl", nil)
	if err == nil || errors.As(err, &ve) {
		t.Errorf("VerifyFile(missing) = %v; want a plain open error", err)
	}
}

func FuzzVerify(f *testing.F) {
	good := sampleLog(f, len(allEvents), testKey)
	f.Add(good)
	f.Add(sampleLog(f, 3, nil))
	f.Add([]byte(""))
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"seq":1,"time":"2030-01-01T00:00:00Z","event":"x","prev":"` + zeroHash + `"}` + "\n"))
	f.Add([]byte(`{"seq":1,"mac":"zz"}` + "\n"))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, key := range [][]byte{nil, testKey} {
			n, head, err := Verify(bytes.NewReader(in), key)
			var ve *VerifyError
			switch {
			case err == nil:
				if want := bytes.Count(in, []byte("\n")); n != want {
					t.Fatalf("ok with %d records for %d lines", n, want)
				}
				if n == 0 && head != zeroHash {
					t.Fatalf("empty log head %s", head)
				}
				if n > 0 {
					lines := splitLines(in)
					if head != hashHex(lines[len(lines)-1]) {
						t.Fatalf("head is not the hash of the last line")
					}
				}
			case errors.As(err, &ve):
				if ve.Line != n+1 || ve.Msg == "" {
					t.Fatalf("error at line %d after %d good records: %q", ve.Line, n, ve.Msg)
				}
			default:
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
		}
		// The same input through a one-byte reader must give the same result.
		n1, h1, e1 := Verify(bytes.NewReader(in), testKey)
		n2, h2, e2 := Verify(io.LimitReader(oneByteReader{bytes.NewReader(in)}, int64(len(in))), testKey)
		if n1 != n2 || h1 != h2 || fmt.Sprint(e1) != fmt.Sprint(e2) {
			t.Fatalf("result depends on read sizes: %d %s %v vs %d %s %v", n1, h1, e1, n2, h2, e2)
		}
	})
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// TestVerifyRefusesMembersThatReadAsOne: encoding/json matches member names
// to fields without regard to case (and folds "ſ" to "s", the Kelvin sign
// to "k"), so a line with "seq" and "Seq" verified on the first while
// `audit show` and `audit stats` read the last: a record that verified
// could show another seq, time, event, action or rule than the one
// checked. Verify refuses two members that fold to one name.
func TestVerifyRefusesMembersThatReadAsOne(t *testing.T) {
	for _, extra := range []string{
		`"Seq":99`,
		`"ſeq":99`,
		`"EVENT":"start"`,
		`"Time":"2030-01-01T00:00:00Z"`,
		`"Action":"allow"`,
	} {
		line := `{"seq":1,"time":"2026-12-01T00:00:00Z","event":"flow","action":"deny",` + extra + `,"prev":"` + zeroHash + `"}`
		if _, _, err := Verify(strings.NewReader(line+"\n"), nil); err == nil || !strings.Contains(err.Error(), "duplicate member") {
			rec, perr := ParseRecord([]byte(line))
			t.Errorf("%s: Verify error %v; want a duplicate member (audit show reads seq %d, event %q, action %q; %v)",
				extra, err, rec.Seq, rec.Name, rec.Action(), perr)
		}
	}
}

// TestVerifyMessageShowsLineInASCII: `audit verify` prints what is wrong
// with a line to the terminal; the one message that quoted the line's own
// bytes (a seq that is not a number) printed them raw: C1 controls (CSI,
// OSC as UTF-8) reached the terminal, and a 16 MB value became a 16 MB
// message.
func TestVerifyMessageShowsLineInASCII(t *testing.T) {
	for _, seq := range []string{"\"\u009b2J\u009d0;title\u009c\"", `"` + strings.Repeat("a", 1<<20) + `"`} {
		line := `{"seq":` + seq + `,"time":"2026-12-01T00:00:00Z","event":"exit","prev":"` + zeroHash + `"}` + "\n"
		_, _, err := Verify(strings.NewReader(line), nil)
		if err == nil {
			t.Fatal("a string seq verified")
		}
		msg := err.Error()
		for _, r := range msg {
			if r < ' ' || r > '~' {
				t.Errorf("message %.80q holds %U", msg, r)
				break
			}
		}
		if len(msg) > 300 {
			t.Errorf("message of %d bytes", len(msg))
		}
	}
}
