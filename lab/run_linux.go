package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/judge"
	"github.com/nsgate/nsgate/lab/sealed"
	"github.com/nsgate/nsgate/policy"
)

// Exit statuses of Run (and `nsgate lab`).
const (
	ExitPass  = 0 // every attack blocked, every control succeeded
	ExitFail  = 1 // an attack got through, a control failed, or evidence is missing
	ExitError = 2 // the lab could not run (no namespaces, gateway did not start, bad flags)
)

// Config configures Run.
type Config struct {
	// Self is the nsgate executable: it is run as `Self run ... -- Self
	// AttackArgs...`.
	Self string
	// AttackArgs make Self the attacker (e.g. ["__attack"]).
	AttackArgs []string
	// Version is nsgate's version, for the evidence.
	Version string
	// Evidence is the evidence directory (created if missing; an older
	// run's evidence.json, evidence.md and audit.jsonl in it are
	// replaced).
	Evidence string
	// Break disables one layer (see BreakLayers); "" for none.
	Break string
	// Only restricts the run to these attempt IDs (testing the lab).
	Only []string
	// Stdout receives the table, Stderr the progress lines.
	Stdout, Stderr io.Writer
	// Timeout bounds the whole gateway run (default 5 minutes).
	Timeout time.Duration
	// Browser, when set, is a headless Chromium to run the browser
	// attempts with (BrowserAttempts), after the attacker, under a second
	// `nsgate run` that appends to the same audit log.
	Browser string
	// ExpectDegraded are layers the operator knows nsgate cannot put in
	// force here (a pod's read-only /proc/sys: namespace-quota): an attack
	// that only that layer stops, and that got through where nsgate said
	// so at start, passes, saying why (judge.AcceptDegraded).
	ExpectDegraded []string
}

