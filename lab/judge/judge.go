package judge

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

// Result is the verdict on one attempt, as the evidence records it.
type Result struct {
	ID          string         `json:"id"`
	Category    string         `json:"category"`
	Layer       string         `json:"layer"`
	Description string         `json:"description"`
	Control     bool           `json:"control"`
	Expected    attack.Outcome `json:"expected"`
	Observed    attack.Outcome `json:"observed"`
	Pass        bool           `json:"pass"`
	Why         string         `json:"why,omitempty"` // why it failed
	Detail      string         `json:"detail"`        // what the attacker saw
	Start       time.Time      `json:"start"`
	End         time.Time      `json:"end"`
	// AuditSeqs are the seqs of the audit records attributed to the
	// attempt, ascending; Audit are those records as written.
	AuditSeqs []uint64          `json:"audit_seqs"`
	Audit     []json.RawMessage `json:"audit"`
	// Hits are the fake targets' hits during the attempt.
	Hits []internet.Hit `json:"target_hits"`
	// HostCheck is what the lab checked on the host after the run and
	// what it found (Attempt.HostCheck).
	HostCheck string `json:"host_check,omitempty"`
	// Evidence says what stands for an audit record where none exists by
	// design (Attempt.NoRecord), or what the attempt's own log showed.
	Evidence string `json:"evidence,omitempty"`
	// Degraded names the layer (Attempt.Needs) that nsgate said at start
	// was not in force, through which the attack got (AcceptDegraded).
	Degraded string `json:"degraded,omitempty"`
	// Decision is the audit record that carries nsgate's decision on the
	// attempt, with its rule and reason; absent when no attributed record
	// does (see decisionOf).
	Decision *Decision `json:"decision,omitempty"`
	// Screenshot is the PNG of what the browser agent saw, relative to
	// the evidence directory (attack.Observation.Screenshot).
	Screenshot string `json:"screenshot,omitempty"`
}

// Report is the outcome of Decide.
type Report struct {
	Results []Result
	// Pass is true when every attempt passed and no unapproved target
	// was hit outside an attempt.
	Pass bool
	// Reasons say why the lab failed, one line each.
	Reasons []string
	// StrayHits are unapproved hits outside every attempt's window.
	StrayHits []internet.Hit
	// Unattributed are the seqs of audit records (other than start,
	// exit and policy) that no attempt claimed.
	Unattributed []uint64
}

// keyReach bounds how long after an attempt's start a deny record can be
// attributed to it by key.
const keyReach = 5 * time.Second

// lastWindowGrace is how long after the last attempt's end its records
// and hits still count as its own.
const lastWindowGrace = 2 * time.Second

// Decide decides every attempt of cat from what the attacker reported
// (obs), what the audit log holds (recs) and what the fake targets saw
// (hits; approved says which targets the policy approves).
//
// Attribution: attempts ran one at a time; an attempt's window runs from
// its start to the next attempt's start (the last one's to its end plus
// two seconds). A deny record belongs to the latest attempt started
// before it (by up to five seconds) whose Keys match it: the gateway
// writes a denial just after the worker sees the refusal, sometimes when
// the next attempt has begun. An aggregate record (count > 0, written at
// the end of the audit log's aggregation window) belongs to the attempt
// that owns the latest record with the same aggregation key; a flow_end or
// l7 record belongs with its flow record, unless the log folded other
// flows into that record (then it goes by its time). Every other record,
// and every hit, belongs to the window its time falls in.
//
// An attack passes when it was observed blocked, no unapproved target was
// hit in its window, and its audit expectation (and rule, if any) is met.
// A control passes when it was observed allowed, its first aim was hit in
// its window and the log has its allowed flow.
func Decide(cat []attack.Attempt, obs []attack.Observation, recs []audit.Record, hits []internet.Hit, approved func(string) bool) Report {
	return DecideHost(cat, obs, recs, hits, approved, nil)
}

