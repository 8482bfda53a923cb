package judge

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nsgate/nsgate/lab/attack"
)

// shotPath is the form of a screenshot path the lab writes (a link
// target is written as it is, so nothing else is linked).
var shotPath = regexp.MustCompile(`^screenshots/[a-z0-9][a-z0-9.-]*\.png$`)

// NinePoints are the titles of the nine-point evidence record that opens
// evidence.md (docs/lab.md defines each), in order.
var NinePoints = []string{
	"Claim",
	"Scope and threat model",
	"Environment",
	"Configuration under test",
	"Method",
	"Attempts and what each should do",
	"Observations from three independent sources",
	"Artefacts and their integrity",
	"Verdict, residual risks and what was not tested",
}

// writeNinePoints writes the nine-point record: every point is filled from
// this run's evidence (counts, versions, hashes, commands, files), not
// from prose written before the run.
func (ev *Evidence) writeNinePoints(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s, e := ev.Summary, ev.Environment
	p("## The evidence record\n\n")

	p("1. **%s.** Under the policy below, the worker of `nsgate run` reaches only what the policy approves: of %d attacks, none may reach an unapproved fake target or get an answer from it, and each of %d controls must reach its approved one.\n",
		NinePoints[0], s.Attacks, s.Controls)

	var cats []string
	for _, c := range s.ByCategory {
		cats = append(cats, fmt.Sprintf("%s (%d)", mdText(c.Category), c.Attacks+c.Controls))
	}
	p("2. **%s.** The worker is untrusted: it runs the attacker, a browser or a browser agent led by pages and prompt text, and tries to reach the network, the host and the log beyond the policy. Categories tried in this run: %s. Out of scope: the kernel itself, the caller's own account outside the sandbox, and what the approved servers do with what they are sent (docs/threat-model.md).",
		NinePoints[1], strings.Join(cats, ", "))
	if ev.Break != "" {
		p(" A layer was disabled on purpose for this run: `%s`.", mdText(ev.Break))
	}
	p("\n")

	tools := "none"
	if len(e.Tools) > 0 {
		tools = mdText(strings.Join(e.Tools, "; "))
	}
	p("3. **%s.** %s (%s); kernel %s, %s/%s; caller %s; features: %s; browser stack: %s.\n",
		NinePoints[2], mdText(ev.Version), mdText(e.GoVersion), mdText(e.Kernel), mdText(e.OS), mdText(e.Arch), mdText(callerLine(e)), mdText(featuresLine(e)), tools)

	flags := "(no gateway run)"
	if len(ev.Command) > 0 {
		flags = mdCode(ev.work(strings.Join(runFlags(ev.Command), " ")))
	}
	p("4. **%s.** Policy %s, sha256 %s (text under Policy below); `nsgate run` flags %s; the other runs' command lines are in Notes.\n",
		NinePoints[3], mdText(filepath.Base(ev.Policy.File)), mdCode(ev.Policy.SHA256), flags)

	inv := "nsgate lab"
	if len(ev.Invocation) > 0 {
		inv = strings.Join(ev.Invocation, " ")
	}
	p("5. **%s.** Run %s; then check the log with %s. The lab builds its own sealed network namespace and fake internet; the gateway's command is under Command below.\n",
		NinePoints[4], mdCode(inv), mdCode(ev.verifyCommand()))

	p("6. **%s.** %d attempts in %d categories: %d attacks expected *blocked* (no hit on an unapproved target, and the deny record their row names), %d controls expected *allowed* (a hit on their approved target and an allow record). Each row of Attempts says what it tries and what it should do.\n",
		NinePoints[5], s.Attempts, s.Categories, s.Attacks, s.Controls)

	var unapproved, approved int64
	for _, t := range ev.Targets {
		if t.Approved {
			approved += t.Hits
		} else {
			unapproved += t.Hits
		}
	}
	withRecord, agentOK, attacksHit := 0, 0, 0
	approvedTarget := map[string]bool{}
	for _, t := range ev.Targets {
		approvedTarget[t.Target] = approvedTarget[t.Target] || t.Approved
	}
	for _, r := range ev.Attempts {
		for _, h := range r.Hits {
			if !r.Control && !approvedTarget[h.Target] {
				attacksHit++
				break
			}
		}
		if len(r.AuditSeqs) > 0 {
			withRecord++
		}
		if r.Observed == r.Expected {
			agentOK++
		}
	}
	p("7. **%s.** (a) The worker's own report: %d of %d attempts observed what they should. (b) The fake targets' counters: %d hits on targets the lab lists as approved, %d on the others (a control's own target, such as QUIC's, may be one of them; see Fake targets), %d attacks with a hit on an unapproved target, %d hits outside every attempt. (c) The audit log: %d records, %d attempts carry records of their own. An attempt passes only when all three agree.\n",
		NinePoints[6], agentOK, s.Attempts, approved, unapproved, attacksHit, len(ev.StrayHits), ev.Audit.Records, withRecord)

	shots := 0
	for _, r := range ev.Attempts {
		if r.Screenshot != "" {
			shots++
		}
	}
	key := "none"
	if ev.Audit.Key != "" {
		key = mdCode(filepath.Base(ev.Audit.Key))
	}
	p("8. **%s.** Log %s: %s; key %s; reported head %s; verify with %s; %d screenshots (PNG, under Screenshots below); evidence.json holds every record attributed to each attempt.\n",
		NinePoints[7], mdCode(EvidenceAudit), ev.auditLine(), key, mdCode(orDash(ev.Audit.Reported)), mdCode(ev.verifyCommand()), shots)

	p("9. **%s.** %s", NinePoints[8], strings.ToUpper(mdText(ev.Verdict)))
	if len(ev.Reasons) > 0 {
		p(" (%d reasons under Failures)", len(ev.Reasons))
	}
	noRec := 0
	for _, r := range ev.Attempts {
		if len(r.AuditSeqs) == 0 && r.Observed == attack.Blocked {
			noRec++
		}
	}
	p(". Residual risks: what an approved name's server does with what the worker sends it; %d attempts are refused inside the worker's kernel and leave no audit record by design (their evidence is the worker's error and the host checks); the rest are in docs/threat-model.md. Not tested in this run: ", noRec)
	if len(ev.Skipped) == 0 {
		p("nothing the lab knows of was skipped.\n\n")
	} else {
		var sk []string
		for _, x := range ev.Skipped {
			sk = append(sk, mdText(x))
		}
		p("%s.\n\n", strings.Join(sk, "; "))
	}
}

