package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostCanned is a containment attack and a file system control, each
// judged on a host check.
func hostCanned() []Attempt {
	ok := func(h *hostEnv, at Attempt) HostResult { return HostResult{OK: true, Detail: "fine"} }
	return []Attempt{
		{ID: "ctl-fs", Category: "control", Layer: LayerControl, Expect: Allowed, Audit: AuditNone, HostCheck: "the file is there", host: ok},
		{ID: "fs", Category: "containment", Layer: LayerView, Expect: Blocked, Audit: AuditNone, HostCheck: "the file is absent", NoRecord: "by design", host: ok},
	}
}

// TestJudgeHostChecks: an attempt with a host check passes only when the
// lab made it and it found nothing; a file system control needs no
// target hit or allow record; the evidence says why there is no record.
func TestJudgeHostChecks(t *testing.T) {
	cat := hostCanned()
	o := []Observation{obs("ctl-fs", Allowed, 0, 10), obs("fs", Blocked, 20, 30)}
	good := map[string]HostResult{"ctl-fs": {OK: true, Detail: "there"}, "fs": {OK: true, Detail: "absent"}}
	rep := JudgeHost(cat, o, nil, nil, approvedCanned, good)
	if !rep.Pass {
		t.Fatalf("failed: %v", rep.Reasons)
	}
	if r := resultOf(rep, "fs"); r.HostCheck != "the file is absent: absent" || r.Evidence != "by design" {
		t.Errorf("result host check %q, evidence %q", r.HostCheck, r.Evidence)
	}
	for _, tc := range []struct {
		name string
		host map[string]HostResult
		id   string
		want string
	}{
		{"attack's check failed", map[string]HostResult{"ctl-fs": {OK: true}, "fs": {Detail: "/etc/x exists"}}, "fs", "the host check failed: /etc/x exists"},
		{"attack not checked", map[string]HostResult{"ctl-fs": {OK: true}}, "fs", "no host check"},
		{"control's check failed", map[string]HostResult{"ctl-fs": {Detail: "missing"}, "fs": {OK: true}}, "ctl-fs", "control succeeded in the worker, but the host check failed: missing"},
		{"no checks at all", nil, "ctl-fs", "no host check"},
	} {
		rep := JudgeHost(cat, o, nil, nil, approvedCanned, tc.host)
		r := resultOf(rep, tc.id)
		if rep.Pass || r.Pass || !strings.Contains(r.Why, tc.want) {
			t.Errorf("%s: pass %v, %s: %q; want a failure saying %q", tc.name, rep.Pass, tc.id, r.Why, tc.want)
		}
	}
	// A blocked observation does not hide a file that reached the host,
	// and a file on the host does not hide an attack that got through.
	rep = JudgeHost(cat, []Observation{obs("ctl-fs", Allowed, 0, 10), obs("fs", Allowed, 20, 30)}, nil, nil, approvedCanned,
		map[string]HostResult{"ctl-fs": {OK: true}, "fs": {Detail: "/etc/x exists"}})
	if r := resultOf(rep, "fs"); !strings.Contains(r.Why, "got through") || !strings.Contains(r.Why, "/etc/x exists") {
		t.Errorf("both failures should be named: %q", r.Why)
	}
}

// TestHostChecks runs the host checks on real files.
func TestHostChecks(t *testing.T) {
	dir := t.TempDir()
	h := &hostEnv{Token: "tok", Home: dir}
	p := filepath.Join(dir, "policy.yaml")
	os.WriteFile(p, []byte("version: 1\n"), 0o644)
	if err := h.snapshot(p); err != nil {
		t.Fatal(err)
	}
	if r := h.unchanged(p); !r.OK {
		t.Errorf("unchanged: %v", r.Detail)
	}
	// Replaced with the same content: another inode.
	os.WriteFile(p+".new", []byte("version: 1\n"), 0o644)
	os.Rename(p+".new", p)
	if r := h.unchanged(p); r.OK || !strings.Contains(r.Detail, "replaced") {
		t.Errorf("replaced file: %+v", r)
	}
	h.snapshot(p)
	os.WriteFile(p, []byte("version: 2\n"), 0o644)
	if r := h.unchanged(p); r.OK || !strings.Contains(r.Detail, "changed") {
		t.Errorf("changed file: %+v", r)
	}
	// The worker's report of what it read, against the file.
	h.snapshot(p)
	_, sum, _ := snap(p)
	h.obs = map[string]Observation{"r": {ID: "r", Observed: Allowed, Detail: "read 11 bytes of x (sha256 " + short(sum) + ")"}}
	if r := h.readCheck(Attempt{ID: "r"}, p); r.OK || !strings.Contains(r.Detail, "the worker read the file") {
		t.Errorf("read check: %+v", r)
	}
	// Absent files; one that is there is reported and removed.
	f := filepath.Join(dir, "x")
	if r := h.absent(f); !r.OK {
		t.Errorf("absent: %+v", r)
	}
	os.WriteFile(f, nil, 0o644)
	if r := h.absent(f); r.OK || !strings.Contains(r.Detail, f) {
		t.Errorf("present file: %+v", r)
	}
	if _, err := os.Stat(f); err == nil {
		t.Errorf("the lab did not remove %s", f)
	}
	if r := h.present(f, "tok"); r.OK {
		t.Errorf("missing file reported present")
	}
	os.WriteFile(f, []byte("tok"), 0o644)
	if r := h.present(f, "tok"); !r.OK {
		t.Errorf("present: %+v", r)
	}
}

// TestContainmentCatalogue: the category has what the lab promises, and
// every attempt of it says how it is checked.
func TestContainmentCatalogue(t *testing.T) {
	want := []string{"fs-read-policy", "fs-read-policy-replaced", "fs-read-audit-log", "fs-read-audit-key", "fs-delete-audit-log",
		"fs-truncate-audit-log", "fs-replace-audit-log", "fs-read-home-ssh-key", "fs-write-home", "fs-write-work", "fs-write-etc", "fs-writable-exec-mount",
		"fs-exec-tmp", "fs-exec-var-tmp", "fs-exec-shm", "fs-exec-home", "fs-exec-rw", "fs-mmap-exec", "fs-ld-preload",
		"audit-fill-volume", "control-fs-scratch", "control-fs-home", "control-fs-rw"}
	for _, id := range want {
		at, ok := Find(id)
		if !ok {
			t.Errorf("%s is not in the catalogue", id)
			continue
		}
		if at.HostCheck == "" && at.Audit != AuditDeny {
			t.Errorf("%s: neither a host check nor an audit record", id)
		}
		if strings.HasPrefix(id, "fs-exec-") && at.Audit != AuditDeny {
			t.Errorf("%s: an exec must be refused with a deny record", id)
		}
	}
	if at, _ := Find("audit-fill-volume"); at.Phase != PhaseAuditFill {
		t.Errorf("audit-fill-volume must run on its own")
	}
}
