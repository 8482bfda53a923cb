package session

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

func writePolicy(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenRefusesABadPolicy(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ why, path, want string }{
		{"a missing file is an error, not deny-all", filepath.Join(dir, "missing.yaml"), "no such file"},
		{"a device is no policy file", "/dev/zero", "not a regular file"},
		{"a policy with an error", writePolicy(t, dir, "version: 1\nallow: [{host: '*'}]\n"), "policy.yaml:"},
	} {
		_, err := Open(Config{PolicyPath: tc.path, Stderr: &bytes.Buffer{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, want an error containing %q", tc.why, err, tc.want)
		}
	}
}

// TestReloadAndClose: a reload puts the new policy in force or keeps the
// old one, audited either way; Close ends the log with the exit record and
// says the head.
func TestReloadAndClose(t *testing.T) {
	dir := t.TempDir()
	pol := writePolicy(t, dir, "version: 1\n")
	log := filepath.Join(dir, "audit.jsonl")
	var stderr bytes.Buffer
	var reloaded *policy.Policy
	s, err := Open(Config{PolicyPath: pol, AuditPath: log, Stderr: &stderr, Reload: ReloadOnSIGHUP,
		OnReload: func(p *policy.Policy) string { reloaded = p; return "" }, Start: audit.Start{Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Policy().SHA256()
	writePolicy(t, dir, "version: 1\nallow: [{cidr: 203.0.113.0/24, ports: [443]}]\n")
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload of a good file: %v", err)
	}
	second := s.Policy().SHA256()
	if second == first || reloaded == nil || reloaded.SHA256() != second {
		t.Errorf("the new policy is not in force (sha %s then %s, OnReload %v)", first, second, reloaded != nil)
	}
	writePolicy(t, dir, "version: 1\nbogus: true\n")
	if err := s.Reload(); err == nil {
		t.Errorf("Reload of a bad file succeeded")
	}
	if s.Policy().SHA256() != second {
		t.Errorf("a refused reload changed the policy in force")
	}
	if code := s.Close(3); code != 3 {
		t.Errorf("Close(3) = %d", code)
	}
	if !strings.Contains(stderr.String(), "nsgate: audit head ") {
		t.Errorf("Close did not say the head: %q", stderr.String())
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var events []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, `"event":"start"`):
			events = append(events, "start")
		case strings.Contains(l, `"event":"policy"`) && strings.Contains(l, `"action":"allow"`):
			events = append(events, "reload")
		case strings.Contains(l, `"event":"policy"`) && strings.Contains(l, `"action":"deny"`):
			events = append(events, "refused")
		case strings.Contains(l, `"event":"exit"`) && strings.Contains(l, `"code":3`):
			events = append(events, "exit")
		}
	}
	if got := strings.Join(events, ","); got != "start,reload,refused,exit" {
		t.Errorf("audit events %s, want start,reload,refused,exit", got)
	}
	if _, _, err := audit.VerifyFile(log, nil); err != nil {
		t.Errorf("the log does not verify: %v", err)
	}
}

// TestReloadNotInForce: what OnReload says is not in force is recorded
// after the reload's own record, as a policy record with action degraded
// and the new policy's hash.
func TestReloadNotInForce(t *testing.T) {
	dir := t.TempDir()
	pol := writePolicy(t, dir, "version: 1\n")
	log := filepath.Join(dir, "audit.jsonl")
	s, err := Open(Config{PolicyPath: pol, AuditPath: log, Stderr: &bytes.Buffer{}, Reload: ReloadOnSIGHUP,
		OnReload: func(p *policy.Policy) string { return "exec.allow changed" },
		Start:    audit.Start{Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	writePolicy(t, dir, "version: 1\nexec:\n  allow: [/usr/bin/wget]\n")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	sha := s.Policy().SHA256()
	s.Close(0)
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.Contains(l, `"event":"policy"`) {
			got = append(got, l)
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], `"action":"allow"`) ||
		!strings.Contains(got[1], `"action":"degraded"`) || !strings.Contains(got[1], "exec.allow changed") || !strings.Contains(got[1], sha) {
		t.Errorf("policy records %q, want the reload then a degraded record naming exec.allow and %s", got, sha)
	}
}

// TestReloadWithoutFile: with no policy file (deny-all) a reload is
// refused and recorded, not reported as a reload; deny-all stays.
func TestReloadWithoutFile(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(Config{AuditPath: log, Stderr: &bytes.Buffer{}, Reload: ReloadOnSIGHUP, Start: audit.Start{Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	before := s.Policy().SHA256()
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "no policy file") {
		t.Errorf("Reload without a file = %v, want a refusal naming the missing file", err)
	}
	if s.Policy().SHA256() != before {
		t.Errorf("the policy changed")
	}
	s.Close(0)
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), `"event":"policy"`) || !strings.Contains(string(data), "nothing to reload") {
		t.Errorf("no refused-reload record in %s", data)
	}
}

func TestNoReloadRefuses(t *testing.T) {
	s, err := Open(Config{Stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(0)
	if err := s.Reload(); err == nil {
		t.Errorf("Reload under NoReload succeeded")
	}
}

// TestStopOnAuditFailureLeavesAHealthyWorker: registering the worker does
// not end it while the log is fine (the failure itself is exercised end to
// end by the integration tests).
func TestStopOnAuditFailureLeavesAHealthyWorker(t *testing.T) {
	s, err := Open(Config{Stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(0)
	var killed bool
	s.StopOnAuditFailure(func() { killed = true })
	if killed {
		t.Errorf("the worker was ended although the log is fine")
	}
}
