package judge

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nsgate/nsgate/lab/attack"
)

// Widths, in runes, of the Markdown table's free-text cells. What is cut
// here stays whole in evidence.json.
const (
	mdDescWidth     = 80 // what the attempt tries (the catalogue's description)
	mdReasonWidth   = 90 // nsgate's reason, from its audit record
	mdAttackerWidth = 32 // what the attacker saw: the end of its error text
)

// WriteMarkdown renders the evidence for people, in GitHub-flavoured
// Markdown that also reads as plain text in a terminal: a one-screen
// summary (what was tested, the verdict, counts per category, the audit
// head), the failures, one table row per attempt, the host checks, a
// legend, the fake targets, notes, the policy and the command. Long raw
// detail (every audit record, the attacker's whole error text, the
// gateway's stderr) stays in evidence.json only.
//
// Every string that is not the lab's own (the attacker's errors, reasons
// quoting names and paths the worker chose, the kernel's release) goes
// through mdText, so it cannot end a cell, start a row, or open a code
// span, link or HTML tag.
func (ev *Evidence) WriteMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s := ev.Summary
	p("# nsgate security lab: %s\n\n", strings.ToUpper(mdText(ev.Verdict)))
	p("%s\n\n", ev.verdictLine())
	if ev.Break != "" {
		p("> Run with `--break %s`: a layer was disabled on purpose, to show that the lab notices.\n\n", mdText(ev.Break))
	}
	ev.writeNinePoints(w)
	e := ev.Environment
	p("| what was tested | |\n|---|---|\n")
	p("| nsgate | %s |\n", mdText(ev.Version))
	p("| run | %s to %s (%s) |\n", ev.Started.UTC().Format(time.RFC3339), ev.Finished.UTC().Format(time.RFC3339), ev.Finished.Sub(ev.Started).Round(time.Second))
	p("| caller | %s |\n", mdText(callerLine(e)))
	p("| kernel | %s, %s/%s |\n", mdText(e.Kernel), mdText(e.OS), mdText(e.Arch))
	p("| kernel features | %s |\n", mdText(featuresLine(e)))
	p("| policy | sha256 %s (text below) |\n", mdCode(ev.Policy.SHA256))
	p("| audit log | %s |\n\n", ev.auditLine())

	p("| category | attacks | blocked | got through | attacks failed | controls | controls ok | controls failed |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range s.ByCategory {
		p("| %s | %d | %d | %d | %d | %d | %d | %d |\n", mdText(c.Category), c.Attacks, c.AttacksBlocked, c.AttacksThrough, c.AttacksFailed, c.Controls, c.ControlsOK, c.ControlsFailed)
	}
	p("| **all %d** | %d | %d | %d | %d | %d | %d | %d |\n\n", s.Attempts, s.Attacks, s.AttacksBlocked, s.AttacksThrough, s.AttacksFailed, s.Controls, s.ControlsOK, s.ControlsFailed)
	p("The columns of the attempts table, the layers and the verdict words are explained in the legend below it; evidence.json holds everything this file shortens or leaves out.\n\n")

	if len(ev.Reasons) > 0 {
		p("## Failures\n\n")
		for _, r := range ev.Reasons {
			p("- %s\n", mdText(r))
		}
		p("\n")
		for _, r := range ev.Attempts {
			if !r.Pass {
				p("- %s: the attacker saw: %s\n", mdCode(r.ID), mdText(r.Detail))
			}
		}
		p("\n")
	}

	p("## Attempts\n\n")
	p("| attempt | category | layer | what it tries | expected | observed | nsgate rule | nsgate reason | audit seqs | attacker saw | result |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range ev.Attempts {
		rule, reason := "-", noRecordReason(r)
		if d := r.Decision; d != nil {
			rule = mdCode(d.Rule)
			if d.Rule == "" {
				rule = mdText(d.Event)
			}
			reason = mdText(shortRunes(ev.work(d.Reason), mdReasonWidth))
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			mdCode(r.ID), mdText(r.Category), mdText(r.Layer), mdText(shortRunes(r.Description, mdDescWidth)),
			mdText(string(r.Expected)), mdText(string(r.Observed)), rule, reason,
			seqList(r.AuditSeqs), mdText(tailRunes(ev.work(r.Detail), mdAttackerWidth)), passWord(r.Pass))
	}
	p("\n")

	ev.writeScreenshots(w)
	ev.writeHostChecks(w)
	writeLegend(w)

	ev.writeTargets(w)
	if len(e.Notes) > 0 || len(e.Skipped) > 0 || len(ev.Unattributed) > 0 || len(ev.StrayHits) > 0 || ev.WorkDir != "" {
		p("## Notes\n\n")
		if ev.WorkDir != "" {
			p("- $WORK in this file is %s, the lab's work directory (removed after the run)\n", mdText(ev.WorkDir))
		}
		for _, n := range e.Notes {
			p("- %s\n", mdText(ev.work(n)))
		}
		for _, k := range e.Skipped {
			p("- service %s skipped: its address could not be put on lo\n", mdText(k))
		}
		if len(ev.Unattributed) > 0 {
			p("- audit records attributed to no attempt: seqs %s\n", seqList(ev.Unattributed))
		}
		for _, h := range ev.StrayHits {
			p("- unapproved target %s (%s) was hit outside every attempt at %s\n", mdText(h.Target), mdText(h.Addr), h.Time.UTC().Format(time.RFC3339Nano))
		}
		p("\n")
	}
	p("## Policy\n\n%s\n\n", mdFence("yaml", ev.Policy.Text))
	if len(ev.Command) > 0 {
		p("## Command\n\nThe gateway ran as follows and exited %d (its standard error is in evidence.json):\n\n%s\n", ev.Gateway.ExitCode, mdFence("", ev.work(strings.Join(ev.Command, " "))))
	}
}

