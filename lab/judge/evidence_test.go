package judge

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

func cannedEvidence(t *testing.T, r cannedRun) *Evidence {
	t.Helper()
	rep := judgeCanned(r)
	ev := &Evidence{
		Tool: "nsgate lab", Version: "nsgate test", Started: at(-200), Finished: at(1500),
		Command: []string{"nsgate", "run", "--", "nsgate", "__attack"},
		Policy:  PolicyInfo{File: "policy.yaml", SHA256: strings.Repeat("ab", 32), Text: "version: 1\n"},
		Audit:   AuditInfo{File: "audit.jsonl", Records: len(r.recs), Head: strings.Repeat("cd", 32), Verified: true},
		Targets: []internet.TargetCount{{Target: "metadata", Addr: internet.MetadataV4 + ":80/tcp", Hits: 0}},
	}
	ev.Attempts, ev.Reasons, ev.Summary = rep.Results, rep.Reasons, Summarize(rep.Results)
	ev.Verdict = "pass"
	if !rep.Pass {
		ev.Verdict = "fail"
	}
	return ev
}

func TestEvidenceFiles(t *testing.T) {
	dir := t.TempDir()
	ev := cannedEvidence(t, goodRun())
	if err := ev.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, EvidenceJSON))
	if err != nil {
		t.Fatal(err)
	}
	// The contract of evidence.json, read back without the Go types.
	var doc struct {
		Verdict     string           `json:"verdict"`
		Version     string           `json:"version"`
		Started     string           `json:"started"`
		Policy      map[string]any   `json:"policy"`
		Environment map[string]any   `json:"environment"`
		Audit       map[string]any   `json:"audit"`
		Attempts    []map[string]any `json:"attempts"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("evidence.json: %v", err)
	}
	if doc.Verdict != "pass" || doc.Version == "" || doc.Started == "" || doc.Policy["sha256"] == "" || doc.Environment == nil || doc.Audit["head"] == "" {
		t.Errorf("evidence.json lacks what was tested, when, version, policy hash, environment or audit head: %s", data)
	}
	if len(doc.Attempts) != len(cannedCatalogue()) {
		t.Fatalf("%d attempts, want %d", len(doc.Attempts), len(cannedCatalogue()))
	}
	for _, a := range doc.Attempts {
		for _, k := range []string{"id", "category", "expected", "observed", "detail", "audit_seqs", "audit", "pass"} {
			if _, ok := a[k]; !ok {
				t.Errorf("attempt %v lacks %q", a["id"], k)
			}
		}
		for _, k := range []string{"expected", "observed"} {
			if v := a[k]; v != "blocked" && v != "allowed" {
				t.Errorf("attempt %v: %s is %v", a["id"], k, v)
			}
		}
		if _, ok := a["audit_seqs"].([]any); !ok {
			t.Errorf("attempt %v: audit_seqs is %T, want a list (empty, not null)", a["id"], a["audit_seqs"])
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, EvidenceMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# nsgate security lab: PASS", "`meta`", "2-3,6", "## Policy"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("evidence.md lacks %q", want)
		}
	}
}

func TestEvidenceTable(t *testing.T) {
	r := goodRun()
	r.obs[1].Observed = attack.Allowed
	ev := cannedEvidence(t, r)
	ev.Targets[0].Hits = 3
	ev.Break = "metadata" // lab.BreakMetadata
	var b bytes.Buffer
	ev.WriteTable(&b)
	out := b.String()
	for _, want := range []string{
		"ATTACK", "AUDIT SEQ",
		"meta ", "FAIL",
		"meta: got through",
		"fake metadata server at 169.254.169.254:80/tcp was hit 3 time(s)",
		"FAIL: see the failures above. (--break metadata",
		"1 got through",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSeqList(t *testing.T) {
	for _, tc := range []struct {
		in   []uint64
		want string
	}{
		{nil, "-"},
		{[]uint64{4}, "4"},
		{[]uint64{2, 3, 4, 7, 9, 10}, "2-4,7,9-10"},
	} {
		if got := seqList(tc.in); got != tc.want {
			t.Errorf("seqList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