// DecideHost is Decide with the results of the lab's host checks (by
// attempt ID): an attempt with a host check (Attempt.HostCheck) passes
// only if its check was made and found nothing wrong. A control with a
// host check and no Aims is judged on the check instead of a target's hit
// and an allow record.
func DecideHost(cat []attack.Attempt, obs []attack.Observation, recs []audit.Record, hits []internet.Hit, approved func(string) bool, host map[string]attack.HostResult) Report {
	type win struct {
		start, end time.Time
		idx        int // index into results
	}
	byID := make(map[string]attack.Observation, len(obs))
	for _, o := range obs {
		byID[o.ID] = o
	}
	results := make([]Result, len(cat))
	var wins []win
	for i, at := range cat {
		results[i] = Result{
			ID: at.ID, Category: at.Category, Layer: at.Layer, Description: at.Description,
			Control: at.Control(), Expected: at.Expect, AuditSeqs: []uint64{}, Audit: []json.RawMessage{}, Hits: []internet.Hit{},
		}
		o, ok := byID[at.ID]
		if !ok {
			results[i].Observed = attack.Errored
			results[i].Detail = "the attacker did not report this attempt"
			continue
		}
		results[i].Observed, results[i].Detail, results[i].Start, results[i].End = o.Observed, o.Detail, o.Start, o.End
		results[i].Screenshot = o.Screenshot
		wins = append(wins, win{start: o.Start, end: o.End, idx: i})
	}
	sort.SliceStable(wins, func(a, b int) bool { return wins[a].start.Before(wins[b].start) })
	for i := range wins {
		if i+1 < len(wins) {
			wins[i].end = wins[i+1].start
		} else {
			wins[i].end = wins[i].end.Add(lastWindowGrace)
		}
	}
	// windowOf returns the result index whose window holds t, or -1.
	windowOf := func(t time.Time) int {
		j := sort.Search(len(wins), func(k int) bool { return wins[k].start.After(t) }) - 1
		if j < 0 || !t.Before(wins[j].end) {
			return -1
		}
		return wins[j].idx
	}

	owner := make(map[uint64]int) // seq -> result index
	mine := make([][]audit.Record, len(results))
	attach := func(i int, r audit.Record) {
		owner[r.Seq] = i
		mine[i] = append(mine[i], r)
	}
	// byKey returns the result index of the latest attempt that started
	// before r and has a key matching one of r's, within keyReach.
	byKey := func(r audit.Record) int {
		rk := recordKeys(r)
		if len(rk) == 0 {
			return -1
		}
		best := -1
		for _, w := range wins {
			if w.start.After(r.Time) || r.Time.Sub(w.start) > keyReach {
				continue
			}
			if !keysMatch(cat[w.idx].Keys, rk) {
				continue
			}
			if best < 0 || w.start.After(results[best].Start) {
				best = w.idx
			}
		}
		return best
	}
	// folded are the allowed flow records that stand for more than one
	// flow: the audit log folded later flows of the same key into them
	// (its burst of records in a window was spent) and wrote an aggregate
	// naming them. The l7 and flow_end records that name such a flow may
	// be any of those flows', so they go by their time, not their flow.
	folded := make(map[uint64]bool)
	for _, r := range recs {
		if r.Name == "flow" && r.Count() > 0 && r.FlowSeq() != 0 {
			folded[r.FlowSeq()] = true
		}
	}
	var rep Report
	var later []audit.Record
	for _, r := range recs {
		switch {
		case r.Name == "start" || r.Name == "exit" || r.Name == "policy":
			continue
		case r.Name == "flow_end" || r.Name == "l7" || r.Count() > 0:
			later = append(later, r)
			continue
		}
		if i := byKey(r); i >= 0 {
			attach(i, r)
		} else if i := windowOf(r.Time); i >= 0 {
			attach(i, r)
		} else {
			rep.Unattributed = append(rep.Unattributed, r.Seq)
		}
	}
	for _, r := range later {
		i := -1
		switch {
		case r.Count() > 0:
			if i = latestWithKey(recs, owner, r); i < 0 {
				i = byKey(r)
			}
		case r.FlowSeq() != 0 && folded[r.FlowSeq()]:
			if i = windowOf(r.Time); i < 0 {
				if o, ok := owner[r.FlowSeq()]; ok {
					i = o
				}
			}
		case r.FlowSeq() != 0:
			if o, ok := owner[r.FlowSeq()]; ok {
				i = o
			}
		}
		if i < 0 {
			i = windowOf(r.Time)
		}
		if i >= 0 {
			attach(i, r)
		} else {
			rep.Unattributed = append(rep.Unattributed, r.Seq)
		}
	}
	for i, at := range cat {
		if at.Audit == attack.AuditNone && at.NoRecord != "" {
			results[i].Evidence = at.NoRecord
		}
		if hr, ok := host[at.ID]; ok {
			results[i].HostCheck = at.HostCheck + ": " + hr.Detail
		} else if at.CheckHost == nil {
			results[i].HostCheck = at.HostCheck // says there is nothing to check
		}
	}
	for i := range results {
		sort.Slice(mine[i], func(a, b int) bool { return mine[i][a].Seq < mine[i][b].Seq })
		for _, r := range mine[i] {
			results[i].AuditSeqs = append(results[i].AuditSeqs, r.Seq)
			results[i].Audit = append(results[i].Audit, r.Raw)
		}
		results[i].Decision = decisionOf(cat[i], mine[i])
	}
	for _, h := range hits {
		if i := windowOf(h.Time); i >= 0 {
			results[i].Hits = append(results[i].Hits, h)
		} else if !approved(h.Target) {
			rep.StrayHits = append(rep.StrayHits, h)
		}
	}

	rep.Pass = true
	for i, at := range cat {
		res := &results[i]
		hr, checked := host[at.ID]
		res.Why = judgeOne(at, res, mine[i], approved, hostVerdict(at, hr, checked))
		res.Pass = res.Why == ""
		if !res.Pass {
			rep.Pass = false
			rep.Reasons = append(rep.Reasons, res.ID+": "+res.Why)
		}
	}
	if len(rep.StrayHits) > 0 {
		rep.Pass = false
		for _, h := range rep.StrayHits {
			rep.Reasons = append(rep.Reasons, fmt.Sprintf("unapproved target %s (%s) was hit outside every attempt at %s", h.Target, h.Addr, h.Time.Format(time.RFC3339Nano)))
		}
	}
	rep.Results = results
	return rep
}

