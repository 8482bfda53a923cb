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

// TestSuggestionShowsPathsInVisibleASCII: a program the worker tried to
// run under a name with escapes, a bidi override or an invisible rune is
// written into the suggestion and the learned file with ASCII escapes
// (YAML reads them back to the same path), so the file the operator
// reviews before applying it says exactly which file it allows.
func TestSuggestionShowsPathsInVisibleASCII(t *testing.T) {
	paths := []string{
		"/tmp/\x1b]52;c;cm0K\x07\nallow",
		"/tmp/sudo\u202e\ufe0f",
		"/tmp/\u0430pp\u3164",
	}
	c := NewCollector(Denied)
	for _, p := range paths {
		c.Observe(audit.Exec{Action: "deny", Path: p, Reason: p + audit.ExecNotListed})
	}
	res := c.Result(nil)
	sugg, err := Suggestions(res, SuggestInput{Log: "a.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	learned, err := LearnedPolicy(res, Run{Time: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"suggestion": sugg, "learned file": string(learned)} {
		for i := 0; i < len(out); i++ {
			if c := out[i]; c != '\n' && (c < 0x20 || c > 0x7e) {
				t.Errorf("the %s holds byte %#x:\n%s", name, c, out)
				break
			}
		}
	}
	p, err := policy.Parse("suggestion", []byte(sugg))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range p.ExecAllow() {
		got[e] = true
	}
	for _, want := range paths {
		if !got[want] {
			t.Errorf("the suggestion's exec.allow %q lacks %q", p.ExecAllow(), want)
		}
	}
}

// TestHostileNamesMakeNoRule: a name the worker chose that is not a plain
// host name (a wildcard, YAML syntax, a second line, a lookalike that
// with a bidi override) never becomes a rule or a name in the suggestion;
// a name with a trailing dot becomes the rule for that name only. An exec
// reason clipped by the log (audit.MaxField) is not an entry either.
func TestHostileNamesMakeNoRule(t *testing.T) {
	c := NewCollector(Denied)
	for _, h := range []string{"*.evil.test", "a:b.test", "a#b.test", "- a.test", "&x.test", "*x.test", "a\nversion: 2", "a\u202e.test"} {
		c.Observe(audit.Flow{Action: "deny", Proto: "tcp", Dst: "198.18.0.9:443", Host: h, Rule: policy.RuleDefault})
		c.Observe(audit.DNS{Action: "deny", QName: h, Rule: policy.RuleDefault})
	}
	c.Observe(audit.DNS{Action: "deny", QName: "seen.test.", Rule: policy.RuleDefault})
	c.Observe(audit.Exec{Action: "deny", Path: "/usr/x", Reason: "/usr" + audit.ExecNotListed + "…(600 more bytes)"})
	res := c.Result(nil)
	sugg, err := Suggestions(res, SuggestInput{Log: "a.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("suggestion", []byte(sugg))
	if err != nil {
		t.Fatal(err)
	}
	rules := p.AllowRules()
	if len(rules) != 1 || rules[0].Host != "seen.test" || len(p.ExecAllow()) != 0 {
		t.Errorf("suggestion:\n%s\nwant one rule, for seen.test, and no exec.allow", sugg)
	}
	for _, n := range []string{"x.evil.test", "evil.test", "other.test"} {
		if d := p.NameAllowed(n); d.Verdict == policy.Allow {
			t.Errorf("the suggestion allows %s", n)
		}
	}
}
