package learn

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/cliflag"
	"github.com/nsgate/nsgate/policy"
)

// Exit statuses of PolicyMain.
const (
	exitOK    = 0
	exitUsage = 2 // bad command line, unreadable or broken input
)

const suggestUsage = "Usage: nsgate policy suggest AUDIT.jsonl [--policy CURRENT] [--key FILE] [--head HASH] [--unverified]"

const suggestHelp = suggestUsage + `

Reads an audit log and prints the allow rules (and exec.allow entries)
that would have allowed its denials: flows and names no rule covered,
programs the exec guard refused. Without --policy the output is a policy
file of its own (it passes nsgate check); with --policy, a diff-like
listing of what CURRENT lacks. Refusals by the built-in sets (cloud
metadata, special ranges), by deny rules, and by the TLS SNI / HTTP Host
checks are not turned into rules; comment lines say why. Each denial is
decided again under the built-in sets, and one they refuse becomes no
rule but a warning naming it.

The log is first checked as nsgate audit verify checks it (--key, --head
as there); a log that does not verify is refused, unless --unverified,
which reads it anyway and says so on stderr and in the output. See
docs/policy.md, "Learning a policy".`

// PolicyMain is `nsgate policy SUBCOMMAND ...`; the one subcommand is
// suggest. It returns the exit status: 0, or 2 with one line on stderr
// for a wrong command line or input it cannot read (a broken audit log
// names its line).
func PolicyMain(args []string, stdout, stderr io.Writer) int {
	errorf := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "nsgate: policy suggest: "+format+"\n", a...)
		return exitUsage
	}
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprintln(stdout, suggestHelp)
		return exitOK
	}
	if len(args) == 0 || args[0] != "suggest" {
		fmt.Fprintln(stderr, "nsgate: policy: want a subcommand: "+strings.TrimPrefix(suggestUsage, "Usage: "))
		return exitUsage
	}
	fs := cliflag.New("nsgate policy suggest", suggestUsage, stdout, stderr)
	current := fs.String("policy", "", "the current policy `FILE`: suggest only what it lacks")
	keyFile := fs.String("key", "", "HMAC key `FILE` the log was written with (as for nsgate audit verify)")
	anchor := fs.String("head", "", "expected head `HASH` (as for nsgate audit verify)")
	unverified := fs.Bool("unverified", false, "read a log that nsgate audit verify rejects (the output says it was not verified)")
	// Flags may come before or after the log (GNU-style).
	var operands []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, cliflag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		operands = append(operands, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(operands) != 1 || operands[0] == "" {
		return errorf("want one audit log (%s)", strings.TrimPrefix(suggestUsage, "Usage: "))
	}
	var cur *policy.Policy
	if *current != "" {
		p, err := policy.Load(*current)
		if err != nil {
			return errorf("--policy: %v", err)
		}
		cur = p
	}
	var key []byte
	if *keyFile != "" {
		k, err := audit.LoadKey(*keyFile)
		if err != nil {
			return errorf("--key: %v", err)
		}
		key = k
	}
	if *anchor != "" && !audit.IsHead(*anchor) {
		return errorf("--head %q: want 64 lower-case hex digits", *anchor)
	}
	logName := operands[0]
	f, err := os.Open(logName)
	if err != nil {
		return errorf("%v", err)
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return errorf("%v", err)
	}
	if !before.Mode().IsRegular() {
		return errorf("%s is not a regular file", logName)
	}
	// The log is verified by name, then read through the descriptor opened
	// before: both must be the same file, unchanged in between.
	unverifiedWhy := ""
	if _, verr := audit.Check(logName, key, *anchor); verr != nil {
		if !*unverified {
			return errorf("%s does not verify: %v (suggest reads only what nsgate audit verify accepts; --unverified reads it anyway)", logName, oneLine(verr.Error()))
		}
		unverifiedWhy = oneLine(verr.Error())
	}
	if after, err := os.Stat(logName); err != nil || !os.SameFile(before, after) || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		return errorf("%s changed while it was verified: run again once nothing writes it", logName)
	}
	if unverifiedWhy != "" {
		fmt.Fprintf(stderr, "nsgate: policy suggest: WARNING: %s was NOT verified (%s); its records may be forged or edited, and so may every suggestion below\n", logName, unverifiedWhy)
	}
	recs, err := audit.ReadRecords(f)
	if err != nil {
		return errorf("%s: %v (not an audit log, or a broken one: nsgate audit verify says more)", logName, err)
	}
	if len(recs) == 0 {
		return errorf("%s has no audit records", logName)
	}
	c := NewCollector(Denied)
	for _, r := range recs {
		c.AddRecord(r)
	}
	res := c.Result(cur)
	out, err := Suggestions(res, SuggestInput{Log: logName, Records: len(recs), Current: cur, CurrentName: *current, Unverified: unverifiedWhy})
	if err != nil {
		return errorf("%v", err)
	}
	for _, r := range res.RedecidedSeen {
		fmt.Fprintf(stderr, "nsgate: policy suggest: WARNING: no rule proposed for %s: recorded as denied by default, but the built-in sets refuse it\n", oneLine(r))
	}
	for _, w := range res.HostsWarnings {
		fmt.Fprintf(stderr, "nsgate: policy suggest: WARNING: %s\n", oneLine(w))
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		return errorf("%v", err)
	}
	return exitOK
}