// latestWithKey finds the attempt that owns the latest record before agg
// with agg's aggregation key.
func latestWithKey(recs []audit.Record, owner map[uint64]int, agg audit.Record) int {
	k := aggKey(agg)
	if k == "" {
		return -1
	}
	best, bestSeq := -1, uint64(0)
	for _, r := range recs {
		if r.Seq >= agg.Seq || r.Count() > 0 || aggKey(r) != k {
			continue
		}
		if i, ok := owner[r.Seq]; ok && r.Seq > bestSeq {
			best, bestSeq = i, r.Seq
		}
	}
	return best
}

// hostVerdict says why the attempt's host check failed or is missing, or
// "" (also for an attempt without one).
func hostVerdict(at attack.Attempt, hr attack.HostResult, checked bool) string {
	switch {
	case at.CheckHost == nil:
		return ""
	case !checked:
		return "the lab made no host check for it"
	case !hr.OK:
		return "the host check failed: " + hr.Detail
	}
	return ""
}

// judgeOne returns why the attempt failed, or "". hostWhy is what its
// host check found wrong ("" when nothing, or it has none).
func judgeOne(at attack.Attempt, res *Result, recs []audit.Record, approved func(string) bool, hostWhy string) string {
	if res.Observed == attack.Errored {
		return "could not be carried out: " + res.Detail
	}
	if at.Control() {
		if res.Observed != attack.Allowed {
			return "control failed: " + res.Detail
		}
		if hostWhy != "" {
			return "control succeeded in the worker, but " + hostWhy
		}
		if len(at.Aims) == 0 && at.CheckHost != nil {
			return ""
		}
		if len(at.Aims) > 0 && !slices.ContainsFunc(res.Hits, func(h internet.Hit) bool { return h.Target == at.Aims[0] }) {
			return "control got an answer but target " + at.Aims[0] + " saw no connection"
		}
		if !slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Name == "flow" && r.Action() == "allow" }) {
			return "control succeeded but the audit log has no allow flow record for it"
		}
		return ""
	}
	var why []string
	if res.Observed != attack.Blocked {
		why = append(why, "got through: "+res.Detail)
	}
	hit := map[string]int{}
	var order []string
	setup := at.SetupHits
	for _, h := range res.Hits {
		if approved(h.Target) {
			continue
		}
		if setup > 0 && h.Target == at.Aims[0] {
			setup--
			continue
		}
		if hit[h.Target] == 0 {
			order = append(order, h.Target)
		}
		hit[h.Target]++
	}
	for _, t := range order {
		why = append(why, fmt.Sprintf("unapproved target %s was hit %d time(s)", t, hit[t]))
	}
	if hostWhy != "" {
		why = append(why, hostWhy)
	}
	if len(why) > 0 {
		return strings.Join(why, "; ")
	}
	if w := auditMissing(at, recs); w != "" {
		return w
	}
	return ""
}

