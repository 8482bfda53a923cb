//go:build linux

package audit

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// writeRun appends one run (start, a record, exit unless open) to the log
// at path through a Logger, and returns the head Close gave.
func writeRun(t *testing.T, path string, key []byte, closed bool) string {
	t.Helper()
	l := mustOpen(t, path, Options{Key: key})
	l.Log(Start{Version: "t"})
	l.Log(allEvents[2])
	if closed {
		l.Log(Exit{Code: 0})
	}
	return mustClose(t, l)
}

func TestHeadFileIsWrittenAtOpenAndClose(t *testing.T) {
	path := tempLog(t)
	l := mustOpen(t, path, Options{})
	if got, err := readHeadFile(HeadFile(path)); err != nil || got != zeroHash {
		t.Errorf("after Open of a new log the head file holds %q, %v; want the empty log's head", got, err)
	}
	l.Log(Exit{})
	head := mustClose(t, l)
	b, err := os.ReadFile(HeadFile(path))
	if err != nil || string(b) != head+"\n" {
		t.Errorf("head file %q, %v; want %q", b, err, head+"\n")
	}
	fi, _ := os.Stat(HeadFile(path))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("head file mode %v, want 0600", fi.Mode().Perm())
	}
	if l.HeadFileErr() != nil {
		t.Errorf("HeadFileErr %v", l.HeadFileErr())
	}
	// A log on stderr or a pipe has none.
	l = mustOpen(t, os.DevNull, Options{})
	mustClose(t, l)
	if _, err := os.Stat(HeadFile(os.DevNull)); err == nil {
		t.Errorf("a head file was written for %s", os.DevNull)
	}
}

// TestCheck covers what `nsgate audit verify` reports beyond the chain.
func TestCheck(t *testing.T) {
	type want struct {
		line     int    // VerifyError line; 0: ok
		msg      string // in the error, or in one of the warnings when ok
		note     string // in one of the notes (ok only)
		noWarn   bool   // no warning at all
		live     bool
		anchored bool
	}
	cases := []struct {
		name  string
		why   string
		setup func(t *testing.T, path string) (key []byte, head string)
		want  want
	}{
		{"closed and anchored", "a run that ended, with its head file: nothing to say but ok",
			func(t *testing.T, path string) ([]byte, string) { writeRun(t, path, nil, true); return nil, "" },
			want{note: "anchored: the head matches " + HeadFile("") + "", noWarn: true, anchored: true}},
		{"not closed", "a run without exit record (killed, or its log failed) is reported not closed",
			func(t *testing.T, path string) ([]byte, string) { writeRun(t, path, nil, false); return nil, "" },
			want{msg: "not closed: the last run (from line 1) has no exit record", anchored: true}},
		{"macs not checked", "a keyed log verified without --key says the macs were not checked",
			func(t *testing.T, path string) ([]byte, string) { writeRun(t, path, testKey, true); return nil, "" },
			want{msg: "3 of 3 records carry a MAC, but no --key was given: MACs not checked", anchored: true}},
		{"macs checked", "with the key, it says they were",
			func(t *testing.T, path string) ([]byte, string) { writeRun(t, path, testKey, true); return testKey, "" },
			want{note: "MACs checked: all 3 records", noWarn: true, anchored: true}},
		{"earlier run not closed", "a run that did not end, followed by another, is named by its successor's line",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, false)
				writeRun(t, path, nil, true)
				return nil, ""
			},
			want{msg: ":3: the run before this start record has no exit record", anchored: true}},
		{"last record cut", "records removed from the end: the head file's record is gone",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				cutLines(t, path, 1)
				return nil, ""
			},
			want{line: 2, msg: "no record has the head"}},
		{"whole run cut", "a whole closed run removed: the chain alone cannot tell, the head file can",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				writeRun(t, path, nil, true)
				cutLines(t, path, 3)
				return nil, ""
			},
			want{line: 3, msg: "records were removed from the end"}},
		{"records added", "records appended after nsgate closed the log, ending with an exit, are not nsgate's",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				hf, _ := os.ReadFile(HeadFile(path))
				writeRun(t, path, nil, true)
				os.WriteFile(HeadFile(path), hf, 0o600)
				return nil, ""
			},
			want{line: 6, msg: "anchors line 3, but 3 records follow it, ending with an exit record"}},
		{"killed after open", "a run killed after Open wrote the head file: records past it, not closed: a warning",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				hf, _ := os.ReadFile(HeadFile(path))
				writeRun(t, path, nil, false)
				os.WriteFile(HeadFile(path), hf, 0o600)
				return nil, ""
			},
			want{msg: "or records were cut from its end: the anchor (" + HeadFile("") + ") covers only lines up to 3"}},
		{"emptied", "an emptied log with its head file left: its records were removed",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				os.WriteFile(path, nil, 0o600)
				return nil, ""
			},
			want{line: 1, msg: "the log is empty, but"}},
		{"no anchor", "without head file or --head, the end of the log is not anchored, and verify says so",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				os.Remove(HeadFile(path))
				return nil, ""
			},
			want{msg: "nothing anchors the end of the log"}},
		{"--head", "--head must be the log's head",
			func(t *testing.T, path string) ([]byte, string) {
				first := writeRun(t, path, nil, true)
				writeRun(t, path, nil, true)
				return nil, first
			},
			want{line: 6, msg: "which is the head of line 3: 3 records were added after it"}},
		{"--head matches", "--head wins over the head file",
			func(t *testing.T, path string) ([]byte, string) {
				head := writeRun(t, path, nil, true)
				os.WriteFile(HeadFile(path), []byte(zeroHash+"\n"), 0o600)
				return nil, head
			},
			want{note: "anchored: the head matches --head", noWarn: true, anchored: true}},
		{"bad head file", "a head file that holds no head is reported, not ignored",
			func(t *testing.T, path string) ([]byte, string) {
				writeRun(t, path, nil, true)
				os.WriteFile(HeadFile(path), []byte("nonsense\n"), 0o600)
				return nil, ""
			},
			want{line: 1, msg: "does not hold a head"}},
		{"live", "a log a running nsgate holds is in progress, not broken",
			func(t *testing.T, path string) ([]byte, string) {
				l := mustOpen(t, path, Options{Delay: -1})
				l.Log(Start{})
				t.Cleanup(func() { l.Close() })
				waitLines(t, path, 1)
				return nil, ""
			},
			want{msg: "a running nsgate holds the log: the run is in progress", live: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tempLog(t)
			key, head := tc.setup(t, path)
			s, err := Check(path, key, head)
			w := tc.want
			w.msg = strings.ReplaceAll(w.msg, HeadFile(""), HeadFile(path))
			w.note = strings.ReplaceAll(w.note, HeadFile(""), HeadFile(path))
			if w.line != 0 {
				var ve *VerifyError
				if !errors.As(err, &ve) || ve.Line != w.line || !strings.Contains(ve.Error(), w.msg) {
					t.Fatalf("%s: Check = %v; want line %d with %q", tc.why, err, w.line, w.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: Check = %v", tc.why, err)
			}
			warns := strings.Join(s.Warnings(path), "\n")
			notes := strings.Join(s.Notes(), "\n")
			if w.msg != "" && !strings.Contains(warns, w.msg) {
				t.Errorf("%s: warnings\n%s\nlack %q", tc.why, warns, w.msg)
			}
			if w.note != "" && !strings.Contains(notes, w.note) {
				t.Errorf("%s: notes\n%s\nlack %q", tc.why, notes, w.note)
			}
			if w.noWarn && warns != "" {
				t.Errorf("%s: unexpected warnings\n%s", tc.why, warns)
			}
			if s.Live != w.live || (s.Anchor != "" && s.Anchor == s.Head) != w.anchored {
				t.Errorf("%s: summary %+v", tc.why, s)
			}
		})
	}
}

