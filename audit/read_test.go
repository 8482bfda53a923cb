package audit

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestReadRecordsRoundTrip: every event the Logger writes reads back as
// the value that was logged, with the members of its line.
func TestReadRecordsRoundTrip(t *testing.T) {
	key := []byte("0123456789abcdef-key")
	path := tempLog(t)
	clock := newFakeClock()
	l := mustOpen(t, path, Options{Key: key, Now: clock.Now})
	for _, ev := range allEvents {
		l.Log(ev)
	}
	mustClose(t, l)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecordsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(allEvents) {
		t.Fatalf("read %d records, want %d", len(recs), len(allEvents))
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	prev := zeroHash
	for i, r := range recs {
		if r.Seq != uint64(i+1) || !r.Time.Equal(clock.Now()) || r.Name != allEvents[i].EventName() {
			t.Errorf("record %d: seq %d, time %v, name %q", i, r.Seq, r.Time, r.Name)
		}
		if !reflect.DeepEqual(r.Event, allEvents[i]) {
			t.Errorf("record %d: event %#v, want %#v", i, r.Event, allEvents[i])
		}
		if string(r.Raw) != lines[i] {
			t.Errorf("record %d: raw %s, want the line %s", i, r.Raw, lines[i])
		}
		if r.Prev != prev || len(r.MAC) != 64 {
			t.Errorf("record %d: prev %q (want %q), mac %q", i, r.Prev, prev, r.MAC)
		}
		prev = hashHex([]byte(lines[i]))
	}
}

// TestRecordAccessors: the members a reader of any event asks for.
func TestRecordAccessors(t *testing.T) {
	for _, tc := range []struct {
		ev      Event
		action  string
		count   uint64
		rule    string
		flowSeq uint64
		why     string
	}{
		{Flow{Action: "deny", Rule: "default", Count: 3}, "deny", 3, "default", 0, "an aggregate of denied flows"},
		{Flow{Action: "allow", Rule: "allow[0]", Count: 2, FlowSeq: 7}, "allow", 2, "allow[0]", 7, "an aggregate of allowed flows names its flow record"},
		{DNS{Action: "deny", Rule: "default"}, "deny", 0, "default", 0, "a query"},
		{FlowEnd{FlowSeq: 4, Count: 1}, "", 1, "", 4, "a flow end has no action"},
		{L7{Action: "deny", FlowSeq: 5}, "deny", 0, "", 5, "an l7 check belongs to its flow"},
		{Packet{Action: "deny"}, "deny", 0, "", 0, "packets carry no rule"},
		{Exit{Code: 1}, "", 0, "", 0, "exit has none of them"},
		{nil, "", 0, "", 0, "an event this version does not know"},
	} {
		r := Record{Event: tc.ev}
		if r.Action() != tc.action || r.Count() != tc.count || r.Rule() != tc.rule || r.FlowSeq() != tc.flowSeq {
			t.Errorf("%s: action %q count %d rule %q flow %d", tc.why, r.Action(), r.Count(), r.Rule(), r.FlowSeq())
		}
	}
}

// TestReadRecordsBadLines: a line that is not a record is an error naming
// its line, never a panic; the records before it are returned.
func TestReadRecordsBadLines(t *testing.T) {
	good := `{"seq":1,"time":"2030-01-02T03:04:05Z","event":"start","version":"t","policy_sha256":"","argv":null,"pid":1,"prev":"` + zeroHash + `"}`
	for _, tc := range []struct {
		log    string
		line   int
		before int // records read before the bad line
		want   string
		why    string
	}{
		{good + "\n" + `{"seq":2,"time":"2030-01-02T03:04:05Z","event":"fl`, 2, 1, "unexpected end", "a torn last line (a crash mid-write)"},
		{good + "\n" + "not json\n", 2, 1, "invalid character", "not JSON"},
		{good + "\n\n" + `[1,2]` + "\n", 3, 1, "cannot unmarshal", "an array; blank lines still count"},
		{`{"time":"2030-01-02T03:04:05Z","event":"exit"}`, 1, 0, "no seq", "no seq"},
		{`{"seq":1,"event":"exit"}`, 1, 0, "no time", "no time"},
		{`{"seq":1,"time":"2030-01-02T03:04:05Z"}`, 1, 0, "no event", "no event"},
		{`{"seq":"one","time":"2030-01-02T03:04:05Z","event":"exit"}`, 1, 0, "cannot unmarshal", "a seq that is not a number"},
		{`{"seq":1,"time":"yesterday","event":"exit"}`, 1, 0, "yesterday", "a time that is not RFC 3339"},
		{`{"seq":1,"time":"2030-01-02T03:04:05Z","event":"flow","count":"many"}`, 1, 0, "flow record", "a member of the wrong type in the payload"},
		{good + "\n" + strings.Repeat("x", maxRecordLine+1) + "\n", 2, 1, "longer than", "a line past the bound"},
	} {
		recs, err := ReadRecords(strings.NewReader(tc.log))
		var le *LineError
		if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a LineError on line %d saying %q", tc.why, err, tc.line, tc.want)
			continue
		}
		if len(recs) != tc.before {
			t.Errorf("%s: %d records before the error, want %d", tc.why, len(recs), tc.before)
		}
	}
}

// TestReaderGoesOnPastABadLine: Next reports a bad line and reading can
// continue, so a tool can show the rest of a damaged log.
func TestReaderGoesOnPastABadLine(t *testing.T) {
	log := `{"seq":1,"time":"2030-01-02T03:04:05Z","event":"exit","code":0}` + "\n" +
		"garbage\n" +
		`{"seq":2,"time":"2030-01-02T03:04:05Z","event":"future","what":1}` + "\n"
	rd := NewReader(strings.NewReader(log))
	r, err := rd.Next()
	if err != nil || r.Event != (Exit{}) {
		t.Fatalf("first: %+v %v", r, err)
	}
	if _, err := rd.Next(); err == nil {
		t.Fatal("garbage read as a record")
	}
	r, err = rd.Next()
	if err != nil || r.Name != "future" || r.Event != nil || r.Seq != 2 {
		t.Errorf("an unknown event: %+v %v; want it read with a nil Event", r, err)
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Errorf("after the last record: %v, want io.EOF", err)
	}
}

// FuzzReadRecords: no input makes the reader panic, and what it reads
// is each line's own copy.
func FuzzReadRecords(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":"2030-01-02T03:04:05Z","event":"flow","action":"deny","count":2}` + "\n"))
	f.Add([]byte(`{"seq":1,"time":"2030-01-02T03:04:05Z","event":"dns","qname":"a."}` + "\n{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _ := ReadRecords(bytes.NewReader(b))
		for _, r := range recs {
			if !bytes.Contains(b, r.Raw) {
				t.Fatalf("raw %q is not in the input", r.Raw)
			}
		}
	})
}