// SuggestInput names what a suggestion was made from.
type SuggestInput struct {
	Log     string // the audit log
	Records int    // records read
	// Current is the current policy (nil: none) and CurrentName its file.
	Current     *policy.Policy
	CurrentName string
	// Unverified, when not "", is why the log did not verify
	// (--unverified): the output starts with a warning saying so.
	Unverified string
}

// oneLine is s with its line breaks as spaces and its control characters
// escaped, for one line of stderr.
func oneLine(s string) string { return commentText(s) }

// Suggestions renders res, from a Collector in mode Denied: without a
// current policy, a policy file of its own (version 1, the suggested
// allow rules and exec.allow entries) that nsgate check accepts; with
// one, a unified-diff-like listing of its allow and exec.allow lists with
// the suggestions as "+" lines. Comment lines say what was read and what
// was deliberately not turned into rules.
func Suggestions(res Result, in SuggestInput) (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if in.Unverified != "" {
		w("# WARNING: UNVERIFIED INPUT: %s did not verify (%s).\n", commentText(in.Log), commentText(in.Unverified))
		w("#   Its records may be forged or edited; so may every suggestion below. Read them as such.\n")
	}
	w("# nsgate policy suggest %s", commentText(in.Log))
	if in.Current != nil {
		w(" --policy %s: what it lacks", commentText(in.CurrentName))
	}
	w("\n# read %s: %s and %s refused by default (no allow rule), %s\n",
		plural(in.Records, "record"), plural(res.Flows, "flow"), plural(len(res.NamesOnly), "name"), plural(res.ExecRefusals, "exec refusal"))
	if res.Builtin > 0 {
		w("# skipped, no rule opens them: %s by the built-in sets (cloud metadata, special ranges,\n", plural(res.Builtin, "refusal"))
		w("#   the gateway's own addresses): %s\n", commentText(listSome(res.BuiltinSeen, 5)))
		w("#   (a special range opens only to a cidr rule inside it or a dns.hosts entry: decide that yourself)\n")
	}
	if res.Redecided > 0 {
		w("# WARNING: no rule proposed for %s recorded as denied by default that the built-in sets\n", plural(res.Redecided, "denial"))
		w("#   refuse when decided again (nsgate records those as builtin:*: this log was written or\n")
		w("#   edited by something else): %s\n", commentText(listSome(res.RedecidedSeen, 10)))
	}
	for _, hw := range res.HostsWarnings {
		w("# WARNING: %s\n", commentText(hw))
	}
	if res.DenyRule > 0 {
		w("# skipped: %s by deny rules, which beat any allow rule: %s\n", plural(res.DenyRule, "refusal"), commentText(listSome(res.DenyRuleSeen, 5)))
	}
	if res.L7 > 0 {
		w("# not turned into rules: %s by the TLS SNI or HTTP Host check. The flow's name was\n", plural(res.L7, "refusal"))
		w("#   allowed; the worker then named another host in its ClientHello or Host header. That is\n")
		w("#   a mismatch (domain fronting, or a client bug), not a missing rule: an allow rule for the\n")
		w("#   other name would not let such a flow through.\n")
	}
	if res.Failed > 0 {
		w("# not turned into rules: %s the policy allowed that failed afterwards (upstream DNS,\n", plural(res.Failed, "flow"))
		w("#   dial, flow limits): %s\n", commentText(listSome(res.FailedSeen, 5)))
	}
	var allow []string
	for _, r := range res.Rules {
		line := r.Spec.YAML()
		if r.Comment != "" {
			line += "  # " + commentText(r.Comment) + " refused"
		}
		allow = append(allow, line)
	}
	for _, n := range res.NamesOnly {
		allow = append(allow, policy.RuleSpec{Host: n, Proto: "tcp"}.YAML()+"  # only its DNS query was seen (refused), so the ports are unknown: narrow them")
	}
	var execs []string
	for _, e := range res.Execs {
		execs = append(execs, yamlString(e.Path)+"  # refused "+plural(e.Count, "time"))
	}
	if len(allow)+len(execs) == 0 {
		w("# nothing to suggest: no denial here is one an allow rule would open")
		if in.Current != nil {
			w(", or the current policy allows it already")
		}
		w("\n")
		return b.String(), nil
	}
	if in.Current == nil {
		w("version: 1\n")
		if len(allow) > 0 {
			w("allow:\n")
			for _, l := range allow {
				w("  - %s\n", l)
			}
		}
		if len(execs) > 0 {
			w("exec:\n  allow:\n")
			for _, l := range execs {
				w("    - %s\n", l)
			}
		}
		if _, err := policy.Parse("suggestion", []byte(b.String())); err != nil {
			return "", fmt.Errorf("the suggestion does not parse (a bug in nsgate): %v", err)
		}
		return b.String(), nil
	}
	name := commentText(in.CurrentName)
	w("--- %s\n+++ %s with the suggested rules\n", name, name)
	w("@@ allow @@\n")
	cur := in.Current.AllowRules()
	if len(cur) == 0 {
		w("-allow: []\n+allow:\n")
	} else {
		w(" allow:\n")
		for _, r := range cur {
			w("   - %s\n", r.YAML())
		}
	}
	for _, l := range allow {
		w("+  - %s\n", l)
	}
	if len(execs) > 0 {
		w("@@ exec.allow @@\n")
		curExec := in.Current.ExecAllow()
		if len(curExec) == 0 {
			w("+exec:\n+  allow:\n")
		} else {
			w(" exec:\n   allow:\n")
			for _, e := range curExec {
				w("     - %s\n", yamlString(e))
			}
		}
		for _, l := range execs {
			w("+    - %s\n", l)
		}
	}
	return b.String(), nil
}