// writeTargets lists the fake targets, one row per target with the
// hits at each of its addresses.
func (ev *Evidence) writeTargets(w io.Writer) {
	type row struct {
		approved bool
		hits     int64
		addrs    []string
	}
	var order []string
	rows := map[string]*row{}
	for _, t := range ev.Targets {
		r, ok := rows[t.Target]
		if !ok {
			r = &row{approved: t.Approved}
			rows[t.Target] = r
			order = append(order, t.Target)
		}
		r.approved = r.approved || t.Approved
		r.hits += t.Hits
		a := mdText(t.Addr)
		if t.Hits > 0 {
			a += " (" + strconv.FormatInt(t.Hits, 10) + ")"
		}
		r.addrs = append(r.addrs, a)
	}
	fmt.Fprint(w, "## Fake targets\n\nEvery server of the fake internet, whether the policy approves it, and the connections it counted (per address in brackets).\n\n| target | approved | hits | addresses |\n|---|---|--:|---|\n")
	for _, name := range order {
		r := rows[name]
		fmt.Fprintf(w, "| %s | %v | %d | %s |\n", mdText(name), r.approved, r.hits, strings.Join(r.addrs, ", "))
	}
	fmt.Fprintln(w)
}

// work shortens the lab's work directory in s to $WORK.
func (ev *Evidence) work(s string) string {
	if ev.WorkDir == "" || len(ev.WorkDir) < 2 {
		return s
	}
	return strings.ReplaceAll(s, ev.WorkDir, "$WORK")
}

// verdictLine is the verdict in one sentence.
func (ev *Evidence) verdictLine() string {
	s := ev.Summary
	if ev.Verdict == "pass" {
		return fmt.Sprintf("**PASS**: all %d attacks were blocked and all %d controls succeeded (%d attempts in %d categories); the audit log verifies.",
			s.Attacks, s.Controls, s.Attempts, s.Categories)
	}
	return fmt.Sprintf("**FAIL**: %d of %d attacks got through and %d of %d controls failed; %d of %d attempts failed in all. See Failures.",
		s.AttacksThrough, s.Attacks, s.ControlsFailed, s.Controls, s.Failed, s.Attempts)
}

// auditLine describes the audit log after the run.
func (ev *Evidence) auditLine() string {
	a := ev.Audit
	if !a.Verified {
		return fmt.Sprintf("%d records; does **not** verify: %s", a.Records, mdText(a.Error))
	}
	var how []string
	how = append(how, "hash chain")
	if a.MACsChecked {
		how = append(how, "every MAC with the key")
	} else {
		how = append(how, "MACs not checked")
	}
	if a.Anchored {
		how = append(how, "end anchored by its head file")
	} else {
		how = append(how, "not anchored by a head file")
	}
	return fmt.Sprintf("%d records, head %s, verified (%s)", a.Records, mdCode(a.Head), strings.Join(how, ", "))
}

