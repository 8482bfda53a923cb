package judge

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
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
	l.Log(audit.Flow{Action: "allow", Proto: "tcp", Src: "10.0.2.100:1", Dst: "198.18.0.1:8080", Host: internet.AppName, Rule: "allow[0]"})
	for i := 0; i < 5; i++ {
		l.Log(audit.DNS{QName: fmt.Sprintf("%d-x.%s.", i, attack.FloodZone), QType: "A", Action: "deny", Rule: "default"})
	}
	if _, err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuditFill(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	fill, _ := attack.Find("audit-fill-volume")
	line := "nsgate: audit log failed: write /x/audit.jsonl: no space left on device; the worker was stopped"
	good := func() *FillRun {
		return &FillRun{
			Started: at(0), Ended: at(5000), ExitCode: 125, Stderr: line, VolumeSize: 64 << 10,
			Copy: cannedFillLog(t, key),
			Obs:  []attack.Observation{{ID: fill.ID, Observed: attack.Errored, Partial: true, Detail: "flooded 200 refused names"}},
		}
	}
	appHit := internet.Hit{Time: at(100), Target: "app", Addr: internet.AppV4 + ":8080/tcp"}
	r := AuditFill(fill, good(), []internet.Hit{appHit}, key)
	if !r.Pass || r.Observed != attack.Blocked || !strings.Contains(r.Detail, "then nsgate stopped the worker") {
		t.Fatalf("good run: pass %v observed %s: %s (%s)", r.Pass, r.Observed, r.Why, r.Detail)
	}
	if !strings.Contains(r.Evidence, "MACs checked true") || !strings.Contains(r.Evidence, "5 of them refused") {
		t.Errorf("evidence %q", r.Evidence)
	}
	for _, tc := range []struct {
		name string
		mod  func(*FillRun)
		hits []internet.Hit
		key  []byte
		want string
	}{
		{"exit 0", func(f *FillRun) { f.ExitCode = 0 }, nil, key, "could not be carried out"},
		{"exit 1 after a final observation", func(f *FillRun) {
			f.ExitCode = 1
			f.Obs = append(f.Obs, attack.Observation{ID: fill.ID, Observed: attack.Blocked, Detail: "REFUSED"})
		}, nil, key, "exited 1, not 125"},
		{"two lines", func(f *FillRun) {
			f.Stderr = line + "\n" + line
			f.Obs = append(f.Obs, attack.Observation{ID: fill.ID, Observed: attack.Blocked, Detail: "REFUSED"})
		}, nil, key, "2 lines"},
		{"another line", func(f *FillRun) { f.Stderr = "nsgate: warning: something\n" + line }, nil, key, "2 lines, not just the one"},
		{"got through", func(f *FillRun) {
			f.Obs = append(f.Obs, attack.Observation{ID: fill.ID, Observed: attack.Allowed, Detail: "app answered"})
		}, nil, key, "got through"},
		{"unapproved hit", nil, []internet.Hit{{Time: at(200), Target: "unapproved"}}, key, "unapproved target unapproved was hit 1"},
		{"unrecorded app flow", nil, []internet.Hit{appHit, {Time: at(300), Target: "app"}}, key, "a flow went unrecorded"},
		{"wrong key", nil, nil, []byte("another key, at least 32 bytes long"), "do not verify"},
		{"nothing reported", func(f *FillRun) { f.Obs = nil }, nil, key, "reported nothing"},
	} {
		f := good()
		if tc.mod != nil {
			tc.mod(f)
		}
		r := AuditFill(fill, f, tc.hits, tc.key)
		if r.Pass || !strings.Contains(r.Why, tc.want) {
			t.Errorf("%s: pass %v: %q; want a failure saying %q", tc.name, r.Pass, r.Why, tc.want)
		}
	}
}