// Run runs the lab in this process's sealed network namespace: it builds
// the fake internet, runs the attacker under `nsgate run` with the lab
// policy, judges every attempt, writes the evidence and prints the table.
// With cfg.Browser it runs the browser attempts after the attacker
// (runBrowser) and judges them on their own part of the audit log.
// It refuses to run outside a namespace made by sealed.Enter. It returns
// ExitPass, ExitFail or ExitError; on ExitError it has said why on
// Stderr.
func Run(ctx context.Context, cfg Config) int {
	errorf := func(format string, args ...any) int {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: "+format+"\n", args...)
		return ExitError
	}
	seal, ok := sealed.Current()
	if !ok {
		return errorf("not in a sealed network namespace (nsgate lab makes one itself)")
	}
	if err := sealed.Check(); err != nil {
		return errorf("refusing to run: %v", err)
	}
	cat := attack.Catalogue()
	if len(cfg.Only) > 0 {
		var sel []attack.Attempt
		for _, id := range cfg.Only {
			at, ok := attack.Find(id)
			if !ok {
				return errorf("--only: unknown attempt %q", id)
			}
			sel = append(sel, at)
		}
		cat = sel
	}
	// The attempts that need a run of their own (Attempt.Phase) leave the
	// main run's list.
	var fill, race *attack.Attempt
	var socks []attack.Attempt // PhaseSessionBus, PhaseEngineSocket
	var paths []attack.Attempt // PhaseHostPaths
	var creds []attack.Attempt // PhaseCredentials
	for i := 0; i < len(cat); i++ {
		if cat[i].Phase == attack.PhaseAuditFill {
			at := cat[i]
			fill = &at
		}
		if cat[i].Phase == attack.PhaseInitRace {
			at := cat[i]
			race = &at
		}
		if cat[i].Phase == attack.PhaseSessionBus || cat[i].Phase == attack.PhaseEngineSocket || cat[i].Phase == attack.PhaseSocketSweep {
			socks = append(socks, cat[i])
		}
		if cat[i].Phase == attack.PhaseHostPaths {
			paths = append(paths, cat[i])
		}
		if cat[i].Phase == attack.PhaseCredentials {
			creds = append(creds, cat[i])
		}
		if cat[i].Phase != "" {
			cat = append(cat[:i:i], cat[i+1:]...)
			i--
		}
	}
	polText, err := Policy(cfg.Break)
	if err != nil {
		return errorf("%v", err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	ev := &judge.Evidence{Tool: "nsgate lab", Version: cfg.Version, Started: time.Now().UTC(), Break: cfg.Break}
	ev.Environment = environment(seal)
	ev.Invocation = append([]string{"nsgate"}, os.Args[1:]...)
	if cfg.Browser != "" {
		ev.Environment.Tools = toolVersions(ctx, cfg.Browser)
	}

	if err := os.MkdirAll(cfg.Evidence, 0o755); err != nil {
		return errorf("evidence directory: %v", err)
	}
	for _, name := range []string{judge.EvidenceJSON, judge.EvidenceMarkdown, judge.EvidenceAudit, audit.HeadFile(judge.EvidenceAudit),
		judge.EvidenceKey, judge.EvidenceAuditFill, audit.HeadFile(judge.EvidenceAuditFill),
		judge.EvidenceAuditCredentials, audit.HeadFile(judge.EvidenceAuditCredentials)} {
		if err := os.Remove(filepath.Join(cfg.Evidence, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errorf("replace old evidence: %v", err)
		}
	}
	work, err := os.MkdirTemp("", "nsgate-lab-")
	if err != nil {
		return errorf("work directory: %v", err)
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	ev.WorkDir = work

	layout := internet.DefaultLayout()
	layout.Pages = attack.BrowserPage
	failed, err := sealed.AddLoopback(layout.LoopbackAddrs(), layout.Optional)
	if err != nil {
		return errorf("fake internet: %v", err)
	}
	for _, a := range failed {
		ev.Environment.Notes = append(ev.Environment.Notes, "the kernel refused "+a.String()+" on lo")
	}
	// The host's own addresses on a link other than lo: the attempts on
	// them (host-own-*) need it, so a kernel that cannot make one fails
	// the run rather than leave them unjudged.
	if err := sealed.AddHostLink(internet.HostLinkName, layout.HostLink, layout.HostRoutes); err != nil {
		return errorf("fake internet: the host's own addresses: %v", err)
	}
	inet, err := internet.Start(layout, work)
	if err != nil {
		return errorf("fake internet: %v", err)
	}
	defer inet.Close()
	ev.Environment.Skipped = inet.Skipped()

	// nsgate's own files (the policy, the audit key) go in a folder of
	// their own, which nsgate hides from the worker whole; the worker is
	// shown the rest of the work directory.
	if err := os.MkdirAll(labNsgateDir(work), 0o755); err != nil {
		return errorf("work directory: %v", err)
	}
	polFile := filepath.Join(labNsgateDir(work), "policy.yaml")
	if err := os.WriteFile(polFile, polText, 0o644); err != nil {
		return errorf("write policy: %v", err)
	}
	pol, err := policy.Parse(polFile, polText)
	if err != nil {
		return errorf("lab policy: %v", err)
	}
	ev.Policy = judge.PolicyInfo{File: polFile, SHA256: pol.SHA256(), Text: string(polText)}

	auditPath := filepath.Join(cfg.Evidence, judge.EvidenceAudit)
	// The containment attempts' host side: the caller's home (the HOME
	// nsgate run starts with, holding a canary and a fake SSH key), the
	// --rw directory and the audit key, all in the work directory; the
	// audit log is created empty so that its inode is known.
	host := &attack.HostEnv{
		Token: attack.NewToken(), Policy: polFile, AuditLog: auditPath, AuditKey: labKeyFile(work),
		Home: filepath.Join(work, "home"), RW: filepath.Join(work, "rw"), Work: work,
		Runtime: filepath.Join(work, "run"),
	}
	if err := host.Setup(); err != nil {
		return errorf("containment set-up: %v", err)
	}
	key, err := audit.LoadKey(host.AuditKey)
	if err != nil {
		return errorf("%v", err)
	}
	// The worker sees the work directory (the fake internet's CA and the
	// host-side unix socket it attacks) read-only; the policy and the key
	// in it stay hidden, as nsgate's own files always are. Its home is a
	// private tmpfs at host.Home; host.RW is the one directory it may
	// write on the host.
	args := []string{"run", "--policy", polFile, "--audit", auditPath, "--audit-key", host.AuditKey, "--ro", work, "--rw", host.RW}
	env := withRuntime(withHome(withoutSealMarkers(os.Environ()), host.Home), host.Runtime)
	var breakArgs []string
	switch cfg.Break {
	case BreakMetadata:
		breakArgs = append(breakArgs, "--unsafe-break", "metadata")
	case BreakExecGuard:
		breakArgs = append(breakArgs, "--exec-guard=best-effort", "--unsafe-break", guard.LayerLandlock+","+guard.LayerSeccomp)
	case BreakCredentials, BreakRequestRules, BreakEchoScrub:
		breakArgs = append(breakArgs, "--unsafe-break", cfg.Break)
	}
	args = append(args, breakArgs...)
	ev.Environment.Notes = append(ev.Environment.Notes, "nsgate run was started with HOME="+host.Home+" (the caller's home for the containment attempts: a directory the lab made, holding its canary "+attack.HomeCanary+" and a fake SSH key), --rw "+host.RW+", --audit-key "+host.AuditKey+" and XDG_RUNTIME_DIR="+host.Runtime+" (a private runtime directory outside /run/user, where nsgate keeps its start gate)")
	// Let the worker also execute one dynamically linked program, so
	// that its ELF interpreter is allowed as it is for any dynamic worker
	// (a browser): running the interpreter directly must still be refused.
	if dyn, interp, ok := attack.DynamicProgram(); ok {
		args = append(args, "--exec-allow", dyn)
		// exec-ldso-renamed: a copy of the interpreter under another
		// name, in a folder the worker may execute from.
		loaders := filepath.Join(work, attack.LoaderDir)
		if err := copyLoader(interp, filepath.Join(loaders, attack.RenamedLoader)); err != nil {
			return errorf("exec-ldso-renamed: %v", err)
		}
		args = append(args, "--exec-allow", loaders)
		ev.Environment.Notes = append(ev.Environment.Notes, "the worker may also execute "+dyn+", so its ELF interpreter "+interp+" is allowed as for any dynamically linked worker")
	} else {
		ev.Environment.Notes = append(ev.Environment.Notes, "no dynamically linked /bin/true or /usr/bin/true: exec-ldso runs against a static-only allowlist")
	}
	args = append(args, "--", cfg.Self)
	args = append(args, cfg.AttackArgs...)
	args = append(args, "--json", "--ca", inet.CAFile(), "--unix", inet.UnixPath(), "--abstract", inet.AbstractName(),
		"--token", host.Token, "--policy-file", polFile, "--audit-file", auditPath, "--key-file", host.AuditKey,
		"--work-dir", work, "--rw-dir", host.RW)
	if len(cfg.Only) > 0 {
		var ids []string
		for _, at := range cat {
			ids = append(ids, at.ID)
		}
		args = append(args, "--only", strings.Join(ids, ","))
	}
	ev.Command = append([]string{cfg.Self}, args...)

	var obs []attack.Observation
	code := 0
	if len(cat) > 0 {
		// fs-read-policy-replaced: when the attacker asks, the lab edits
		// the policy as an operator would (a new file renamed over the
		// old one), reloads it with SIGHUP and tells the worker on its
		// standard input.
		replace := func(o attack.Observation, p *os.Process) string {
			if o.ID != "fs-read-policy-replaced" || host.Replaced {
				return ""
			}
			edited := append(append([]byte(nil), polText...), "# edited during the run (fs-read-policy-replaced)\n"...)
			if err := replaceFile(polFile, edited); err != nil {
				ev.Environment.Notes = append(ev.Environment.Notes, "could not replace the policy file: "+err.Error())
				return "failed"
			}
			if err := host.Snapshot(polFile); err != nil {
				return "failed"
			}
			host.Replaced = true
			p.Signal(syscall.SIGHUP)
			ev.Environment.Notes = append(ev.Environment.Notes, "during fs-read-policy-replaced the lab renamed an edited copy of the policy (one comment line added) over "+polFile+" and sent nsgate run SIGHUP")
			return attack.PolicyReplacedWord
		}
		m, err := runMain(ctx, cfg, args, env, cat, replace)
		if err != nil {
			return errorf("%v", err)
		}
		obs, code = m.obs, m.code
		ev.Gateway = judge.GatewayInfo{ExitCode: code, Stderr: m.stderr}
		for _, l := range m.workerLines {
			ev.Environment.Notes = append(ev.Environment.Notes, "worker said: "+l)
		}
		if m.timedOut {
			ev.Environment.Notes = append(ev.Environment.Notes, fmt.Sprintf("the gateway run hit the lab's %s timeout and was stopped", cfg.Timeout))
		}
	} else {
		ev.Command = nil
	}

	// The browser phase: its records follow the attacker's in the same
	// log, and it is judged on its own records and hits.
	var brun *browserRun
	attackRecs := -1
	if cfg.Browser != "" {
		if r, err := audit.ReadRecordsFile(auditPath); err == nil {
			attackRecs = len(r)
		}
		brun = runBrowser(ctx, cfg, polFile, auditPath, work, env)
		ev.Environment.Notes = append(ev.Environment.Notes, "browser attempts ran under: "+strings.Join(brun.command, " "))
		if brun.reported != "" {
			ev.Environment.Notes = append(ev.Environment.Notes, "the browser run reported audit head "+brun.reported)
		}
	}
	// The browser agents people run (Playwright, Playwright MCP), each
	// under a run of its own with --block-page, after the scripted agent.
	var agents []*agentRun
	if cfg.Browser != "" {
		for _, a := range []string{attack.AgentPlaywright, attack.AgentMCP} {
			ar := runAgent(ctx, cfg, a, polFile, auditPath, work, env)
			agents = append(agents, ar)
			if ar.skipped != "" {
				ev.Skipped = append(ev.Skipped, fmt.Sprintf("the %s agent's %d attempts: %s", a, len(ar.attempts), ar.skipped))
				fmt.Fprintf(cfg.Stderr, "nsgate lab: SKIPPED the %s agent: %s\n", a, ar.skipped)
				continue
			}
			ev.Environment.Notes = append(ev.Environment.Notes, "the "+a+" agent ran under: "+strings.Join(ar.command, " "))
		}
	}

	// The fill phase: a run of its own, with its own log on a small
	// volume; its records and hits are its own.
	var frun *fillRun
	if fill != nil {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: %s: a run of its own with its audit log on a %d KiB tmpfs\n", fill.ID, auditVolumeSize>>10)
		frun = runAuditFill(ctx, cfg, host, breakArgs, env)
		ev.Environment.Notes = append(ev.Environment.Notes, fill.ID+" ran under: "+strings.Join(frun.command, " "))
	}

	// The init race: runs of their own whose command is the racer.
	var rres *judge.Result
	if race != nil {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: %s: %d runs of their own, each with the racer as its command\n", race.ID, attack.InitRaceRuns)
		r := runInitRace(ctx, cfg, *race, host, env)
		rres = &r
	}

	// The session bus and the container engine: runs of their own with
	// --allow-unix.
	var sres []judge.Result
	for _, at := range socks {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: %s: a run of its own with --allow-unix and the socket outside every private directory\n", at.ID)
		sres = append(sres, runUnixPhase(ctx, cfg, at, host, env))
	}

	// nsgate's own host paths: runs of their own whose worker plants or
	// re-points a link, or learns through a dns.hosts loopback name.
	var pres []judge.Result
	for _, at := range paths {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: %s: runs of their own on nsgate's host paths\n", at.ID)
		pres = append(pres, runHostPath(ctx, cfg, at, host, env))
	}

	// The credential attempts: one run of their own with their own fake
	// upstreams, secret and log.
	var cres []judge.Result
	var credsLog string
	if len(creds) > 0 {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: %d credential attempts: a run of their own terminating TLS for %s and %s, with a secret only the lab knows\n", len(creds), attack.CredAPIName, attack.CredOtherName)
		cres, credsLog = runCredentials(ctx, cfg, creds, host, env, breakArgs, inet)
	}

	// The audit log, checked the way `nsgate audit verify --key` checks
	// it: the chain, every MAC, and the end against its head file.
	ev.Audit.File = auditPath
	if m := regexp.MustCompile(`nsgate: audit head ([0-9a-f]{64})`).FindStringSubmatch(ev.Gateway.Stderr); m != nil {
		ev.Audit.Reported = m[1]
	}
	var recs []audit.Record
	sum, cerr := audit.Check(auditPath, key, "")
	if cerr != nil {
		ev.Audit.Error = cerr.Error()
	} else {
		ev.Audit.Records, ev.Audit.Head, ev.Audit.Verified = sum.Records, sum.Head, true
		ev.Audit.MACsChecked, ev.Audit.Anchored = sum.MACsChecked, sum.Anchor != "" && sum.Anchor == sum.Head
	}
	if r, err := audit.ReadRecordsFile(auditPath); err == nil {
		recs = r
	} else if ev.Audit.Error == "" {
		ev.Audit.Error = err.Error()
	}
	keyCopy := filepath.Join(cfg.Evidence, judge.EvidenceKey)
	if b, err := os.ReadFile(host.AuditKey); err == nil && os.WriteFile(keyCopy, b, 0o600) == nil {
		os.Chmod(keyCopy, 0o600)
		ev.Audit.Key = keyCopy
	}

	// The host checks of the containment attempts.
	host.AuditErr, host.Records = cerr, recs
	host.Observations = make(map[string]attack.Observation, len(obs))
	for _, o := range obs {
		host.Observations[o.ID] = o
	}
	checks := host.Checks(cat)

	hits := inet.Hits()
	var brep *judge.Report
	if brun != nil {
		split := len(recs)
		if attackRecs >= 0 && attackRecs <= len(recs) {
			split = attackRecs
		}
		// Each later phase (the agents) is judged on its own records and
		// hits, cut off from the phase before it.
		type phase struct {
			cat      []attack.Attempt
			obs      []attack.Observation
			started  time.Time
			recStart int
		}
		phases := []phase{{attack.BrowserAttempts(), brun.obs, brun.started, split}}
		for _, ar := range agents {
			if ar.skipped == "" && ar.recStart >= split && ar.recStart <= len(recs) {
				phases = append(phases, phase{ar.attempts, ar.obs, ar.started, ar.recStart})
			}
		}
		var before []internet.Hit
		for _, h := range hits {
			if h.Time.Before(brun.started) {
				before = append(before, h)
			}
		}
		for i, ph := range phases {
			end, until := len(recs), time.Time{}
			if i+1 < len(phases) {
				end, until = phases[i+1].recStart, phases[i+1].started
			}
			var in []internet.Hit
			for _, h := range hits {
				if !h.Time.Before(ph.started) && (until.IsZero() || h.Time.Before(until)) {
					in = append(in, h)
				}
			}
			b := judge.Decide(ph.cat, ph.obs, recs[ph.recStart:end], in, inet.Approved)
			judge.RequireKeyedDenials(ph.cat, &b)
			if brep == nil {
				brep = &b
			} else {
				brep.Results = append(brep.Results, b.Results...)
				brep.Reasons = append(brep.Reasons, b.Reasons...)
				brep.StrayHits = append(brep.StrayHits, b.StrayHits...)
				brep.Unattributed = append(brep.Unattributed, b.Unattributed...)
			}
		}
		recs, hits = recs[:split], before
		if brun.reported != "" {
			ev.Audit.Reported = brun.reported
		}
		for _, ar := range agents {
			if ar.reported != "" {
				ev.Audit.Reported = ar.reported
			}
		}
	}
	if frun != nil {
		// The fill run's hits are its own (after the others' runs).
		var before []internet.Hit
		for _, h := range hits {
			if h.Time.Before(frun.Started) {
				before = append(before, h)
			}
		}
		hits = before
	}
	rep := judge.DecideHost(cat, obs, recs, hits, inet.Approved, checks)
	judge.AcceptDegraded(&rep, cat, judge.DeclaredDegraded(recs), cfg.ExpectDegraded)
	if brep != nil {
		rep.Results = append(rep.Results, brep.Results...)
		rep.Reasons = append(rep.Reasons, brep.Reasons...)
		rep.StrayHits = append(rep.StrayHits, brep.StrayHits...)
		rep.Unattributed = append(rep.Unattributed, brep.Unattributed...)
	}
	if frun != nil {
		fres := judge.AuditFill(*fill, &frun.FillRun, inet.Hits(), key)
		mark := "ok"
		if !fres.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(cfg.Stderr, "[fill]    %-26s %-8s %-10s %s\n", fres.ID, fres.Observed, mark, shorten(fres.Detail, 90))
		rep.Results = append(rep.Results, fres)
		if !fres.Pass {
			rep.Reasons = append(rep.Reasons, fres.ID+": "+fres.Why)
		}
		if frun.Err != nil || !fres.Pass {
			ev.Environment.Notes = append(ev.Environment.Notes, fill.ID+" run output (tail): "+judge.LastLines(frun.Stderr, 10))
		}
	}
	// The attempts run in sandboxes of their own, judged already.
	type ownRun struct {
		tag string
		res judge.Result
	}
	var own []ownRun
	if rres != nil {
		own = append(own, ownRun{"[race]", *rres})
	}
	for _, r := range sres {
		own = append(own, ownRun{"[bus]", r})
	}
	for _, r := range pres {
		own = append(own, ownRun{"[paths]", r})
	}
	for _, r := range cres {
		own = append(own, ownRun{"[creds]", r})
	}
	for _, o := range own {
		mark := "ok"
		if !o.res.Pass {
			mark = "FAIL"
			rep.Reasons = append(rep.Reasons, o.res.ID+": "+o.res.Why)
		}
		fmt.Fprintf(cfg.Stderr, "%-9s %-26s %-8s %-10s %s\n", o.tag, o.res.ID, o.res.Observed, mark, shorten(o.res.Detail, 90))
		rep.Results = append(rep.Results, o.res)
	}
	if credsLog != "" {
		if _, err := audit.Check(credsLog, key, ""); err != nil {
			rep.Reasons = append(rep.Reasons, "the credential attempts' audit log does not verify: "+err.Error())
		}
	}
	ev.Attempts = rep.Results
	ev.StrayHits = rep.StrayHits
	ev.Unattributed = rep.Unattributed
	ev.Targets = inet.Counts()
	ev.Summary = judge.Summarize(rep.Results)
	ev.Reasons = rep.Reasons
	switch {
	case !ev.Audit.Verified:
		ev.Reasons = append(ev.Reasons, "the audit log does not verify: "+ev.Audit.Error)
	case !ev.Audit.MACsChecked && ev.Audit.Records > 0:
		ev.Reasons = append(ev.Reasons, "the audit log's MACs were not checked")
	case ev.Audit.Reported != "" && ev.Audit.Reported != ev.Audit.Head:
		ev.Reasons = append(ev.Reasons, "nsgate reported audit head "+ev.Audit.Reported+" but the log's head is "+ev.Audit.Head)
	case ev.Audit.Reported == "" && (len(cat) > 0 || brun != nil):
		ev.Reasons = append(ev.Reasons, "nsgate did not report its audit head at exit")
	}
	if code != 0 {
		ev.Reasons = append(ev.Reasons, fmt.Sprintf("nsgate run exited %d (the attacker exits 0 when it has run every attempt)", code))
	}
	if brun != nil {
		if brun.err != nil {
			ev.Reasons = append(ev.Reasons, "browser: "+brun.err.Error())
		}
		if brun.exitCode != 0 {
			ev.Reasons = append(ev.Reasons, fmt.Sprintf("the browser's nsgate run exited %d (Chromium exits 0 when the lab closes it)", brun.exitCode))
		}
		if brun.err != nil || brun.exitCode != 0 {
			ev.Environment.Notes = append(ev.Environment.Notes, "browser run output (tail): "+judge.LastLines(brun.stderr, 20))
		}
	}
	for _, ar := range agents {
		switch {
		case ar.skipped != "" && os.Getenv("NSGATE_REQUIRE_ALL") == "1":
			ev.Reasons = append(ev.Reasons, "the "+ar.agent+" agent did not run (NSGATE_REQUIRE_ALL=1 refuses skips): "+ar.skipped)
		case ar.skipped != "":
		case ar.err != nil || ar.exitCode != 0:
			if ar.err != nil {
				ev.Reasons = append(ev.Reasons, ar.agent+" agent: "+ar.err.Error())
			}
			if ar.exitCode != 0 {
				ev.Reasons = append(ev.Reasons, fmt.Sprintf("the %s agent exited %d", ar.agent, ar.exitCode))
			}
			ev.Environment.Notes = append(ev.Environment.Notes, ar.agent+" agent output (tail): "+judge.LastLines(ar.stderr, 20))
		}
	}
	ev.Verdict = "pass"
	if len(ev.Reasons) > 0 {
		ev.Verdict = "fail"
	}
	ev.Finished = time.Now().UTC()
	if err := ev.WriteFiles(cfg.Evidence); err != nil {
		return errorf("%v", err)
	}
	ev.WriteTable(cfg.Stdout)
	fmt.Fprintf(cfg.Stdout, "Evidence: %s, %s, %s\n", filepath.Join(cfg.Evidence, judge.EvidenceJSON), filepath.Join(cfg.Evidence, judge.EvidenceMarkdown), auditPath)
	switch {
	case len(cat) > 0 && len(obs) == 0:
		return errorf("the gateway never ran the attacker (nsgate run exited %d): %s", code, judge.FirstLines(ev.Gateway.Stderr, 3))
	case ev.Verdict != "pass":
		return ExitFail
	}
	return ExitPass
}

// replaceFile replaces path with a new file holding data, renamed over it.
func replaceFile(path string, data []byte) error {
	tmp := path + ".edit"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// mainRun is the outcome of the attacker's `nsgate run`.
type mainRun struct {
	obs         []attack.Observation
	code        int
	stderr      string
	workerLines []string
	timedOut    bool
}

// runMain runs the attacker under `nsgate run` (args) and collects its
// observations, printing one progress line for each.
// onPartial is called with every progress report (a Partial
// observation) and nsgate run's process; a line it returns is written to
// the worker's standard input.
func runMain(ctx context.Context, cfg Config, args, env []string, cat []attack.Attempt, onPartial func(attack.Observation, *os.Process) string) (mainRun, error) {
	var m mainRun
	// A terminal of the caller's, open on the host during the run: the
	// fs-other-terminals attempt must not find it.
	if pty, err := openHostPTY(); err == nil {
		defer pty.Close()
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, cfg.Self, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	stderr := &tail{max: 16 << 10}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return m, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return m, err
	}
	defer in.Close()
	fmt.Fprintf(cfg.Stderr, "nsgate lab: %d attempts in the sealed namespace; evidence in %s\n", len(cat), cfg.Evidence)
	if err := cmd.Start(); err != nil {
		return m, fmt.Errorf("start nsgate run: %w", err)
	}
	expect := make(map[string]attack.Outcome, len(cat))
	for _, at := range cat {
		expect[at.ID] = at.Expect
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var o attack.Observation
		if err := json.Unmarshal(line, &o); err != nil || o.ID == "" {
			if len(m.workerLines) < 50 {
				m.workerLines = append(m.workerLines, string(line))
			}
			continue
		}
		if o.Partial {
			if reply := onPartial(o, cmd.Process); reply != "" {
				io.WriteString(in, reply+"\n")
			}
			continue
		}
		m.obs = append(m.obs, o)
		mark := "ok"
		if o.Observed != expect[o.ID] {
			mark = "UNEXPECTED"
		}
		fmt.Fprintf(cfg.Stderr, "[%3d/%d] %-26s %-8s %-10s %s\n", len(m.obs), len(cat), audit.TermText(o.ID), o.Observed, mark, shorten(audit.TermText(o.Detail), 90))
	}
	m.code = attack.ExitCode(cmd.Wait())
	m.stderr = stderr.String()
	m.timedOut = rctx.Err() != nil && ctx.Err() == nil
	return m, nil
}

// withoutSealMarkers drops the sealing markers, so that nothing the lab
// starts believes it was sealed by the lab's parent.
func withoutSealMarkers(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, sealed.EnvSealedFrom+"=") || strings.HasPrefix(kv, sealed.EnvSealedUserns+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func environment(seal sealed.Info) judge.Environment {
	e := judge.Environment{OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(), Rootless: seal.Userns, UID: os.Getuid()}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		e.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if st, err := os.Stat("/dev/net/tun"); err == nil {
		e.TunMode = st.Mode().Perm().String()
	} else {
		e.TunMode = "missing"
	}
	s := guard.Probe()
	e.LandlockABI, e.Seccomp, e.SeccompNotify = s.LandlockABI, s.Seccomp, s.ExecAudit
	e.CallerUID, e.CallerGID = callerIDs()
	e.CallerUser = userName(e.CallerUID)
	e.UserNamespaces = userNamespaces(seal.Userns, e.CallerUID)
	e.IA32Emulation = ia32Emulation(os.TempDir())
	return e
}

// tail keeps the last max bytes written to it. It is safe for concurrent
// use.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// openHostPTY opens a pseudo-terminal on the host (its /dev/pts entry
// exists while the returned file is open).
func openHostPTY() (*os.File, error) {
	f, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// labKeyFile is the audit HMAC key the lab makes in its work directory
// (hidden from the worker; every `nsgate run` of the lab signs its
// records with it).
func labKeyFile(work string) string { return filepath.Join(labNsgateDir(work), "audit.key") }

// labNsgateDir is the folder of the work directory that holds nsgate's own
// files: nsgate refuses to start when they lie in a folder the worker sees,
// and hides this one whole.
func labNsgateDir(work string) string { return filepath.Join(work, "nsgate") }

// copyLoader copies the ELF interpreter interp to to (mode 0755), making
// its folder (0755).
func copyLoader(interp, to string) error {
	b, err := os.ReadFile(interp)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	os.Chmod(filepath.Dir(to), 0o755)
	if err := os.WriteFile(to, b, 0o755); err != nil {
		return err
	}
	return os.Chmod(to, 0o755)
}