// callerLine says who ran the lab and how.
func callerLine(e Environment) string {
	who := "uid " + strconv.Itoa(e.CallerUID)
	if e.CallerUser != "" {
		who += " (" + e.CallerUser + ")"
	}
	who += ", gid " + strconv.Itoa(e.CallerGID)
	switch {
	case e.Rootless:
		return who + ", rootless: the lab's user namespace maps this uid to uid " + strconv.Itoa(e.UID) + " inside"
	case e.CallerUID == 0:
		return who + ", as root: the lab made its network namespace without a user namespace"
	}
	return who + ", without a user namespace of the lab's own"
}

// featuresLine lists the kernel features the run relied on.
func featuresLine(e Environment) string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	landlock := "Landlock: none"
	if e.LandlockABI > 0 {
		landlock = "Landlock ABI " + strconv.Itoa(e.LandlockABI)
	}
	ia32 := e.IA32Emulation
	if ia32 == "" {
		ia32 = "not recorded"
	}
	return landlock + "; seccomp filters: " + yes(e.Seccomp) + "; seccomp user notifications: " + yes(e.SeccompNotify) +
		"; user namespaces: " + yes(e.UserNamespaces) + "; IA32 emulation: " + ia32 + "; /dev/net/tun " + e.TunMode
}

// noRecordReason is the reason cell of an attempt without a Decision.
func noRecordReason(r Result) string {
	switch {
	case r.Evidence != "" || r.HostCheck != "":
		return "no record by design; see host checks"
	case r.Control:
		return "-"
	case len(r.AuditSeqs) == 0:
		return "no record: refused inside the worker"
	}
	return "no deny record among the seqs"
}

