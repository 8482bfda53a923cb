package learn

import (
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// TestExecSuggestionNoBroaderThanSeen: the worker chooses which paths it
// tries to execute, and so which exec refusals the log holds. A refusal
// that an exec.allow entry for the path would not merely lift for one
// file must never become one: a directory ("/", "/usr/bin/."), which
// exec.allow reads as its whole tree, or an ELF interpreter or a
// user-space loader, which the guard refuses even inside an allowed
// directory because it runs any readable program (an explicit entry is
// what lets one run). The reasons are the exec guard's.
func TestExecSuggestionNoBroaderThanSeen(t *testing.T) {
	hostile := []audit.Exec{
		{Action: "deny", Path: "/", PID: 9, Reason: "/ is not a regular file"},
		{Action: "deny", Path: "/usr/bin/.", PID: 9, Reason: "/usr/bin is not a regular file"},
		{Action: "deny", Path: "/tmp", PID: 9, Reason: "/tmp is not a regular file"},
		{Action: "deny", Path: "/lib64/ld-linux-x86-64.so.2", PID: 9, Reason: "direct invocation of the ELF interpreter /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 (it would run any readable program)"},
		{Action: "deny", Path: "/usr/bin/qemu-x86_64-static", PID: 9, Reason: "direct invocation of /usr/bin/qemu-x86_64-static, a program that loads other programs itself (it would run any readable program)"},
		{Action: "deny", Path: "/usr/bin/env", PID: 9, Reason: "#! interpreter /bin/sh of /usr/bin/env: /usr/bin/sh is not in the exec allowlist"},
	}
	for _, mode := range []Mode{Denied, Learned} {
		c := NewCollector(mode)
		for _, e := range hostile {
			c.Observe(e)
		}
		// The one refusal an entry should lift: a regular file, not
		// listed, named through a symbolic link (the entry is the file
		// the guard checked).
		c.Observe(audit.Exec{Action: "deny", Path: "/usr/bin/python3", PID: 9, Reason: "/usr/bin/python3.11 is not in the exec allowlist"})
		res := c.Result(nil)
		var got []string
		for _, e := range res.Execs {
			got = append(got, e.Path)
		}
		if len(got) != 1 || got[0] != "/usr/bin/python3.11" {
			t.Errorf("mode %d: suggested exec entries %q, want only /usr/bin/python3.11", mode, got)
		}
		sugg, err := Suggestions(res, SuggestInput{Log: "a.jsonl"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Parse("suggestion", []byte(sugg))
		if err != nil {
			t.Fatalf("suggestion does not parse: %v\n%s", err, sugg)
		}
		for _, a := range p.ExecAllow() {
			if a != "/usr/bin/python3.11" {
				t.Errorf("mode %d: the suggestion's exec.allow holds %q:\n%s", mode, a, sugg)
			}
		}
		learned, err := LearnedPolicy(res, Run{Time: time.Unix(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hostile {
			if strings.Contains(string(learned), "- "+`"`+e.Path+`"`) {
				t.Errorf("mode %d: the learned file suggests %q:\n%s", mode, e.Path, learned)
			}
		}
	}
}
