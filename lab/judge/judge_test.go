package judge

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

// t0 is the canned run's start; at(ms) is a time in it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// rec builds a canned audit record from JSON fields (seq, time in ms).
func rec(seq uint64, ms int, fields string) audit.Record {
	line := fmt.Sprintf(`{"seq":%d,"time":%q%s}`, seq, at(ms).Format(time.RFC3339Nano), fields)
	recs, err := audit.ReadRecords(strings.NewReader(line))
	if err != nil || len(recs) != 1 {
		panic(fmt.Sprintf("bad canned record %s: %v", line, err))
	}
	return recs[0]
}

func obs(id string, o attack.Outcome, startMS, endMS int) attack.Observation {
	return attack.Observation{ID: id, Observed: o, Detail: "canned " + string(o), Start: at(startMS), End: at(endMS)}
}

func approvedCanned(target string) bool { return target == "app" }

// cannedCatalogue has a control, attacks stopped at the gateway (with
// keys and rules) and one stopped in the worker.
func cannedCatalogue() []attack.Attempt {
	return []attack.Attempt{
		{ID: "ctl", Category: "control", Layer: attack.LayerControl, Expect: attack.Allowed, Audit: attack.AuditAllow, Aims: []string{"app"}},
		{ID: "meta", Category: "metadata", Layer: attack.LayerMetadata, Expect: attack.Blocked, Audit: attack.AuditDeny, Rule: "builtin:metadata", Aims: []string{"metadata"}, Keys: []string{"169.254.169.254:80"}},
		{ID: "meta2", Category: "ip-literal", Layer: attack.LayerMetadata, Expect: attack.Blocked, Audit: attack.AuditDeny, Rule: "builtin:metadata", Aims: []string{"metadata"}, Keys: []string{"169.254.169.254:80"}},
		{ID: "name", Category: "dns", Layer: attack.LayerDNS, Expect: attack.Blocked, Audit: attack.AuditDeny, Keys: []string{"dns:evil.test"}},
		{ID: "mixed", Category: "dns", Layer: attack.LayerResolve, Expect: attack.Blocked, Audit: attack.AuditRefused, Aims: []string{"loopback"}, Keys: []string{"mixed.ok.test:8080"}},
		{ID: "lo", Category: "local", Layer: attack.LayerNetns, Expect: attack.Blocked, Audit: attack.AuditNone, Aims: []string{"loopback"}},
	}
}

// goodRun is a canned run in which everything passes; each case below
// breaks one thing.
type cannedRun struct {
	obs  []attack.Observation
	recs []audit.Record
	hits []internet.Hit
}

func goodRun() cannedRun {
	return cannedRun{
		obs: []attack.Observation{
			obs("ctl", attack.Allowed, 0, 10),
			obs("meta", attack.Blocked, 20, 21),
			obs("name", attack.Blocked, 30, 31),
			obs("mixed", attack.Blocked, 40, 45),
			obs("lo", attack.Blocked, 50, 51),
			obs("meta2", attack.Blocked, 1200, 1201),
		},
		recs: []audit.Record{
			rec(1, -100, `,"event":"start","version":"dev"`),
			rec(2, 2, `,"event":"dns","qname":"app.test","qtype":"A","action":"allow","rule":"allow[0]"`),
			rec(3, 3, `,"event":"flow","action":"allow","proto":"tcp","src":"10.0.2.100:1000","dst":"198.18.0.1:80","host":"app.test","rule":"allow[0]"`),
			// The metadata denial lands just after the next attempt
			// started: the key puts it back.
			rec(4, 30, `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:1001","dst":"169.254.169.254:80","rule":"builtin:metadata"`),
			rec(5, 30, `,"event":"dns","qname":"evil.test","qtype":"A","action":"deny","rule":"default"`),
			// flow_end of the control's flow, written late: goes with its flow.
			rec(6, 35, `,"event":"flow_end","flow":3,"bytes_out":10,"bytes_in":20`),
			rec(7, 42, `,"event":"flow","action":"allow","proto":"tcp","src":"10.0.2.100:1002","dst":"198.18.0.5:8080","host":"mixed.ok.test","rule":"allow[1]","refused":["127.0.0.1"]`),
			rec(8, 1200, `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:1003","dst":"169.254.169.254:80","rule":"builtin:metadata"`),
			rec(9, 1300, `,"event":"exit","code":0`),
		},
		hits: []internet.Hit{
			{Time: at(4), Target: "app", Addr: internet.AppV4 + ":80/tcp"},
			{Time: at(43), Target: "mixed-public", Addr: internet.MixedV4 + ":8080/tcp"},
		},
	}
}