// auditMissing checks the attempt's audit expectation.
func auditMissing(at attack.Attempt, recs []audit.Record) string {
	isDeny := func(r audit.Record) bool { return r.Action() == "deny" }
	switch at.Audit {
	case attack.AuditDeny:
		if !slices.ContainsFunc(recs, isDeny) {
			return "blocked, but the audit log has no deny record for it"
		}
	case attack.AuditRefused:
		if !slices.ContainsFunc(recs, func(r audit.Record) bool {
			f, ok := r.Event.(audit.Flow)
			return isDeny(r) || ok && f.Action == "allow" && len(f.Refused) > 0
		}) {
			return "blocked, but the audit log records neither a denial nor the refused answers"
		}
	}
	if at.Rule != "" && at.Audit != attack.AuditNone {
		if !slices.ContainsFunc(recs, func(r audit.Record) bool { return isDeny(r) && r.Rule() == at.Rule }) {
			var rules []string
			for _, r := range recs {
				if isDeny(r) && !slices.Contains(rules, r.Rule()) {
					rules = append(rules, r.Rule())
				}
			}
			return fmt.Sprintf("blocked, but no deny record carries rule %s (deny rules seen: %s)", at.Rule, strings.Join(rules, ", "))
		}
	}
	return ""
}

// RequireKeyedDenials fails every attack of rep whose attributed deny
// records do not include one matching its Keys. A browser makes denied
// requests of its own (Chromium looks up update servers at start), so a
// deny record of any kind in an attempt's window does not say that the
// gateway refused what the attempt tried.
func RequireKeyedDenials(cat []attack.Attempt, rep *Report) {
	byID := make(map[string]attack.Attempt, len(cat))
	for _, at := range cat {
		byID[at.ID] = at
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		at, ok := byID[res.ID]
		if !ok || at.Control() || len(at.Keys) == 0 || !res.Pass {
			continue
		}
		found := false
		for _, raw := range res.Audit {
			if r, err := audit.ParseRecord(raw); err == nil && keysMatch(at.Keys, recordKeys(r)) {
				found = true
				break
			}
		}
		if !found {
			res.Pass = false
			res.Why = "blocked, but no deny record for " + strings.Join(at.Keys, " or ") + " is attributed to it"
			rep.Pass = false
			rep.Reasons = append(rep.Reasons, res.ID+": "+res.Why)
		}
	}
}

// DeclaredDegraded returns the layers the audit log says were asked for
// but not in force: those of its start records and of its policy records
// with action "degraded" (the layers init could not apply).
func DeclaredDegraded(recs []audit.Record) []string {
	var out []string
	add := func(ds []string) {
		for _, d := range ds {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	for _, r := range recs {
		switch e := r.Event.(type) {
		case audit.Start:
			add(e.Degraded)
		case audit.Policy:
			if e.Action == "degraded" {
				add(e.Layers)
			}
		}
	}
	return out
}

// AcceptDegraded revisits the attacks of rep that got through where the
// one layer that stops them (Attempt.Needs) is among declared, the layers
// nsgate said at start were not in force. Each such result names the
// layer (Result.Degraded). If the layer is also in expected (the
// operator's `--expect-degraded`), the result passes, saying why, and
// leaves rep.Reasons; otherwise its reason says how to acknowledge it.
// Nothing else changes: an attack that got through a layer in force, or
// one whose layer nsgate did not declare, fails as before.
func AcceptDegraded(rep *Report, cat []attack.Attempt, declared, expected []string) {
	needs := make(map[string]string, len(cat))
	for _, at := range cat {
		if at.Needs != "" {
			needs[at.ID] = at.Needs
		}
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		layer := needs[res.ID]
		if res.Pass || res.Control || layer == "" || res.Observed != attack.Allowed || !slices.Contains(declared, layer) {
			continue
		}
		res.Degraded = layer
		old := res.ID + ": " + res.Why
		if slices.Contains(expected, layer) {
			res.Pass = true
			res.Why = ""
			res.Evidence = "got through, as expected here: nsgate said at start that " + layer + " is not in force, and --expect-degraded " + layer + " acknowledged it (" + res.Detail + ")"
			rep.Reasons = slices.DeleteFunc(rep.Reasons, func(r string) bool { return r == old })
			continue
		}
		res.Why += " (nsgate said at start that " + layer + " is not in force here; nsgate lab --expect-degraded " + layer + " acknowledges that)"
		if j := slices.Index(rep.Reasons, old); j >= 0 {
			rep.Reasons[j] = res.ID + ": " + res.Why
		}
	}
	rep.Pass = len(rep.Reasons) == 0
	for _, r := range rep.Results {
		rep.Pass = rep.Pass && r.Pass
	}
}
