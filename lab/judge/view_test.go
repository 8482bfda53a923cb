package judge

import (
	"bytes"
	"strings"
	"testing"
)

// TestTableShowsDetailsInVisibleASCII: the lab's table on the terminal
// carries the attacker's details and the host checks' findings, which
// quote what the worker chose; none may drive the terminal or print a
// line of its own (a forged "PASS").
func TestTableShowsDetailsInVisibleASCII(t *testing.T) {
	ev := &Evidence{
		Verdict:  "fail",
		Attempts: []Result{{ID: "x\x1b[1Ay", Category: "dns", Layer: "dns", Detail: "saw \x1b]52;c;cm0K\x07"}},
		Reasons:  []string{"x: the host check failed: \x1b[2K\x1b[1A\u202e\ufe0f\nPASS: every attack was blocked and every control succeeded."},
	}
	var b bytes.Buffer
	ev.WriteTable(&b)
	out := b.String()
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(l, "PASS") {
			t.Errorf("a reason forged the line %q", l)
		}
		for i := 0; i < len(l); i++ {
			if l[i] < 0x20 || l[i] > 0x7e {
				t.Errorf("the table's line %q holds byte %#x", l, l[i])
				break
			}
		}
	}
}