func judgeCanned(r cannedRun) Report {
	return Decide(cannedCatalogue(), r.obs, r.recs, r.hits, func(t string) bool { return t == "app" || t == "mixed-public" })
}

func resultOf(rep Report, id string) Result {
	for _, r := range rep.Results {
		if r.ID == id {
			return r
		}
	}
	panic("no result " + id)
}

func TestJudgeGoodRun(t *testing.T) {
	rep := judgeCanned(goodRun())
	if !rep.Pass {
		t.Fatalf("a clean run failed: %v", rep.Reasons)
	}
	for _, tc := range []struct {
		id   string
		seqs []uint64
		why  string
	}{
		{"ctl", []uint64{2, 3, 6}, "its DNS answer, its flow, and the flow_end that came later"},
		{"meta", []uint64{4}, "the denial written after the next attempt began is matched by key"},
		{"name", []uint64{5}, "the DNS denial in its own window"},
		{"mixed", []uint64{7}, "the allowed flow that lists the refused answer"},
		{"lo", []uint64{}, "the worker's own loopback leaves no record"},
		{"meta2", []uint64{8}, "the same key later goes to the later attempt"},
	} {
		if got := resultOf(rep, tc.id).AuditSeqs; !slices.Equal(got, tc.seqs) {
			t.Errorf("%s: audit seqs %v, want %v (%s)", tc.id, got, tc.seqs, tc.why)
		}
	}
	if len(rep.Unattributed) != 0 {
		t.Errorf("unattributed %v; start and exit are not anyone's and not stray", rep.Unattributed)
	}
	if r := resultOf(rep, "ctl"); len(r.Audit) != 3 || !json.Valid(r.Audit[0]) {
		t.Errorf("the control's raw records are not kept: %s", r.Audit)
	}
}