// writeHostChecks lists what the lab checked on the host and, for
// attempts that leave no audit record by design, what stands for one.
func (ev *Evidence) writeHostChecks(w io.Writer) {
	var any bool
	for _, r := range ev.Attempts {
		if r.HostCheck != "" || r.Evidence != "" {
			any = true
			break
		}
	}
	if !any {
		return
	}
	fmt.Fprintf(w, "## Host checks\n\nWhat the lab checked on the host after the run, and what stands for an audit record where none exists by design.\n\n")
	seen := map[string]string{} // evidence text -> first attempt with it
	for _, r := range ev.Attempts {
		if r.HostCheck == "" && r.Evidence == "" {
			continue
		}
		line := "- " + mdCode(r.ID) + " (" + passWord(r.Pass) + ")"
		if r.HostCheck != "" {
			line += ": " + mdText(ev.work(r.HostCheck)) + "."
		}
		if r.Evidence != "" {
			if first, ok := seen[r.Evidence]; ok {
				line += " Evidence: as for " + mdCode(first) + "."
			} else {
				seen[r.Evidence] = r.ID
				line += " Evidence: " + mdText(r.Evidence) + "."
			}
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
}

// legendLayers explains each layer the catalogue names.
var legendLayers = []struct{ layer, what string }{
	{attack.LayerControl, "not an attack: a control that must succeed, so that a lab refusing everything cannot pass"},
	{attack.LayerMetadata, "the built-in cloud metadata set (addresses and names), refused before any allow rule"},
	{attack.LayerSpecial, "the built-in special ranges (loopback, private, link-local, the gateway's own addresses), refused unless a cidr rule allows them"},
	{attack.LayerPolicy, "the policy's allow rules; anything no rule allows is refused (rule default)"},
	{attack.LayerDNS, "the fake-IP DNS server: unapproved names get no answer, and nothing goes upstream"},
	{attack.LayerResolve, "host-side resolution: every answer is checked against the policy, only a checked address is dialled"},
	{attack.LayerL7, "the TLS SNI and HTTP Host checks on flows opened by name"},
	{attack.LayerNetns, "the worker's own network namespace (its own lo and abstract unix sockets)"},
	{attack.LayerCaps, "the worker holds no capabilities (no raw sockets, no mounts)"},
	{attack.LayerExecGuard, "the exec guard: the Landlock exec allowlist and the seccomp filter"},
	{attack.LayerView, "the worker's file system view: host read-only, private scratch and home, nsgate's files hidden, noexec, Landlock write rules"},
	{attack.LayerAudit, "the audit log fails closed: nothing new is admitted once a record cannot be written"},
	{attack.LayerCredentials, "credentials on terminated flows: the placeholder replaced by the secret only in the named header of allowed requests to the named hosts, refused anywhere else (a credential deny), the secret scrubbed from responses"},
	{attack.LayerRequests, "the request rules on terminated flows: method and normalised path; ambiguous paths and method overrides refused (403)"},
	{attack.LayerQuota, "the worker's bounded share of what the kernel counts per user (inotify instances, processes) and of memory no process is charged for (its private directories)"},
}

// writeLegend explains the table's columns, layers and verdict words.
func writeLegend(w io.Writer) {
	fmt.Fprint(w, `## Legend

Columns: **attempt** and **category** name the attempt in the catalogue; **layer** is the first layer of nsgate that must stop it; **what it tries** is the catalogue's description; **expected** and **observed** are verdict words; **nsgate rule** and **nsgate reason** come from the audit record that carries nsgate's decision (for an attack the deny record, for a control the allowed flow; the event name stands in for the rule where the record has none); **audit seqs** are the seqs of every audit record attributed to the attempt (their full text is in evidence.json); **attacker saw** is the start of the attacker's own error text (whole in evidence.json, field detail); **result** is ok or FAIL.

Verdict words: **blocked** — the attempt was refused (reset, refusal, NXDOMAIN, no answer, EPERM or EACCES, or a timeout with no byte from the target); **allowed** — data came back from the target, or the system call succeeded; **error** — the attempt could not be carried out, which never counts as blocked. An attack is **ok** when it was blocked, no unapproved fake target saw it, and the audit log (or, where no record exists by design, the host check) shows it; a control is **ok** when it got through, its target saw it and the log holds its allowed flow. The lab's verdict is **PASS** only when every attempt is ok, no unapproved target was hit outside an attempt, and the audit log verifies with the head nsgate reported.

Layers:

`)
	for _, l := range legendLayers {
		fmt.Fprintf(w, "- **%s**: %s\n", l.layer, l.what)
	}
	fmt.Fprint(w, "\nRules: `builtin:metadata` and `builtin:special-range` are the built-in sets; `allow[N]` is the policy's allow rule N (from 0); `default` means no rule allowed it; `hosts` is the policy's dns.hosts table.\n\n")
}

// mdText renders s as the text of a Markdown table cell or list item
// that cannot break out of it: control characters, line and paragraph
// separators and other runes that are not printable are shown as Go
// escapes (\n, \x1b, \u202e); invalid UTF-8 as \xNN; and every
// character that could end a cell, open a code span, HTML, a link or
// emphasis (\ | ` < * [ ] ~ &, and _ unless it stands between two letters
// or digits) is backslash-escaped.
func mdText(s string) string {
	var b strings.Builder
	prev := rune(0)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case !unicode.IsPrint(r) && r != ' ':
			q := strconv.QuoteRuneToASCII(r) // 'x' with the rune escaped
			b.WriteString(q[1 : len(q)-1])
		case strings.ContainsRune("\\|`<*[]~&", r), r == '_' && !(wordRune(prev) && wordRune(next(s[i+n:]))):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
		i += n
		prev = r
	}
	return b.String()
}

// wordRune reports whether r is a letter or digit: an underscore between
// two of them cannot start or end emphasis.
func wordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// next is the first rune of s (0 for "").
func next(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	if s == "" {
		return 0
	}
	return r
}

// mdCode renders s as a code span when it is a plain token (letters,
// digits and . : - / @ [ ] + = , only), else as mdText. "-" for "".
func mdCode(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if r > unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(".:-/@[]+=,", r)) {
			return mdText(s)
		}
	}
	return "`" + s + "`"
}

// mdFence renders text as a fenced code block, with a fence longer than
// any run of backticks in it.
func mdFence(lang, text string) string {
	run, longest := 0, 0
	for _, r := range text {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + lang + "\n" + strings.TrimRight(text, "\n") + "\n" + fence
}

// tailRunes keeps the end of s, at most n runes: an error's last parts
// ("connect: connection refused") say the most. A cut string starts with
// "…" and, where it can, after a ": ".
func tailRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	t := string(r[len(r)-n+1:])
	if i := strings.Index(t, ": "); i >= 0 && i+2 < len(t) {
		t = t[i+2:]
	}
	return "…" + t
}

// shortRunes cuts s to at most n runes, ending a cut string with "…".
func shortRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-1]), " ") + "…"
}
