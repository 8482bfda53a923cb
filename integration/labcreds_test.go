//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// labCredIDs are the credential category's attempts and its control.
const labCredIDs = "control-credentials,creds-other-host,creds-in-body,creds-in-query,creds-in-dns,creds-read-source,creds-echo,creds-echo-trailer,creds-echo-early-hints,creds-echo-encoding,creds-echo-range,creds-echo-case,creds-echo-encoded,creds-path-confusion,creds-method-override,creds-method-override-form,creds-query-pollution,creds-upgrade-tunnel,creds-ws-placeholder,creds-h2-smuggle,creds-fronting"

// TestLabCredentials runs the lab's credential category, root and
// rootless: every attack is blocked with no request at the fake upstreams
// (none carrying the secret or a placeholder), each deny is evidenced in
// the run's log, the echo comes back scrubbed, and the control's request
// reaches the upstream exactly once, with the secret.
func TestLabCredentials(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := filepath.Join(workDir(t, m), "evidence")
		r := runLab(t, m, "--only", labCredIDs, "--evidence", dir)
		if r.code != 0 {
			t.Errorf("lab exited %d, want 0", r.code)
		}
		ev := readEvidence(t, dir)
		seen := 0
		for _, a := range ev.Attempts {
			seen++
			if !a.Pass {
				t.Errorf("%s: expected %s, observed %s: %s [%s]", a.ID, a.Expected, a.Observed, a.Why, a.Detail)
			}
			switch {
			case a.Control || strings.HasPrefix(a.ID, "creds-echo"):
				want := 1
				if a.ID == "creds-echo-range" || a.ID == "creds-echo-trailer" {
					want = 2 // two pieces
				}
				if len(a.Hits) != want {
					t.Errorf("%s: upstream hits %+v, want %d carrying the secret", a.ID, a.Hits, want)
				}
				for _, h := range a.Hits {
					if !strings.Contains(h.Detail, "secret: true, placeholder: false") {
						t.Errorf("%s: upstream hit %+v, want the secret and no placeholder", a.ID, h)
					}
				}
			case a.ID == "creds-query-pollution":
				// The allowed query first (the attempt's proof that the
				// rule lets it through), then nothing.
				if len(a.Hits) != 1 || !strings.Contains(a.Hits[0].Detail, "/search") {
					t.Errorf("%s: upstream hits %+v, want the allowed query alone", a.ID, a.Hits)
				}
			case a.ID == "creds-ws-placeholder":
				// The upgrade is allowed and carries the secret; no
				// message may follow it.
				if len(a.Hits) != 1 || !strings.Contains(a.Hits[0].Detail, "GET /v1/ws (secret: true, placeholder: false)") {
					t.Errorf("%s: upstream hits %+v, want the upgrade alone", a.ID, a.Hits)
				}
			case len(a.Hits) != 0:
				t.Errorf("%s: upstream hits %+v, want none", a.ID, a.Hits)
			}
			deny := a.ID != "creds-read-source" && a.ID != "creds-h2-smuggle" && !a.Control && !strings.HasPrefix(a.ID, "creds-echo")
			if deny && len(a.AuditSeqs) == 0 {
				t.Errorf("%s: no deny record attributed", a.ID)
			}
			if !a.Control && a.Category != "credentials" {
				t.Errorf("%s: category %q", a.ID, a.Category)
			}
		}
		// The secret is in no evidence file, and the phase's own log
		// verifies with the lab's key.
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && regexp.MustCompile(`labsecret-[0-9a-f]{32}`).Match(b) {
				t.Errorf("%s holds the secret", f)
			}
		}
		v := runNsgate(t, m, "audit", "verify", "--key", filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit-credentials.jsonl"))
		if v.code != 0 || !strings.Contains(v.stdout, "MACs checked: all") {
			t.Errorf("audit verify --key audit-credentials.jsonl: exit %d %q %q", v.code, v.stdout, v.stderr)
		}
		if seen != strings.Count(labCredIDs, ",")+1 {
			t.Errorf("%d attempts in the evidence, want %d", seen, strings.Count(labCredIDs, ",")+1)
		}
	})
}

// TestLabBreakCredentials: with the substitution (--break credentials)
// or the request rules (--break request-rules) switched off, the
// matching attempts get through, at the fake upstreams, and the lab fails.
func TestLabBreakCredentials(t *testing.T) {
	needSealed(t)
	m := mode{name: modes()[0], uid: -1, gid: -1}
	for _, tc := range []struct {
		layer   string
		through []string
	}{
		{"credentials", []string{"creds-other-host", "creds-in-body", "creds-in-query", "creds-in-dns", "creds-ws-placeholder"}},
		{"request-rules", []string{"creds-path-confusion", "creds-method-override", "creds-method-override-form", "creds-query-pollution", "creds-upgrade-tunnel"}},
		{"echo-scrub", []string{"creds-echo", "creds-echo-trailer", "creds-echo-early-hints", "creds-echo-encoding", "creds-echo-range", "creds-echo-case", "creds-echo-encoded"}},
	} {
		t.Run(tc.layer, func(t *testing.T) {
			dir := filepath.Join(workDir(t, m), "evidence")
			r := runLab(t, m, "--break", tc.layer, "--only", labCredIDs, "--evidence", dir)
			if r.code != 1 {
				t.Fatalf("lab --break %s exited %d, want 1 (attacks got through)", tc.layer, r.code)
			}
			ev := readEvidence(t, dir)
			if ev.Break != tc.layer || ev.Verdict != "fail" {
				t.Errorf("evidence break %q verdict %q", ev.Break, ev.Verdict)
			}
			for _, id := range tc.through {
				if !strings.Contains(r.stdout, id+": got through") {
					t.Errorf("stdout does not name %s as got through", id)
				}
			}
			for _, a := range ev.Attempts {
				if !strings.Contains(","+strings.Join(tc.through, ",")+",", ","+a.ID+",") {
					continue
				}
				if len(a.Hits) == 0 {
					t.Errorf("%s got through but no fake target counted it", a.ID)
				}
				// The path check off: the confused paths reach the upstream
				// with the real secret.
				if tc.layer == "request-rules" && !strings.Contains(a.Hits[0].Detail, "secret: true") {
					t.Errorf("%s: hits %+v, want the secret upstream", a.ID, a.Hits)
				}
			}
		})
	}
}