func TestJudgeFailures(t *testing.T) {
	for _, tc := range []struct {
		why    string
		change func(r *cannedRun)
		id     string // the attempt that must fail ("" : only the lab)
		want   string // in its Why (or in the lab's reasons)
	}{
		{"an attack got through", func(r *cannedRun) { r.obs[1].Observed = attack.Allowed }, "meta", "got through"},
		{"an unapproved target was hit though the attacker saw nothing", func(r *cannedRun) {
			r.hits = append(r.hits, internet.Hit{Time: at(20), Target: "metadata", Addr: internet.MetadataV4 + ":80/tcp"})
		}, "meta", "unapproved target metadata was hit 1 time(s)"},
		{"blocked but not audited", func(r *cannedRun) { r.recs = slices.Delete(r.recs, 4, 5) }, "name", "no deny record"},
		{"blocked by the wrong rule", func(r *cannedRun) {
			r.recs[3] = rec(4, 21, `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:1001","dst":"169.254.169.254:80","rule":"builtin:special-range"`)
		}, "meta", "no deny record carries rule builtin:metadata"},
		{"refused answers not recorded", func(r *cannedRun) {
			r.recs[6] = rec(7, 42, `,"event":"flow","action":"allow","proto":"tcp","src":"10.0.2.100:1002","dst":"198.18.0.5:8080","host":"mixed.ok.test","rule":"allow[1]"`)
		}, "mixed", "neither a denial nor the refused answers"},
		{"the control failed", func(r *cannedRun) { r.obs[0].Observed = attack.Blocked }, "ctl", "control failed"},
		{"the control's target saw nothing", func(r *cannedRun) { r.hits = r.hits[1:] }, "ctl", "saw no connection"},
		{"the control is not in the log", func(r *cannedRun) { r.recs = slices.Delete(r.recs, 2, 3) }, "ctl", "no allow flow record"},
		{"the attacker never reported an attempt", func(r *cannedRun) { r.obs = slices.Delete(r.obs, 4, 5) }, "lo", "did not report"},
		{"an attempt could not be carried out", func(r *cannedRun) { r.obs[4].Observed = attack.Errored }, "lo", "could not be carried out"},
		{"an unapproved hit between attempts", func(r *cannedRun) {
			r.hits = append(r.hits, internet.Hit{Time: at(5000), Target: "metadata", Addr: internet.MetadataV4 + ":80/tcp"})
		}, "", "hit outside every attempt"},
	} {
		t.Run(tc.why, func(t *testing.T) {
			r := goodRun()
			tc.change(&r)
			rep := judgeCanned(r)
			if rep.Pass {
				t.Fatalf("the lab passed")
			}
			if tc.id == "" {
				if !strings.Contains(strings.Join(rep.Reasons, "\n"), tc.want) {
					t.Errorf("reasons %q lack %q", rep.Reasons, tc.want)
				}
				return
			}
			res := resultOf(rep, tc.id)
			if res.Pass || !strings.Contains(res.Why, tc.want) {
				t.Errorf("%s: pass %v why %q, want a failure saying %q", tc.id, res.Pass, res.Why, tc.want)
			}
			for _, o := range rep.Results {
				if o.ID != tc.id && !o.Pass {
					t.Errorf("%s failed too: %s", o.ID, o.Why)
				}
			}
		})
	}
}

// TestJudgeAggregates: a denial folded by the audit logger's aggregation
// arrives a second later with a count; it belongs to the attempt that owns
// the key's last record, not to whatever runs when it is written.
func TestJudgeAggregates(t *testing.T) {
	cat := []attack.Attempt{
		{ID: "rebind", Category: "dns", Layer: attack.LayerResolve, Expect: attack.Blocked, Audit: attack.AuditDeny, Keys: []string{"rebind.ok.test:8080"}},
		{ID: "other", Category: "local", Layer: attack.LayerSpecial, Expect: attack.Blocked, Audit: attack.AuditDeny, Keys: []string{"10.0.2.2:8080"}},
	}
	deny := `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:%d","dst":"198.18.0.9:8080","host":"rebind.ok.test","rule":"builtin:special-range"%s`
	recs := []audit.Record{
		rec(1, 100, fmt.Sprintf(deny, 1, "")),
		rec(2, 2600, `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:3","dst":"10.0.2.2:8080","rule":"builtin:special-range"`),
		rec(3, 2700, fmt.Sprintf(deny, 2, `,"count":1`)),
	}
	rep := Decide(cat, []attack.Observation{obs("rebind", attack.Blocked, 0, 2500), obs("other", attack.Blocked, 2550, 2560)}, recs, nil, approvedCanned)
	if !rep.Pass {
		t.Fatalf("failed: %v", rep.Reasons)
	}
	if got := resultOf(rep, "rebind").AuditSeqs; !slices.Equal(got, []uint64{1, 3}) {
		t.Errorf("rebind got %v, want [1 3]", got)
	}
	if got := resultOf(rep, "other").AuditSeqs; !slices.Equal(got, []uint64{2}) {
		t.Errorf("other got %v, want [2]", got)
	}
}

func TestKeysMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, key string
		want         bool
		why          string
	}{
		{"169.254.169.254:80", "169.254.169.254:80", true, "exact"},
		{"169.254.169.254:80", "169.254.169.254:8080", false, "another port"},
		{"dns:*.exfil.test", "dns:abc.exfil.test", true, "wildcard below the zone"},
		{"dns:*.exfil.test", "dns:exfil.test", false, "not the zone itself"},
		{"dns:*.exfil.test", "dns:abcexfil.test", false, "not a suffix without a dot"},
		{"dns:*.exfil.test", "abc.exfil.test:80", false, "only DNS keys"},
	} {
		if got := keysMatch([]string{tc.pattern}, []string{tc.key}); got != tc.want {
			t.Errorf("%s vs %s: %v, want %v (%s)", tc.pattern, tc.key, got, tc.want, tc.why)
		}
	}
	r := rec(1, 0, `,"event":"flow","action":"deny","proto":"udp","src":"10.0.2.100:5","dst":"198.18.0.1:443","host":"App.Test","rule":"default"`)
	if got := recordKeys(r); !slices.Equal(got, []string{"198.18.0.1:443/udp", "app.test:443/udp"}) {
		t.Errorf("udp name flow keys %v", got)
	}
	if got := recordKeys(rec(2, 0, `,"event":"dns","qname":"2852039166.","qtype":"A","action":"deny","rule":"default"`)); !slices.Equal(got, []string{"dns:2852039166"}) {
		t.Errorf("dns keys %v", got)
	}
	if got := recordKeys(rec(3, 0, `,"event":"flow","action":"allow","dst":"1.2.3.4:5"`)); got != nil {
		t.Errorf("allowed flows have no keys: %v", got)
	}
}

// TestJudgeSetupHits: an attack's own approved set-up (SetupHits hits of
// its first aim) does not count against it; one hit more does.
func TestJudgeSetupHits(t *testing.T) {
	cat := []attack.Attempt{{ID: "second", Category: "l7", Layer: attack.LayerL7, Expect: attack.Blocked,
		Audit: attack.AuditDeny, Aims: []string{"app-udp"}, SetupHits: 1}}
	recs := []audit.Record{rec(1, 5, `,"event":"l7","action":"deny","flow":1,"host":"quic.test","reason":"sni does not match"`)}
	hit := func(ms int) internet.Hit {
		return internet.Hit{Time: at(ms), Target: "app-udp", Addr: "203.0.113.20:443/udp"}
	}
	for _, tc := range []struct {
		hits []internet.Hit
		pass bool
	}{
		{[]internet.Hit{hit(2)}, true},
		{[]internet.Hit{hit(2), hit(6)}, false},
	} {
		rep := Decide(cat, []attack.Observation{obs("second", attack.Blocked, 0, 10)}, recs, tc.hits, approvedCanned)
		if rep.Pass != tc.pass {
			t.Errorf("%d hits: pass %v, want %v (%v)", len(tc.hits), rep.Pass, tc.pass, rep.Reasons)
		}
	}
}

// TestJudgeFoldedFlowL7: when the audit log folds a second allowed flow
// into the first one's record (more than its burst of records in a
// window), the second flow's l7 and flow_end records name the first
// flow's seq. They belong to the attempt whose window they fall in, not
// to the attempt that owns that seq: a flake of the lab's run once judged
// l7-alert-before-hello "blocked, but the audit log has no deny record".
func TestJudgeFoldedFlowL7(t *testing.T) {
	cat := []attack.Attempt{
		{ID: "first", Category: "l7", Layer: attack.LayerL7, Expect: attack.Blocked, Audit: attack.AuditDeny, Keys: []string{"sni:unapproved.test"}},
		{ID: "second", Category: "l7", Layer: attack.LayerL7, Expect: attack.Blocked, Audit: attack.AuditDeny},
	}
	flow := `,"event":"flow","action":"allow","proto":"tcp","src":"10.0.2.100:%d","dst":"198.18.0.1:443","host":"app.test","upstream":"203.0.113.10:443","rule":"allow[0]"%s`
	recs := []audit.Record{
		rec(1, 10, fmt.Sprintf(flow, 1000, "")),
		rec(2, 11, `,"event":"l7","action":"deny","flow":1,"host":"app.test","sni":"unapproved.test","reason":"sni does not match"`),
		rec(3, 12, `,"event":"flow_end","flow":1,"error":"l7 check refused the flow"`),
		// The second attempt's flow was folded into record 1: its l7
		// deny names flow 1.
		rec(4, 110, `,"event":"l7","action":"deny","flow":1,"host":"app.test","reason":"tls: first record is not a handshake record"`),
		rec(5, 1010, fmt.Sprintf(flow, 1001, `,"count":1,"flow":1`)),
	}
	rep := Decide(cat, []attack.Observation{obs("first", attack.Blocked, 0, 50), obs("second", attack.Blocked, 100, 150)}, recs, nil, approvedCanned)
	if got := resultOf(rep, "second").AuditSeqs; !slices.Contains(got, 4) {
		t.Errorf("second got %v, want its l7 deny (4) among them", got)
	}
	if got := resultOf(rep, "first").AuditSeqs; slices.Contains(got, 4) {
		t.Errorf("first got %v: the second attempt's l7 deny (4) among them", got)
	}
	if !rep.Pass {
		t.Fatalf("failed: %v", rep.Reasons)
	}
}

