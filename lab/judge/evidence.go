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

	"github.com/nsgate/nsgate/audit"
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
	// EvidenceAuditCredentials is the log of the credential attempts' run
	// (signed with the lab's key, as the main log is).
	EvidenceAuditCredentials = "audit-credentials.jsonl"
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
	// Invocation is the command line of the lab itself, to reproduce it.
	Invocation []string `json:"invocation,omitempty"`
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
	// WorkDir is the lab's work directory (removed after the run), where
	// the policy, the key, the caller's home and the --rw directory were;
	// evidence.md writes it as $WORK.
	WorkDir string `json:"work_dir,omitempty"`
	// Skipped lists what the run left out and why (a browser agent whose
	// node or npm packages are missing): evidence.md lists it as not
	// tested. Under NSGATE_REQUIRE_ALL=1 a skip fails the run instead.
	Skipped []string `json:"skipped,omitempty"`
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
	// UID is the lab's uid inside its sealed namespace (0 whether the
	// caller was root or not: see CallerUID).
	UID int `json:"uid"`
	// CallerUID and CallerGID are the real ids of the user who started
	// `nsgate lab`, as the caller's own user namespace sees them (read
	// from the sealed namespace's uid and gid maps); CallerUser is that
	// uid's account name ("" when the account database has none).
	CallerUID  int    `json:"caller_uid"`
	CallerGID  int    `json:"caller_gid"`
	CallerUser string `json:"caller_user,omitempty"`
	// TunMode is the permission of /dev/net/tun.
	TunMode     string `json:"tun_mode"`
	LandlockABI int    `json:"landlock_abi"`
	Seccomp     bool   `json:"seccomp"`
	// SeccompNotify is true when seccomp user notifications (the exec
	// audit) are available.
	SeccompNotify bool `json:"seccomp_notify"`
	// UserNamespaces is true when the kernel lets the caller create user
	// namespaces (nsgate run puts the worker in one of its own).
	UserNamespaces bool `json:"user_namespaces"`
	// IA32Emulation says whether the kernel runs i386 programs on amd64,
	// found by running a tiny one: "present", "absent", "not probed on
	// ARCH", or "unknown: ERROR".
	IA32Emulation string `json:"ia32_emulation,omitempty"`
	// Skipped lists fake services left out (their address could not be
	// put on lo).
	Skipped []string `json:"skipped_services,omitempty"`
	// Tools are the versions of the browser stack the run used
	// ("chromium: ...", "node: ...", "playwright-core 1.65.1").
	Tools []string `json:"tools,omitempty"`
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

// Summary counts the results. An attack is blocked or got through by what
// the attacker observed; it fails when it got through, errored, or lacks
// the evidence it needs (an audit record, a clean host check), so
// AttacksBlocked+AttacksThrough can be below Attacks and a blocked attack
// can still count in AttacksFailed.
type Summary struct {
	Attempts       int `json:"attempts"`
	Attacks        int `json:"attacks"`
	Controls       int `json:"controls"`
	Passed         int `json:"passed"`
	Failed         int `json:"failed"`
	AttacksThrough int `json:"attacks_through"`
	ControlsFailed int `json:"controls_failed"`
	Categories     int `json:"categories"`
	AttacksBlocked int `json:"attacks_blocked"`
	AttacksFailed  int `json:"attacks_failed"`
	ControlsOK     int `json:"controls_ok"`
	// AttacksDegraded counts the attacks that got through a layer nsgate
	// said was not in force, accepted by --expect-degraded (they pass).
	AttacksDegraded int `json:"attacks_degraded,omitempty"`
	// ByCategory holds the same counts per category, in the order the
	// categories first appear among the results.
	ByCategory []CategoryCount `json:"by_category"`
}