// cutLines removes the last n lines of the file at path.
func cutLines(t *testing.T, path string, n int) {
	t.Helper()
	lines := readLines(t, path)
	if err := os.WriteFile(path, joinLines(lines[:len(lines)-n]), 0o600); err != nil {
		t.Fatal(err)
	}
}

func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if len(readLines(t, path)) >= n {
			return
		}
		sleepMS(2)
	}
	t.Fatalf("%s never had %d lines", path, n)
}

// TestOpenChecksTheHeadFile: nsgate appends only to a log that `audit
// verify` accepts, so appending never hides a cut end; a log that was
// emptied or moved away starts afresh (rotation).
func TestOpenChecksTheHeadFile(t *testing.T) {
	path := tempLog(t)
	writeRun(t, path, nil, true)
	writeRun(t, path, nil, true)
	cutLines(t, path, 3)
	before, _ := os.ReadFile(HeadFile(path))
	l, err := Open(path, Options{})
	if err == nil {
		l.Close()
		t.Fatal("Open appended to a log whose end was cut")
	}
	if !strings.Contains(err.Error(), "refusing to append to "+path) || !strings.Contains(err.Error(), "records were removed from the end") {
		t.Errorf("Open error %q", err)
	}
	if after, _ := os.ReadFile(HeadFile(path)); string(after) != string(before) {
		t.Errorf("a refused Open rewrote the head file")
	}
	// Rotation: the log moved away, its head file left behind.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, path, Options{})
	if s := l.Log(Start{}); s != 1 {
		t.Errorf("a new log starts at seq %d", s)
	}
	mustClose(t, l)
	if _, err := Check(path, nil, ""); err != nil {
		t.Errorf("Check of the new log: %v", err)
	}
}

// TestHeadFileFollowsTheDirectory: the head file is written next to the log
// even when its path no longer leads there, as after the Podman helper has
// confined itself in a new root (here: the directory is renamed).
func TestHeadFileFollowsTheDirectory(t *testing.T) {
	base := t.TempDir()
	dir := base + "/logs"
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir+"/audit.jsonl", Options{})
	l.Log(Start{})
	moved := base + "/moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	l.Log(Exit{})
	head := mustClose(t, l)
	if err := l.HeadFileErr(); err != nil {
		t.Errorf("HeadFileErr: %v", err)
	}
	s, err := Check(moved+"/audit.jsonl", nil, "")
	if err != nil || s.Anchor != head || s.Head != head {
		t.Errorf("Check after the move = %+v, %v; want the head file to anchor %s", s, err, head)
	}
	if ents, _ := os.ReadDir(moved); len(ents) != 2 {
		t.Errorf("files left in the log's directory: %v", ents)
	}
}