// TestAcceptDegraded: an attack that only a layer stops (Needs), which got
// through where nsgate said at start that layer was not in force, names
// the layer; it passes only when the operator expected that layer
// degraded. An attack through a layer nsgate did not declare still fails.
func TestAcceptDegraded(t *testing.T) {
	cat := []attack.Attempt{
		{ID: "quota", Category: "containment", Layer: "quota", Expect: attack.Blocked, Audit: attack.AuditNone, NoRecord: "none", Needs: "namespace-quota"},
		{ID: "other", Category: "containment", Layer: "view", Expect: attack.Blocked, Audit: attack.AuditNone, NoRecord: "none"},
	}
	recs := []audit.Record{
		rec(1, -100, `,"event":"start","version":"dev","degraded":["proc"]`),
		rec(2, -90, `,"event":"policy","action":"degraded","error":"not in force: namespace-quota","layers":["namespace-quota"]`),
	}
	run := func(o []attack.Observation, expected []string) Report {
		rep := Decide(cat, o, recs, nil, approvedCanned)
		AcceptDegraded(&rep, cat, DeclaredDegraded(recs), expected)
		return rep
	}
	through := []attack.Observation{obs("quota", attack.Allowed, 0, 10), obs("other", attack.Blocked, 20, 30)}
	if d := DeclaredDegraded(recs); !slices.Equal(d, []string{"proc", "namespace-quota"}) {
		t.Fatalf("declared %v", d)
	}
	rep := run(through, nil)
	if q := resultOf(rep, "quota"); rep.Pass || q.Pass || q.Degraded != "namespace-quota" || !strings.Contains(q.Why, "--expect-degraded namespace-quota") {
		t.Fatalf("not expected: pass %v, result %+v; want a failure naming the layer and the flag", rep.Pass, q)
	}
	rep = run(through, []string{"namespace-quota"})
	if q := resultOf(rep, "quota"); !rep.Pass || !q.Pass || q.Degraded != "namespace-quota" || len(rep.Reasons) != 0 {
		t.Fatalf("expected: pass %v, reasons %v, result %+v; want it accepted and named", rep.Pass, rep.Reasons, q)
	}
	// The other attack getting through is not excused by the flag.
	rep = run([]attack.Observation{obs("quota", attack.Allowed, 0, 10), obs("other", attack.Allowed, 20, 30)}, []string{"namespace-quota", "proc"})
	if o := resultOf(rep, "other"); rep.Pass || o.Pass || o.Degraded != "" {
		t.Fatalf("an attack with no Needs got through: pass %v, result %+v; want a failure", rep.Pass, o)
	}
	// Not declared degraded: expecting it changes nothing.
	rep = Decide(cat, through, nil, nil, approvedCanned)
	AcceptDegraded(&rep, cat, nil, []string{"namespace-quota"})
	if q := resultOf(rep, "quota"); rep.Pass || q.Pass || q.Degraded != "" {
		t.Fatalf("undeclared: pass %v, result %+v; want a failure", rep.Pass, q)
	}
}
