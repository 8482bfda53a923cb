package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/judge"
)

// The lab's side of the containment attempts: the run of its own that
// fills an audit volume. (The attempts set up the host and check it with
// attack.HostEnv.)

// auditVolumeSize is the size of the tmpfs the fill attempt's log lies on.
const auditVolumeSize = 64 << 10

// withHome returns env with HOME set to home.
func withHome(env []string, home string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	return append(out, "HOME="+home)
}

// withRuntime returns env with XDG_RUNTIME_DIR set to dir and the start
// gate on (no NSGATE_START_SLOTS), so that nsgate run keeps its start gate
// in dir, a private directory outside /run/user/UID (fs-hold-start-slots).
func withRuntime(env []string, dir string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "NSGATE_START_SLOTS=") {
			out = append(out, kv)
		}
	}
	return append(out, "XDG_RUNTIME_DIR="+dir)
}

// fillRun is the outcome of the fill phase: what the judge weighs, and
// how the lab ran it.
type fillRun struct {
	judge.FillRun
	command         []string
	volume, logPath string
}

// runAuditFill runs the fill attempt in an `nsgate run` of its own whose
// audit log lies on a tmpfs of auditVolumeSize bytes. The lab mounts it
// through a helper (`nsgate __attack --helper audit-volume`) started in a
// mount namespace of its own, which works as root and, rootless, as root
// of the lab's sealed user namespace; the helper copies the log and its
// head file into the evidence folder when nsgate run has exited.
func runAuditFill(ctx context.Context, cfg Config, h *attack.HostEnv, breakArgs, env []string) *fillRun {
	fr := &fillRun{volume: filepath.Join(h.Work, "audit-volume")}
	fr.VolumeSize = auditVolumeSize
	fr.logPath = filepath.Join(fr.volume, attack.VolumeLog)
	fr.Copy = filepath.Join(cfg.Evidence, judge.EvidenceAuditFill)
	if err := os.MkdirAll(fr.volume, 0o700); err != nil {
		fr.Err = err
		return fr
	}
	run := []string{"run", "--policy", h.Policy, "--audit", fr.logPath, "--audit-key", h.AuditKey, "--ro", h.Work, "--quiet"}
	run = append(append(run, breakArgs...), "--", cfg.Self)
	run = append(run, cfg.AttackArgs...)
	run = append(run, "--json", "--only", "audit-fill-volume", "--token", h.Token)
	args := append(append([]string(nil), cfg.AttackArgs...), "--helper", "audit-volume", fr.volume, strconv.Itoa(auditVolumeSize), fr.Copy, "--", cfg.Self)
	args = append(args, run...)
	fr.command = append([]string{cfg.Self}, args...)

	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, cfg.Self, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	stderr := &tail{max: 16 << 10}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fr.Err = err
		return fr
	}
	fr.Started = time.Now()
	if err := cmd.Start(); err != nil {
		fr.Err = fmt.Errorf("start the audit volume helper: %w", err)
		return fr
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var o attack.Observation
		if json.Unmarshal(sc.Bytes(), &o) == nil && o.ID != "" {
			fr.Obs = append(fr.Obs, o)
		}
	}
	werr := cmd.Wait()
	fr.Ended = time.Now()
	fr.Stderr = stderr.String()
	fr.ExitCode = attack.ExitCode(werr)
	return fr
}

// ownRunResult is the result of attempt at, which runs in an nsgate run
// of its own (runInitRace, runSessionBus), as it starts.
func ownRunResult(at attack.Attempt) judge.Result {
	return judge.Result{
		ID: at.ID, Category: at.Category, Layer: at.Layer, Description: at.Description,
		Expected: at.Expect, AuditSeqs: []uint64{}, Audit: []json.RawMessage{}, Hits: []internet.Hit{},
		Start: time.Now(), Evidence: at.NoRecord,
	}
}

// erroredResult is res of an attempt that could not be carried out, and
// why.
func erroredResult(res judge.Result, why string) judge.Result {
	res.Observed, res.Detail, res.Why = attack.Errored, why, "could not be carried out: "+why
	return res
}

// runInitRace runs attempt at (attack.PhaseInitRace): attack.InitRaceRuns
// sandboxes of their own, each with the racer (attack.InitRaceProgram) as
// its command, since only a sandbox's first program can race its init.
// Each run's exit status is what the racer saw: every open refused, or
// init's memory opened read-write. The runs write to an audit log of
// their own in the work directory (only the racer's exec is in it).
func runInitRace(ctx context.Context, cfg Config, at attack.Attempt, h *attack.HostEnv, env []string) (res judge.Result) {
	res = ownRunResult(at)
	// res is the named result: the end is stamped on what is returned.
	defer func() { res.End = time.Now() }()
	errored := func(why string) judge.Result { return erroredResult(res, why) }
	prog, ok := attack.InitRaceProgram()
	if !ok {
		return errored("the racer has no code for " + runtime.GOARCH)
	}
	dir := filepath.Join(h.Work, "init-race")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errored(err.Error())
	}
	racer := filepath.Join(dir, "racer")
	if err := os.WriteFile(racer, prog, 0o755); err != nil {
		return errored(err.Error())
	}
	args := []string{"run", "--policy", h.Policy, "--audit", filepath.Join(dir, "audit.jsonl"), "--quiet", "--", racer}
	won, refused := 0, 0
	var other []string
	for i := 0; i < attack.InitRaceRuns; i++ {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		cmd := exec.CommandContext(rctx, cfg.Self, args...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stderr := &tail{max: 4 << 10}
		cmd.Stderr = stderr
		code := attack.ExitCode(cmd.Run())
		cancel()
		switch code {
		case attack.InitRaceRefused:
			refused++
		case attack.InitRaceWon:
			won++
		default:
			other = append(other, fmt.Sprintf("run %d exited %d: %s", i+1, code, judge.LastLines(stderr.String(), 2)))
		}
	}
	res.HostCheck = fmt.Sprintf("%s: of %d runs (%s %s), %d refused every open, %d opened init's memory read-write, %d ended otherwise",
		at.HostCheck, attack.InitRaceRuns, cfg.Self, strings.Join(args, " "), refused, won, len(other))
	switch {
	case won > 0:
		res.Observed = attack.Allowed
		res.Detail = fmt.Sprintf("opened /proc/1/mem read-write in %d of %d runs", won, attack.InitRaceRuns)
		res.Why = "got through: " + res.Detail
	case len(other) > 0:
		return errored(strings.Join(other, "; "))
	default:
		res.Observed, res.Pass = attack.Blocked, true
		res.Detail = fmt.Sprintf("every open refused in each of %d runs (%d tries each)", attack.InitRaceRuns, attack.InitRaceTries)
	}
	return res
}
