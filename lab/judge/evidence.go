package judge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

// Evidence file names inside the evidence directory.
const (
	EvidenceJSON     = "evidence.json"
	EvidenceMarkdown = "evidence.md"
	EvidenceAudit    = "audit.jsonl"
	// EvidenceKey is the audit log's HMAC key, copied from the lab's work
	// directory (where the worker could not read it) after the run, so
	// that `nsgate audit verify --key` can check the MACs later.
	EvidenceKey = "audit.key"
	// EvidenceAuditFill is the log of the run that filled its audit
	// volume (audit-fill-volume), copied off the volume, with its head
	// file next to it.
	EvidenceAuditFill = "audit-fill.jsonl"
)

// Evidence is the record of one lab run: what was tested, when, with
// which nsgate and policy, in which environment, each attempt with its
// audit records, the audit head and the verdict. It is written as
// evidence.json and rendered as evidence.md.
type Evidence struct {
	Tool     string    `json:"tool"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Verdict is "pass" or "fail".
	Verdict string   `json:"verdict"`
	Reasons []string `json:"reasons,omitempty"`
	// Break names the layer disabled with --break ("" normally).
	Break string `json:"break,omitempty"`
	// Command is the `nsgate run` command line the lab ran.
	Command     []string               `json:"command"`
	Policy      PolicyInfo             `json:"policy"`
	Environment Environment            `json:"environment"`
	Gateway     GatewayInfo            `json:"gateway"`
	Audit       AuditInfo              `json:"audit"`
	Summary     Summary                `json:"summary"`
	Targets     []internet.TargetCount `json:"targets"`
	Attempts    []Result               `json:"attempts"`
	StrayHits   []internet.Hit         `json:"stray_hits,omitempty"`
	// Unattributed are audit seqs no attempt claimed.
	Unattributed []uint64 `json:"unattributed_audit_seqs,omitempty"`
}

// PolicyInfo is the policy the gateway ran with.
type PolicyInfo struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Text   string `json:"text"`
}

// Environment is where the lab ran.
type Environment struct {
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// Rootless is true when the lab sealed itself with a user namespace
	// (it was started without root).
	Rootless bool `json:"rootless"`
	// UID is the lab's uid inside its sealed namespace.
	UID int `json:"uid"`
	// TunMode is the permission of /dev/net/tun.
	TunMode     string `json:"tun_mode"`
	LandlockABI int    `json:"landlock_abi"`
	Seccomp     bool   `json:"seccomp"`
	// Skipped lists fake services left out (their address could not be
	// put on lo).
	Skipped []string `json:"skipped_services,omitempty"`
	// Notes hold anything else worth knowing about the run.
	Notes []string `json:"notes,omitempty"`
}

// GatewayInfo is how `nsgate run` ended.
type GatewayInfo struct {
	ExitCode int `json:"exit_code"`
	// Stderr is the tail of its standard error (its own lines and the
	// worker's).
	Stderr string `json:"stderr"`
}

// AuditInfo is the state of the audit log after the run.
type AuditInfo struct {
	File    string `json:"file"`
	Records int    `json:"records"`
	// Head is the hash of the last record, as the verifier computes it.
	Head string `json:"head"`
	// Reported is the head nsgate printed at exit ("nsgate: audit head").
	Reported string `json:"reported_head,omitempty"`
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`
	// Key is the HMAC key the log was written with (a copy in the
	// evidence folder); MACsChecked says every record's MAC was checked
	// with it, Anchored that the log's end matched its head file.
	Key         string `json:"key_file,omitempty"`
	MACsChecked bool   `json:"macs_checked"`
	Anchored    bool   `json:"anchored"`
}

// Summary counts the results.
type Summary struct {
	Attempts       int `json:"attempts"`
	Attacks        int `json:"attacks"`
	Controls       int `json:"controls"`
	Passed         int `json:"passed"`
	Failed         int `json:"failed"`
	AttacksThrough int `json:"attacks_through"`
	ControlsFailed int `json:"controls_failed"`
	Categories     int `json:"categories"`
}

// Summarize counts results.
func Summarize(results []Result) Summary {
	var s Summary
	cats := map[string]bool{}
	for _, r := range results {
		s.Attempts++
		cats[r.Category] = true
		if r.Control {
			s.Controls++
			if !r.Pass {
				s.ControlsFailed++
			}
		} else {
			s.Attacks++
			if r.Observed == attack.Allowed {
				s.AttacksThrough++
			}
		}
		if r.Pass {
			s.Passed++
		} else {
			s.Failed++
		}
	}
	s.Categories = len(cats)
	return s
}

// WriteFiles writes evidence.json and evidence.md into dir.
func (ev *Evidence) WriteFiles(dir string) error {
	js, err := json.MarshalIndent(ev, "", "  ")
	if err != nil {
		return fmt.Errorf("encode evidence: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, EvidenceJSON), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write evidence: %w", err)
	}
	var md bytes.Buffer
	ev.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(dir, EvidenceMarkdown), md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write evidence: %w", err)
	}
	return nil
}

