package judge

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

// FillRun is what the lab saw of the fill attempt's `nsgate run` of its
// own, whose audit log lies on a small volume.
type FillRun struct {
	Started, Ended time.Time
	// Obs are the attacker's observations (progress reports included).
	Obs []attack.Observation
	// ExitCode and Stderr are nsgate run's exit status and the tail of
	// its standard error (its own lines and the worker's).
	ExitCode int
	Stderr   string
	// Copy is the evidence copy of the log nsgate wrote, with its head
	// file next to it; VolumeSize the size of the volume in bytes.
	Copy       string
	VolumeSize int
	// Err says why the run could not be made.
	Err error
}

// auditFailLines are the lines of stderr that report the audit failure:
// the log failed, or it was full (it could no longer keep the reserve for
// its closing records, docs/audit.md).
func auditFailLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "audit log failed") || strings.HasPrefix(strings.TrimSpace(l), "nsgate: audit log full:") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// nonEmptyLines are the lines of s that hold anything but spaces.
func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// AuditFill judges the fill attempt (attack.PhaseAuditFill) on its run of
// its own: the worker saw
// the refusal (the resolver's REFUSED, a refused flow, or nsgate ending it
// mid-flood); the unapproved server saw nothing and app.test no connection
// the log does not hold; nsgate exited 125 with one line naming the
// audit failure; and the records it wrote verify with the key against
// their head file.
func AuditFill(at attack.Attempt, fr *FillRun, hits []internet.Hit, key []byte) Result {
	res := Result{
		ID: at.ID, Category: at.Category, Layer: at.Layer, Description: at.Description,
		Expected: at.Expect, AuditSeqs: []uint64{}, Audit: []json.RawMessage{}, Hits: []internet.Hit{},
		Start: fr.Started, End: fr.Ended,
	}
	fail := func(why string) Result {
		res.Why = why
		return res
	}
	if fr.Err != nil {
		res.Observed, res.Detail = attack.Errored, fr.Err.Error()
		return fail("could not be carried out: " + fr.Err.Error())
	}
	var last *attack.Observation
	for i := range fr.Obs {
		if fr.Obs[i].ID == at.ID {
			last = &fr.Obs[i]
		}
	}
	lines := auditFailLines(fr.Stderr)
	stopped := fr.ExitCode == 125 && len(lines) == 1
	switch {
	case last == nil:
		res.Observed, res.Detail = attack.Errored, "the worker reported nothing (nsgate run exited "+strconv.Itoa(fr.ExitCode)+": "+FirstLines(fr.Stderr, 3)+")"
	case last.Partial && stopped:
		res.Observed, res.Detail = attack.Blocked, last.Detail+"; then nsgate stopped the worker: "+lines[0]
	case last.Partial:
		res.Observed, res.Detail = attack.Errored, "the worker was ended while it "+last.Detail+" (nsgate run exited "+strconv.Itoa(fr.ExitCode)+")"
	default:
		res.Observed, res.Detail = last.Observed, last.Detail
	}
	// The fake targets, during the fill run.
	apps, others := 0, 0
	for _, hh := range hits {
		if hh.Time.Before(fr.Started) || hh.Time.After(fr.Ended) {
			continue
		}
		res.Hits = append(res.Hits, hh)
		switch hh.Target {
		case "app":
			apps++
		case "unapproved":
			others++
		}
	}
	// The records written.
	s, verr := audit.Check(fr.Copy, key, "")
	recs, _ := audit.ReadRecordsFile(fr.Copy)
	allowed := 0
	for _, r := range recs {
		if r.Name == "flow" && r.Action() == "allow" {
			allowed += max(1, int(r.Count()))
		}
	}
	denied := 0
	for _, r := range recs {
		if d, ok := r.Event.(audit.DNS); ok && d.Action == "deny" && strings.HasSuffix(strings.TrimSuffix(d.QName, "."), "."+attack.FloodZone) {
			denied++
		}
	}
	res.HostCheck = fmt.Sprintf("%s: the unapproved server saw %d connection(s) and app.test %d (the log holds %d allowed flow(s)); nsgate run exited %d", at.HostCheck, others, apps, allowed, fr.ExitCode)
	if len(lines) > 0 {
		res.HostCheck += " saying " + strconv.Quote(lines[0])
	}
	all := nonEmptyLines(fr.Stderr)
	if len(all) != len(lines) {
		res.HostCheck += fmt.Sprintf(" (its standard error, with the worker's, has %d lines: %s)", len(all), LastLines(fr.Stderr, 5))
	}
	if verr == nil {
		res.Evidence = fmt.Sprintf("the log on the %d KiB volume (copied to %s): %d records, %d of them refused %s names, MACs checked %v, anchored by its head file %v, closed %v",
			fr.VolumeSize>>10, filepath.Base(fr.Copy), s.Records, denied, attack.FloodZone, s.MACsChecked, s.Anchor != "" && s.Anchor == s.Head, s.Closed)
	}
	var why []string
	if res.Observed == attack.Errored {
		return fail("could not be carried out: " + res.Detail)
	}
	if res.Observed != attack.Blocked {
		why = append(why, "got through: "+res.Detail)
	}
	if others > 0 {
		why = append(why, fmt.Sprintf("unapproved target unapproved was hit %d time(s)", others))
	}
	if apps > allowed {
		why = append(why, fmt.Sprintf("app.test saw %d connection(s) but the log holds %d allowed flow(s): a flow went unrecorded", apps, allowed))
	}
	if len(why) > 0 {
		return fail(strings.Join(why, "; "))
	}
	switch {
	case fr.ExitCode != 125:
		return fail(fmt.Sprintf("blocked, but nsgate run exited %d, not 125 (stderr: %s)", fr.ExitCode, LastLines(fr.Stderr, 3)))
	case len(lines) != 1:
		return fail(fmt.Sprintf("blocked, but nsgate said %d lines naming the audit failure, not one: %q", len(lines), lines))
	case len(all) != 1:
		return fail(fmt.Sprintf("blocked, but nsgate's standard error has %d lines, not just the one naming the audit failure: %s", len(all), LastLines(fr.Stderr, 5)))
	case !strings.Contains(lines[0], "no space left on device"):
		return fail("blocked, but nsgate's line does not name the full volume: " + lines[0])
	case verr != nil:
		return fail("blocked, but the records nsgate wrote do not verify: " + verr.Error())
	case !s.MACsChecked || s.Anchor == "" || s.Anchor != s.Head:
		return fail(fmt.Sprintf("blocked, but the log was not checked with its key against its head file (macs %v, anchor %q, head %s)", s.MACsChecked, s.Anchor, s.Head))
	case denied == 0:
		return fail("blocked, but the log holds none of the flood's refused names")
	}
	res.Pass = true
	return res
}

// LastLines joins the last n lines of s with " / ": a process's output as
// one line of evidence.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// FirstLines joins the first n lines of s with " / ".
func FirstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " / ")
}