// CategoryCount is Summary's counts for one category.
type CategoryCount struct {
	Category       string `json:"category"`
	Attacks        int    `json:"attacks"`
	AttacksBlocked int    `json:"attacks_blocked"`
	AttacksThrough int    `json:"attacks_through"`
	AttacksFailed  int    `json:"attacks_failed"`
	Controls       int    `json:"controls"`
	ControlsOK     int    `json:"controls_ok"`
	ControlsFailed int    `json:"controls_failed"`
}

// add counts one result.
func (c *CategoryCount) add(r Result) {
	if r.Control {
		c.Controls++
		if r.Pass {
			c.ControlsOK++
		} else {
			c.ControlsFailed++
		}
		return
	}
	c.Attacks++
	switch r.Observed {
	case attack.Blocked:
		c.AttacksBlocked++
	case attack.Allowed:
		c.AttacksThrough++
	}
	if !r.Pass {
		c.AttacksFailed++
	}
}

// Summarize counts results.
func Summarize(results []Result) Summary {
	var s Summary
	var total CategoryCount
	at := map[string]int{} // category -> index in s.ByCategory
	s.ByCategory = []CategoryCount{}
	for _, r := range results {
		s.Attempts++
		i, ok := at[r.Category]
		if !ok {
			i = len(s.ByCategory)
			at[r.Category] = i
			s.ByCategory = append(s.ByCategory, CategoryCount{Category: r.Category})
		}
		s.ByCategory[i].add(r)
		total.add(r)
		if r.Pass {
			s.Passed++
		} else {
			s.Failed++
		}
		if r.Pass && r.Degraded != "" {
			s.AttacksDegraded++
		}
	}
	s.Attacks, s.AttacksBlocked, s.AttacksThrough, s.AttacksFailed = total.Attacks, total.AttacksBlocked, total.AttacksThrough, total.AttacksFailed
	s.Controls, s.ControlsOK, s.ControlsFailed = total.Controls, total.ControlsOK, total.ControlsFailed
	s.Categories = len(s.ByCategory)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", audit.TermText(r.ID), audit.TermText(r.Category), audit.TermText(r.Layer),
			audit.TermText(string(r.Expected)), audit.TermText(string(r.Observed)), seqList(r.AuditSeqs), passWord(r.Pass))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(ev.Reasons) > 0 {
		fmt.Fprintln(w, "Failures:")
		for _, r := range ev.Reasons {
			fmt.Fprintln(w, "  "+audit.TermText(r))
		}
		fmt.Fprintln(w)
	}
	s := ev.Summary
	through := fmt.Sprintf("%d got through", s.AttacksThrough)
	if s.AttacksDegraded > 0 {
		through += fmt.Sprintf(", %d of them through a layer nsgate said was not in force, as --expect-degraded accepts", s.AttacksDegraded)
	}
	fmt.Fprintf(w, "%d attempts in %d categories: %d attacks (%s), %d controls (%d failed); %d passed, %d failed.\n",
		s.Attempts, s.Categories, s.Attacks, through, s.Controls, s.ControlsFailed, s.Passed, s.Failed)
	for _, t := range ev.Targets {
		if t.Target == "metadata" && t.Hits > 0 {
			fmt.Fprintf(w, "The fake metadata server at %s was hit %d time(s).\n", t.Addr, t.Hits)
		}
	}
	if ev.Audit.Head != "" {
		fmt.Fprintf(w, "Audit log: %d records, head %s (verified: %v).\n", ev.Audit.Records, ev.Audit.Head, ev.Audit.Verified)
	}
	verdict := "PASS: every attack was blocked and every control succeeded."
	if s.AttacksDegraded > 0 {
		verdict = "PASS: every attack was blocked, except where nsgate said a layer was not in force and --expect-degraded accepted it; every control succeeded."
	}
	if ev.Verdict != "pass" {
		verdict = "FAIL: see the failures above."
	}
	if ev.Break != "" {
		verdict += " (--break " + ev.Break + " disabled a layer on purpose.)"
	}
	fmt.Fprintln(w, verdict)
}