// seqList formats audit seqs compactly ("-" for none).
func seqList(seqs []uint64) string {
	if len(seqs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(seqs))
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.FormatUint(seqs[i], 10)+"-"+strconv.FormatUint(seqs[j], 10))
		} else {
			parts = append(parts, strconv.FormatUint(seqs[i], 10))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func passWord(p bool) string {
	if p {
		return "ok"
	}
	return "FAIL"
}

// WriteTable prints the people's table: one row per attempt (attack,
// expected, observed, audit seqs, result), then the failures and the
// verdict.
func (ev *Evidence) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTACK\tCATEGORY\tLAYER\tEXPECTED\tOBSERVED\tAUDIT SEQ\tRESULT")
	for _, r := range ev.Attempts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Category, r.Layer, r.Expected, r.Observed, seqList(r.AuditSeqs), passWord(r.Pass))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(ev.Reasons) > 0 {
		fmt.Fprintln(w, "Failures:")
		for _, r := range ev.Reasons {
			fmt.Fprintln(w, "  "+r)
		}
		fmt.Fprintln(w)
	}
	s := ev.Summary
	fmt.Fprintf(w, "%d attempts in %d categories: %d attacks (%d got through), %d controls (%d failed); %d passed, %d failed.\n",
		s.Attempts, s.Categories, s.Attacks, s.AttacksThrough, s.Controls, s.ControlsFailed, s.Passed, s.Failed)
	for _, t := range ev.Targets {
		if t.Target == "metadata" && t.Hits > 0 {
			fmt.Fprintf(w, "The fake metadata server at %s was hit %d time(s).\n", t.Addr, t.Hits)
		}
	}
	if ev.Audit.Head != "" {
		fmt.Fprintf(w, "Audit log: %d records, head %s (verified: %v).\n", ev.Audit.Records, ev.Audit.Head, ev.Audit.Verified)
	}
	verdict := "PASS: every attack was blocked and every control succeeded."
	if ev.Verdict != "pass" {
		verdict = "FAIL: see the failures above."
	}
	if ev.Break != "" {
		verdict += " (--break " + ev.Break + " disabled a layer on purpose.)"
	}
	fmt.Fprintln(w, verdict)
}

// mdCell escapes a table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

// WriteMarkdown renders the evidence for people.
func (ev *Evidence) WriteMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# nsgate security lab: %s\n\n", strings.ToUpper(ev.Verdict))
	if ev.Break != "" {
		p("> Run with `--break %s`: a layer was disabled on purpose to show that the lab notices.\n\n", ev.Break)
	}
	p("| | |\n|---|---|\n")
	p("| verdict | **%s** |\n", ev.Verdict)
	p("| started | %s |\n| finished | %s |\n", ev.Started.UTC().Format(time.RFC3339), ev.Finished.UTC().Format(time.RFC3339))
	p("| nsgate | %s |\n", mdCell(ev.Version))
	p("| policy sha256 | `%s` |\n", ev.Policy.SHA256)
	p("| audit log | `%s`: %d records, head `%s`, verified %v (MACs checked %v, anchored by its head file %v) |\n", ev.Audit.File, ev.Audit.Records, ev.Audit.Head, ev.Audit.Verified, ev.Audit.MACsChecked, ev.Audit.Anchored)
	e := ev.Environment
	p("| environment | %s/%s, kernel %s, %s, rootless %v, uid %d, /dev/net/tun %s, Landlock ABI %d, seccomp %v |\n",
		e.OS, e.Arch, mdCell(e.Kernel), e.GoVersion, e.Rootless, e.UID, e.TunMode, e.LandlockABI, e.Seccomp)
	p("| gateway | `%s`, exit %d |\n\n", mdCell(strings.Join(ev.Command, " ")), ev.Gateway.ExitCode)
	s := ev.Summary
	p("%d attempts in %d categories: %d attacks (%d got through), %d controls (%d failed); %d passed, %d failed.\n\n",
		s.Attempts, s.Categories, s.Attacks, s.AttacksThrough, s.Controls, s.ControlsFailed, s.Passed, s.Failed)
	if len(ev.Reasons) > 0 {
		p("## Failures\n\n")
		for _, r := range ev.Reasons {
			p("- %s\n", r)
		}
		p("\n")
	}
	if len(e.Notes) > 0 || len(e.Skipped) > 0 {
		p("## Notes\n\n")
		for _, n := range e.Notes {
			p("- %s\n", n)
		}
		for _, k := range e.Skipped {
			p("- service %s skipped: its address could not be put on lo\n", k)
		}
		p("\n")
	}
	p("## Attempts\n\n| attempt | category | layer | expected | observed | audit seqs | result | detail |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range ev.Attempts {
		detail := r.Detail
		if r.Why != "" {
			detail = r.Why + " — " + detail
		}
		if r.HostCheck != "" {
			detail += " — host check: " + r.HostCheck
		}
		if r.Evidence != "" {
			detail += " — evidence: " + r.Evidence
		}
		p("| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", r.ID, r.Category, r.Layer, r.Expected, r.Observed, seqList(r.AuditSeqs), passWord(r.Pass), mdCell(detail))
	}
	p("\n## Fake targets\n\n| target | address | approved | hits |\n|---|---|---|---|\n")
	for _, t := range ev.Targets {
		p("| %s | `%s` | %v | %d |\n", t.Target, t.Addr, t.Approved, t.Hits)
	}
	p("\n## Audit records per attempt\n\n")
	for _, r := range ev.Attempts {
		if len(r.Audit) == 0 {
			continue
		}
		p("### %s\n\n```\n", r.ID)
		for _, a := range r.Audit {
			p("%s\n", a)
		}
		p("```\n\n")
	}
	p("## Policy\n\n```yaml\n%s```\n", ev.Policy.Text)
	if ev.Gateway.Stderr != "" {
		p("\n## Gateway stderr (tail)\n\n```\n%s\n```\n", ev.Gateway.Stderr)
	}
}