// verifyCommand is the command that checks the evidence's audit log.
func (ev *Evidence) verifyCommand() string {
	if ev.Audit.Key != "" {
		return "nsgate audit verify --key " + EvidenceKey + " " + EvidenceAudit
	}
	return "nsgate audit verify " + EvidenceAudit
}

// runFlags is the flags of an `nsgate run` command line: what lies
// between "run" and "--".
func runFlags(cmd []string) []string {
	for i, a := range cmd {
		if a == "run" {
			for j := i + 1; j < len(cmd); j++ {
				if cmd[j] == "--" {
					return cmd[i+1 : j]
				}
			}
			return cmd[i+1:]
		}
	}
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeScreenshots lists the browser attempts' screenshots, each linked.
func (ev *Evidence) writeScreenshots(w io.Writer) {
	var rows []Result
	for _, r := range ev.Attempts {
		if r.Screenshot != "" {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Screenshots\n\nWhat the browser agent saw at the end of each browser attempt:\n\n| attempt | observed | screenshot | the agent saw |\n|---|---|---|---|\n")
	for _, r := range rows {
		link := filepath.ToSlash(r.Screenshot)
		if !shotPath.MatchString(link) {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | [%s](%s) | %s |\n", mdCode(r.ID), mdText(string(r.Observed)), mdText(filepath.Base(link)), mdText(link), mdText(shortRunes(ev.work(r.Detail), 120)))
	}
	fmt.Fprintln(w)
}
