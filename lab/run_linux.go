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
}

// Run runs the lab in this process's sealed network namespace: it builds
// the fake internet, runs the attacker under `nsgate run` with the lab
// policy, judges every attempt, writes the evidence and prints the table.
// With cfg.Browser it runs the browser attempts after the attacker
// (runBrowser) and judges them on their own part of the audit log.
// It refuses to run outside a namespace made by EnterSealed. It returns
// ExitPass, ExitFail or ExitError; on ExitError it has said why on
// Stderr.
func Run(ctx context.Context, cfg Config) int {
	errorf := func(format string, args ...any) int {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: "+format+"\n", args...)
		return ExitError
	}
	seal, ok := Sealed()
	if !ok {
		return errorf("not in a sealed network namespace (nsgate lab makes one itself)")
	}
	if err := CheckSealed(); err != nil {
		return errorf("refusing to run: %v", err)
	}
	cat := Catalogue()
	if len(cfg.Only) > 0 {
		var sel []Attempt
		for _, id := range cfg.Only {
			at, ok := Find(id)
			if !ok {
				return errorf("--only: unknown attempt %q", id)
			}
			sel = append(sel, at)
		}
		cat = sel
	}
	polText, err := Policy(cfg.Break)
	if err != nil {
		return errorf("%v", err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	ev := &Evidence{Tool: "nsgate lab", Version: cfg.Version, Started: time.Now().UTC(), Break: cfg.Break}
	ev.Environment = environment(seal)

	if err := os.MkdirAll(cfg.Evidence, 0o755); err != nil {
		return errorf("evidence directory: %v", err)
	}
	for _, name := range []string{EvidenceJSON, EvidenceMarkdown, EvidenceAudit} {
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

	layout := DefaultLayout()
	failed, err := AddLoopback(layout.LoopbackAddrs(), layout.Optional)
	if err != nil {
		return errorf("fake internet: %v", err)
	}
	for _, a := range failed {
		ev.Environment.Notes = append(ev.Environment.Notes, "the kernel refused "+a.String()+" on lo")
	}
	inet, err := Start(layout, work)
	if err != nil {
		return errorf("fake internet: %v", err)
	}
	defer inet.Close()
	ev.Environment.Skipped = inet.Skipped()

	polFile := filepath.Join(work, "policy.yaml")
	if err := os.WriteFile(polFile, polText, 0o644); err != nil {
		return errorf("write policy: %v", err)
	}
	pol, err := policy.Parse(polFile, polText)
	if err != nil {
		return errorf("lab policy: %v", err)
	}
	ev.Policy = PolicyInfo{File: polFile, SHA256: pol.SHA256(), Text: string(polText)}

	auditPath := filepath.Join(cfg.Evidence, EvidenceAudit)
	// The worker sees the work directory (the fake internet's CA and the
	// host-side unix socket it attacks) read-only; the policy in it stays
	// hidden, as nsgate's own files always are.
	args := []string{"run", "--policy", polFile, "--audit", auditPath, "--ro", work}
	env := withoutSealMarkers(os.Environ())
	switch cfg.Break {
	case BreakMetadata:
		args = append(args, "--unsafe-break", "metadata")
	case BreakExecGuard:
		args = append(args, "--exec-guard=best-effort")
		env = append(env, guard.EnvTestNoLandlock+"=1", guard.EnvTestNoSeccomp+"=1")
	}
	// Let the worker also execute one dynamically linked program, so
	// that its ELF interpreter is allowed as it is for any dynamic worker
	// (a browser): running the interpreter directly must still be refused.
	if dyn, interp, ok := dynamicProgram(); ok {
		args = append(args, "--exec-allow", dyn)
		ev.Environment.Notes = append(ev.Environment.Notes, "the worker may also execute "+dyn+", so its ELF interpreter "+interp+" is allowed as for any dynamically linked worker")
	} else {
		ev.Environment.Notes = append(ev.Environment.Notes, "no dynamically linked /bin/true or /usr/bin/true: exec-ldso runs against a static-only allowlist")
	}
	args = append(args, "--", cfg.Self)
	args = append(args, cfg.AttackArgs...)
	args = append(args, "--json", "--ca", inet.CAFile(), "--unix", inet.UnixPath(), "--abstract", inet.AbstractName())
	if len(cfg.Only) > 0 {
		args = append(args, "--only", strings.Join(cfg.Only, ","))
	}
	ev.Command = append([]string{cfg.Self}, args...)

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
		return errorf("%v", err)
	}
	fmt.Fprintf(cfg.Stderr, "nsgate lab: %d attempts in the sealed namespace; evidence in %s\n", len(cat), cfg.Evidence)
	if err := cmd.Start(); err != nil {
		return errorf("start nsgate run: %v", err)
	}
	expect := make(map[string]Outcome, len(cat))
	for _, at := range cat {
		expect[at.ID] = at.Expect
	}
	var obs []Observation
	var workerLines []string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var o Observation
		if err := json.Unmarshal(line, &o); err != nil || o.ID == "" {
			if len(workerLines) < 50 {
				workerLines = append(workerLines, string(line))
			}
			continue
		}
		obs = append(obs, o)
		mark := "ok"
		if o.Observed != expect[o.ID] {
			mark = "UNEXPECTED"
		}
		fmt.Fprintf(cfg.Stderr, "[%3d/%d] %-26s %-8s %-10s %s\n", len(obs), len(cat), o.ID, o.Observed, mark, shorten(o.Detail, 90))
	}
	werr := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	default:
		code = -1
	}
	ev.Gateway = GatewayInfo{ExitCode: code, Stderr: stderr.String()}
	for _, l := range workerLines {
		ev.Environment.Notes = append(ev.Environment.Notes, "worker said: "+l)
	}
	if rctx.Err() != nil && ctx.Err() == nil {
		ev.Environment.Notes = append(ev.Environment.Notes, fmt.Sprintf("the gateway run hit the lab's %s timeout and was stopped", cfg.Timeout))
	}

	// The browser phase: its records follow the attacker's in the same
	// log, and it is judged on its own records and hits.
	var brun *browserRun
	attackRecs := -1
	if cfg.Browser != "" {
		if r, err := ReadAuditFile(auditPath); err == nil {
			attackRecs = len(r)
		}
		brun = runBrowser(ctx, cfg, polFile, auditPath, work, env)
		ev.Environment.Notes = append(ev.Environment.Notes, "browser attempts ran under: "+strings.Join(brun.command, " "))
		if brun.reported != "" {
			ev.Environment.Notes = append(ev.Environment.Notes, "the browser run reported audit head "+brun.reported)
		}
	}

	// The audit log, checked the way `nsgate audit verify` checks it.
	ev.Audit.File = auditPath
	if m := regexp.MustCompile(`nsgate: audit head ([0-9a-f]{64})`).FindStringSubmatch(ev.Gateway.Stderr); m != nil {
		ev.Audit.Reported = m[1]
	}
	var recs []AuditRecord
	if n, head, err := audit.VerifyFile(auditPath, nil); err != nil {
		ev.Audit.Error = err.Error()
	} else {
		ev.Audit.Records, ev.Audit.Head, ev.Audit.Verified = n, head, true
	}
	if r, err := ReadAuditFile(auditPath); err == nil {
		recs = r
	} else if ev.Audit.Error == "" {
		ev.Audit.Error = err.Error()
	}

	hits := inet.Hits()
	var brep *Report
	if brun != nil {
		split := len(recs)
		if attackRecs >= 0 && attackRecs <= len(recs) {
			split = attackRecs
		}
		var before, after []Hit
		for _, h := range hits {
			if h.Time.Before(brun.started) {
				before = append(before, h)
			} else {
				after = append(after, h)
			}
		}
		b := Judge(BrowserAttempts(), brun.obs, recs[split:], after, inet.Approved)
		requireKeyedDenials(BrowserAttempts(), &b)
		brep = &b
		recs, hits = recs[:split], before
		if brun.reported != "" {
			ev.Audit.Reported = brun.reported
		}
	}
	rep := Judge(cat, obs, recs, hits, inet.Approved)
	if brep != nil {
		rep.Results = append(rep.Results, brep.Results...)
		rep.Reasons = append(rep.Reasons, brep.Reasons...)
		rep.StrayHits = append(rep.StrayHits, brep.StrayHits...)
		rep.Unattributed = append(rep.Unattributed, brep.Unattributed...)
	}
	ev.Attempts = rep.Results
	ev.StrayHits = rep.StrayHits
	ev.Unattributed = rep.Unattributed
	ev.Targets = inet.Counts()
	ev.Summary = Summarize(rep.Results)
	ev.Reasons = rep.Reasons
	if !ev.Audit.Verified {
		ev.Reasons = append(ev.Reasons, "the audit log does not verify: "+ev.Audit.Error)
	} else if ev.Audit.Reported != "" && ev.Audit.Reported != ev.Audit.Head {
		ev.Reasons = append(ev.Reasons, "nsgate reported audit head "+ev.Audit.Reported+" but the log's head is "+ev.Audit.Head)
	} else if ev.Audit.Reported == "" {
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
			ev.Environment.Notes = append(ev.Environment.Notes, "browser run output (tail): "+lastLines(brun.stderr, 20))
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
	fmt.Fprintf(cfg.Stdout, "Evidence: %s, %s, %s\n", filepath.Join(cfg.Evidence, EvidenceJSON), filepath.Join(cfg.Evidence, EvidenceMarkdown), auditPath)
	switch {
	case len(obs) == 0:
		return errorf("the gateway never ran the attacker (nsgate run exited %d): %s", code, firstLines(ev.Gateway.Stderr, 3))
	case ev.Verdict != "pass":
		return ExitFail
	}
	return ExitPass
}

// dynamicProgram finds a harmless dynamically linked program.
func dynamicProgram() (path, interp string, ok bool) {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if in, err := elfInterp(real); err == nil {
			return real, in, true
		}
	}
	return "", "", false
}

// withoutSealMarkers drops the sealing markers, so that nothing the lab
// starts believes it was sealed by the lab's parent.
func withoutSealMarkers(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvSealedFrom+"=") || strings.HasPrefix(kv, EnvSealedUserns+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func environment(seal SealInfo) Environment {
	e := Environment{OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(), Rootless: seal.Userns, UID: os.Getuid()}
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
	e.LandlockABI, e.Seccomp = s.LandlockABI, s.Seccomp
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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " / ")
}
