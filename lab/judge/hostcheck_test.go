package judge

import (
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/attack"
)

// hostCanned is a containment attack and a file system control, each
// judged on a host check.
func hostCanned() []attack.Attempt {
	ok := func(h *attack.HostEnv, at attack.Attempt) attack.HostResult {
		return attack.HostResult{OK: true, Detail: "fine"}
	}
	return []attack.Attempt{
		{ID: "ctl-fs", Category: "control", Layer: attack.LayerControl, Expect: attack.Allowed, Audit: attack.AuditNone, HostCheck: "the file is there", CheckHost: ok},
		{ID: "fs", Category: "containment", Layer: attack.LayerView, Expect: attack.Blocked, Audit: attack.AuditNone, HostCheck: "the file is absent", NoRecord: "by design", CheckHost: ok},
	}
}

// TestJudgeHostChecks: an attempt with a host check passes only when the
// lab made it and it found nothing; a file system control needs no
// target hit or allow record; the evidence says why there is no record.
func TestJudgeHostChecks(t *testing.T) {
	cat := hostCanned()
	o := []attack.Observation{obs("ctl-fs", attack.Allowed, 0, 10), obs("fs", attack.Blocked, 20, 30)}
	good := map[string]attack.HostResult{"ctl-fs": {OK: true, Detail: "there"}, "fs": {OK: true, Detail: "absent"}}
	rep := DecideHost(cat, o, nil, nil, approvedCanned, good)
	if !rep.Pass {
		t.Fatalf("failed: %v", rep.Reasons)
	}
	if r := resultOf(rep, "fs"); r.HostCheck != "the file is absent: absent" || r.Evidence != "by design" {
		t.Errorf("result host check %q, evidence %q", r.HostCheck, r.Evidence)
	}
	for _, tc := range []struct {
		name string
		host map[string]attack.HostResult
		id   string
		want string
	}{
		{"attack's check failed", map[string]attack.HostResult{"ctl-fs": {OK: true}, "fs": {Detail: "/etc/x exists"}}, "fs", "the host check failed: /etc/x exists"},
		{"attack not checked", map[string]attack.HostResult{"ctl-fs": {OK: true}}, "fs", "no host check"},
		{"control's check failed", map[string]attack.HostResult{"ctl-fs": {Detail: "missing"}, "fs": {OK: true}}, "ctl-fs", "control succeeded in the worker, but the host check failed: missing"},
		{"no checks at all", nil, "ctl-fs", "no host check"},
	} {
		rep := DecideHost(cat, o, nil, nil, approvedCanned, tc.host)
		r := resultOf(rep, tc.id)
		if rep.Pass || r.Pass || !strings.Contains(r.Why, tc.want) {
			t.Errorf("%s: pass %v, %s: %q; want a failure saying %q", tc.name, rep.Pass, tc.id, r.Why, tc.want)
		}
	}
	// A blocked observation does not hide a file that reached the host,
	// and a file on the host does not hide an attack that got through.
	rep = DecideHost(cat, []attack.Observation{obs("ctl-fs", attack.Allowed, 0, 10), obs("fs", attack.Allowed, 20, 30)}, nil, nil, approvedCanned,
		map[string]attack.HostResult{"ctl-fs": {OK: true}, "fs": {Detail: "/etc/x exists"}})
	if r := resultOf(rep, "fs"); !strings.Contains(r.Why, "got through") || !strings.Contains(r.Why, "/etc/x exists") {
		t.Errorf("both failures should be named: %q", r.Why)
	}
}
