package audit

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// hostileStrings are what a worker can put in the strings the records
// carry (names it asks for, SNI, Host headers, paths it tries to run):
// terminal escapes (CSI, OSC 52 clipboard write, title, a C1 CSI), line
// and carriage-return forgeries of a second record, bidi overrides and
// zero-width characters that make one name look like another, invisible
// printable runes (variation selector, Hangul fillers, Braille blank) and
// a Cyrillic lookalike.
var hostileStrings = []string{
	"\x1b[2K\x1b[1Aapp.test",
	"x\x1b]52;c;cm0gLXJmIH4K\x07",
	"x\x1b]0;title\x1b\\",
	"x\u009b2J",
	"evil.test\n2026-12-01 10:00:00.000  #9  allow tcp 10.0.2.100:1 -> 203.0.113.9:443 rule=allow[0]",
	"evil.test\rnsgate: ok: 3 records, head 00",
	"app.test\u202e\u2066tset.live",
	"ap\u200bp.test",
	"app.test\ufe0f",
	"app\u3164.test",
	"app\u115f.test",
	"app\u2800.test",
	"\u0430pp.test",
	"/usr/bin/sudo\u0336",
	"\xff\xfe",
}

// visibleASCII reports whether s is one line of printable ASCII: what a
// terminal shows as it is, with nothing that looks like something else.
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// fillStrings sets every string and []string field of the struct v
// points to to s.
func fillStrings(v reflect.Value, s string) {
	v = v.Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.String:
			f.SetString(s)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			f.Set(reflect.ValueOf([]string{s, s}))
		}
	}
}

// TestOperatorViewShowsWorkerStringsInVisibleASCII: whatever string the
// worker puts in any field of any event, the human denial line, `audit
// show`'s line and `audit stats` print it as visible ASCII (quoted with
// escapes), so it can neither drive the terminal, start a second line,
// nor pass for another name; the JSON keeps it exactly.
func TestOperatorViewShowsWorkerStringsInVisibleASCII(t *testing.T) {
	events := []Event{Start{}, DNS{}, Flow{}, FlowEnd{}, L7{}, Packet{}, Exec{}, Inbound{}, InboundEnd{}, Forward{}, Policy{}, Exit{}}
	for _, proto := range events {
		for _, s := range hostileStrings {
			p := reflect.New(reflect.TypeOf(proto))
			fillStrings(p, s)
			ev := p.Elem().Interface().(Event)
			if line := FormatHuman(ev); !visibleASCII(line) {
				t.Errorf("FormatHuman(%s with %q) = %q", ev.EventName(), s, line)
			}
			rec := Record{Seq: 3, Time: time.Unix(0, 0), Name: ev.EventName(), Event: ev}
			if line := ShowLine(rec); !visibleASCII(line) {
				t.Errorf("ShowLine(%s with %q) = %q", ev.EventName(), s, line)
			}
			st, _ := ReadStats(strings.NewReader(""))
			st.add(rec)
			var b bytes.Buffer
			if err := st.Write(&b); err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
				if !visibleASCII(strings.ReplaceAll(l, "\t", " ")) {
					t.Errorf("stats of %s with %q: line %q", ev.EventName(), s, l)
				}
			}
		}
	}
	// The record itself keeps the exact string.
	for _, s := range hostileStrings {
		if !utf8.ValidString(s) {
			continue
		}
		line := newChain(nil, "").record(1, time.Unix(0, 0), Exec{Action: "deny", Path: s})
		rec, err := ParseRecord(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Event.(Exec).Path; got != s {
			t.Errorf("the record's path is %q, want %q", got, s)
		}
	}
}
