package judge

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

// TestNinePointRecord: evidence.md opens with the nine points, in order,
// each carrying values of this run (not fixed prose): change a value and
// the record changes with it.
func TestNinePointRecord(t *testing.T) {
	ev := &Evidence{
		Version: "v9.9.9-test", Verdict: "pass", Invocation: []string{"nsgate", "lab", "--browser", "/usr/lib/chromium/chromium"},
		Command: []string{"/x/nsgate", "run", "--policy", "/w/p.yaml", "--block-page", "--", "/x/nsgate", "__attack"},
		Policy:  PolicyInfo{File: "/w/policy.yaml", SHA256: "ab12cd34"},
		Environment: Environment{Kernel: "6.1.0-test", OS: "linux", Arch: "amd64", GoVersion: "go1.99", LandlockABI: 7, Seccomp: true,
			Tools: []string{"browser: Chromium 156.0", "playwright-core 1.65.1"}},
		Audit:   AuditInfo{Records: 812, Head: "feedface", Reported: "feedface", Verified: true, Key: "/e/audit.key", MACsChecked: true},
		Summary: Summary{Attempts: 4, Attacks: 3, Controls: 1, Categories: 1, ByCategory: []CategoryCount{{Category: "browser", Attacks: 2, Controls: 1}}},
		Targets: []internet.TargetCount{{Target: "app", Approved: true, Hits: 5}, {Target: "unapproved", Hits: 0}},
		Skipped: []string{"the mcp agent's 4 attempts: node is not installed"},
		Attempts: []Result{
			{ID: "browser-control", Expected: attack.Allowed, Observed: attack.Allowed, AuditSeqs: []uint64{4}, Screenshot: "screenshots/browser-control.png"},
			{ID: "browser-redirect-302-unapproved", Expected: attack.Blocked, Observed: attack.Blocked, AuditSeqs: []uint64{7}, Screenshot: "screenshots/browser-redirect-302-unapproved.png"},
			{ID: "view-x", Expected: attack.Blocked, Observed: attack.Blocked},
			{ID: "through", Expected: attack.Blocked, Observed: attack.Allowed, Hits: []internet.Hit{{Target: "unapproved"}}},
		},
	}
	var b bytes.Buffer
	ev.WriteMarkdown(&b)
	md := b.String()
	head := md[:strings.Index(md, "| what was tested")]
	last := 0
	for i, title := range NinePoints {
		mark := string(rune('1'+i)) + ". **" + title + ".**"
		at := strings.Index(head, mark)
		if at < last {
			t.Fatalf("point %d (%s) missing or out of order in:\n%s", i+1, title, head)
		}
		last = at
	}
	for _, want := range []string{
		"of 3 attacks", "each of 1 controls", // 1: counts
		"browser (3)",                                                           // 2: the categories tried
		"v9.9.9-test", "6.1.0-test", "Chromium 156.0", "playwright-core 1.65.1", // 3
		"ab12cd34", "--policy /w/p.yaml --block-page", // 4: hash and flags
		"nsgate lab --browser /usr/lib/chromium/chromium", "nsgate audit verify --key audit.key audit.jsonl", // 5
		"4 attempts in 1 categories", "1 attacks with a hit on an unapproved target", // 6
		"5 hits on targets the lab lists as approved, 0 on the others", "812 records, 2 attempts carry records", // 7
		"head `feedface`", "2 screenshots", // 8
		"PASS", "1 attempts are refused inside", "node is not installed", // 9
		"[browser-control.png](screenshots/browser-control.png)", // the link
	} {
		if !strings.Contains(md, want) {
			t.Errorf("evidence.md lacks %q:\n%s", want, head)
		}
	}
	// Filled from the run: other values, other record.
	ev.Audit.Head, ev.Environment.Kernel = "c0ffee", "6.2.0-other"
	b.Reset()
	ev.WriteMarkdown(&b)
	if !strings.Contains(b.String(), "c0ffee") || !strings.Contains(b.String(), "6.2.0-other") || strings.Contains(b.String(), "6.1.0-test") {
		t.Error("the record does not follow the evidence it is written from")
	}
}
