package attack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostChecks runs the host checks on real files.
func TestHostChecks(t *testing.T) {
	dir := t.TempDir()
	h := &HostEnv{Token: "tok", Home: dir}
	p := filepath.Join(dir, "policy.yaml")
	os.WriteFile(p, []byte("version: 1\n"), 0o644)
	if err := h.Snapshot(p); err != nil {
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
	h.Snapshot(p)
	os.WriteFile(p, []byte("version: 2\n"), 0o644)
	if r := h.unchanged(p); r.OK || !strings.Contains(r.Detail, "changed") {
		t.Errorf("changed file: %+v", r)
	}
	// The worker's report of what it read, against the file.
	h.Snapshot(p)
	_, sum, _ := snap(p)
	h.Observations = map[string]Observation{"r": {ID: "r", Observed: Allowed, Detail: "read 11 bytes of x (sha256 " + short(sum) + ")"}}
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
