package lab

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/audit"
)

// cannedFillLog writes a keyed log like the fill run's: a start, an allowed
// flow to app.test, denied flood names; its head file next to it.
func cannedFillLog(t *testing.T, key []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), EvidenceAuditFill)
	l, err := audit.Open(p, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(audit.Start{Version: "test", Argv: []string{"x"}})
	l.Log(audit.Flow{Action: "allow", Proto: "tcp", Src: "10.0.2.100:1", Dst: "198.18.0.1:8080", Host: AppName, Rule: "allow[0]"})
	for i := 0; i < 5; i++ {
		l.Log(audit.DNS{QName: fmt.Sprintf("%d-x.%s.", i, floodZone), QType: "A", Action: "deny", Rule: "default"})
	}
	if _, err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestJudgeAuditFill(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	fill, _ := Find("audit-fill-volume")
	line := "nsgate: audit log failed: write /x/audit.jsonl: no space left on device; the worker was stopped"
	good := func() *fillRun {
		return &fillRun{
			started: at(0), ended: at(5000), exitCode: 125, stderr: line,
			copy: cannedFillLog(t, key),
			obs:  []Observation{{ID: fill.ID, Observed: Errored, Partial: true, Detail: "flooded 200 refused names"}},
		}
	}
	appHit := Hit{Time: at(100), Target: "app", Addr: AppV4 + ":8080/tcp"}
	r := judgeAuditFill(fill, good(), []Hit{appHit}, key)
	if !r.Pass || r.Observed != Blocked || !strings.Contains(r.Detail, "then nsgate stopped the worker") {
		t.Fatalf("good run: pass %v observed %s: %s (%s)", r.Pass, r.Observed, r.Why, r.Detail)
	}
	if !strings.Contains(r.Evidence, "MACs checked true") || !strings.Contains(r.Evidence, "5 of them refused") {
		t.Errorf("evidence %q", r.Evidence)
	}
	for _, tc := range []struct {
		name string
		mod  func(*fillRun)
		hits []Hit
		key  []byte
		want string
	}{
		{"exit 0", func(f *fillRun) { f.exitCode = 0 }, nil, key, "could not be carried out"},
		{"exit 1 after a final observation", func(f *fillRun) {
			f.exitCode = 1
			f.obs = append(f.obs, Observation{ID: fill.ID, Observed: Blocked, Detail: "REFUSED"})
		}, nil, key, "exited 1, not 125"},
		{"two lines", func(f *fillRun) {
			f.stderr = line + "\n" + line
			f.obs = append(f.obs, Observation{ID: fill.ID, Observed: Blocked, Detail: "REFUSED"})
		}, nil, key, "2 lines"},
		{"another line", func(f *fillRun) { f.stderr = "nsgate: warning: something\n" + line }, nil, key, "2 lines, not just the one"},
		{"got through", func(f *fillRun) {
			f.obs = append(f.obs, Observation{ID: fill.ID, Observed: Allowed, Detail: "app answered"})
		}, nil, key, "got through"},
		{"unapproved hit", nil, []Hit{{Time: at(200), Target: "unapproved"}}, key, "unapproved target unapproved was hit 1"},
		{"unrecorded app flow", nil, []Hit{appHit, {Time: at(300), Target: "app"}}, key, "a flow went unrecorded"},
		{"wrong key", nil, nil, []byte("another key, at least 32 bytes long"), "do not verify"},
		{"nothing reported", func(f *fillRun) { f.obs = nil }, nil, key, "reported nothing"},
	} {
		f := good()
		if tc.mod != nil {
			tc.mod(f)
		}
		r := judgeAuditFill(fill, f, tc.hits, tc.key)
		if r.Pass || !strings.Contains(r.Why, tc.want) {
			t.Errorf("%s: pass %v: %q; want a failure saying %q", tc.name, r.Pass, r.Why, tc.want)
		}
	}
}
