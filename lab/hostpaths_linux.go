package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/judge"
	"github.com/nsgate/nsgate/policy"
)

// The lab's side of the host-path attempts (attack.PhaseHostPaths): runs
// of their own whose worker plants or re-points a link, or learns through
// a dns.hosts loopback name, judged on the host and on their own logs.

// ownRunOut is what one `nsgate run` of a host-path attempt left.
type ownRunOut struct {
	obs    *attack.Observation
	code   int
	stderr string
	args   []string
}

// ownRun is one `nsgate run` of a host-path attempt, started by startOwn.
type ownRun struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stderr *tail
	obs    chan *attack.Observation
	args   []string
}

// startOwn starts `nsgate ARGS` with the environment env (killed after a
// minute, or with the lab) and reads the final observation of attempt id
// from its output as it runs.
func startOwn(ctx context.Context, cfg Config, id string, env, args []string) (*ownRun, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	cmd := exec.CommandContext(rctx, cfg.Self, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &ownRun{cmd: cmd, cancel: cancel, stderr: &tail{max: 4 << 10}, obs: make(chan *attack.Observation, 1), args: args}
	cmd.Stderr = r.stderr
	pipe, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		var last *attack.Observation
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var o attack.Observation
			if json.Unmarshal(sc.Bytes(), &o) == nil && o.ID == id && !o.Partial {
				last = &o
			}
		}
		r.obs <- last
	}()
	return r, nil
}

// wait waits for the run to end and returns what it left.
func (r *ownRun) wait() ownRunOut {
	defer r.cancel()
	obs := <-r.obs
	return ownRunOut{obs: obs, code: attack.ExitCode(r.cmd.Wait()), stderr: r.stderr.String(), args: r.args}
}

// runOwn runs `nsgate ARGS` with the environment env and returns the
// final observation of attempt id it printed, if any.
func runOwn(ctx context.Context, cfg Config, id string, env, args []string) ownRunOut {
	r, err := startOwn(ctx, cfg, id, env, args)
	if err != nil {
		return ownRunOut{args: args, code: -1, stderr: err.Error()}
	}
	return r.wait()
}

// attackerArgs is the attacker's command line for attempt id alone.
func attackerArgs(cfg Config, h *attack.HostEnv, id, rw string) []string {
	a := append([]string{"--", cfg.Self}, cfg.AttackArgs...)
	a = append(a, "--json", "--only", id, "--token", h.Token, "--work-dir", h.Work)
	if rw != "" {
		a = append(a, "--rw-dir", rw)
	}
	return a
}

// fileSum is the SHA-256 of path's bytes, or the error reading it.
func fileSum(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// runHostPath runs attempt at (attack.PhaseHostPaths).
func runHostPath(ctx context.Context, cfg Config, at attack.Attempt, h *attack.HostEnv, env []string) (res judge.Result) {
	res = ownRunResult(at)
	res.HostCheck = at.HostCheck
	defer func() { res.End = time.Now() }()
	base := filepath.Join(h.Work, attack.PhaseHostPaths)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return erroredResult(res, err.Error())
	}
	os.Chmod(base, 0o755)
	switch at.ID {
	case "fs-plant-output-links":
		return plantOutputLinks(ctx, cfg, res, h, env, base)
	case "fs-relink-policy-reload":
		return relinkPolicyReload(ctx, cfg, res, h, env, base)
	case "learn-hosts-loopback":
		return learnHostsLoopback(ctx, cfg, res, h, env, base)
	}
	return erroredResult(res, "the lab has no run for "+at.ID)
}

func plantOutputLinks(ctx context.Context, cfg Config, res judge.Result, h *attack.HostEnv, env []string, base string) judge.Result {
	canary := filepath.Join(h.Work, attack.HostPathCanary)
	if err := os.WriteFile(canary, []byte("the caller's file "+h.Token+"\n"), 0o644); err != nil {
		return erroredResult(res, err.Error())
	}
	before := fileSum(canary)
	ws := filepath.Join(base, "plant-ws")
	logs := filepath.Join(base, "plant-audit")
	for _, d := range []string{ws, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return erroredResult(res, err.Error())
		}
		os.Chmod(d, 0o777)
	}
	// Run 1: the worker plants the links.
	args := append([]string{"run", "--policy", h.Policy, "--audit", filepath.Join(logs, "plant.jsonl"), "--ro", h.Work, "--rw", ws, "--quiet"},
		attackerArgs(cfg, h, res.ID, ws)...)
	r1 := runOwn(ctx, cfg, res.ID, env, args)
	if r1.obs == nil || r1.obs.Observed != attack.Allowed {
		why := "the planting run (exit " + strconv.Itoa(r1.code) + ") reported no planted links: " + judge.LastLines(r1.stderr, 3)
		if r1.obs != nil {
			why += "; the worker: " + r1.obs.Detail
		}
		return erroredResult(res, why)
	}
	for _, n := range attack.PlantedOutputs {
		if fi, err := os.Lstat(filepath.Join(ws, n)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return erroredResult(res, "the worker said it planted "+n+" but it is not a link on the host")
		}
	}
	// Run 2: the operator's next runs, one per output, on those names.
	var refused, through []string
	for i, o := range [][]string{
		{"--pcap", filepath.Join(ws, "capture.pcap"), "--audit", filepath.Join(logs, "pcap.jsonl")},
		{"--learn", filepath.Join(ws, "learned.yaml"), "--audit", filepath.Join(logs, "learn.jsonl")},
		{"--audit", filepath.Join(ws, "audit.jsonl")},
	} {
		a := append(append([]string{"run", "--policy", h.Policy, "--quiet"}, o...), "--", cfg.Self, "version")
		r := runOwn(ctx, cfg, "", env, a)
		line := judge.FirstLines(r.stderr, 1)
		if r.code != 0 && strings.Contains(r.stderr, "link") {
			refused = append(refused, fmt.Sprintf("%s %s: exit %d, %q", o[0], attack.PlantedOutputs[i], r.code, line))
		} else {
			through = append(through, fmt.Sprintf("%s %s: exit %d, %q", o[0], attack.PlantedOutputs[i], r.code, line))
		}
	}
	after := fileSum(canary)
	notRefused := "none"
	if len(through) > 0 {
		notRefused = strings.Join(through, "; ")
	}
	res.HostCheck = fmt.Sprintf("%s: canary %s sha256 %s before, %s after; refused: %s; not refused: %s (worker run: %s %s)",
		res.HostCheck, canary, before, after, strings.Join(refused, "; "), notRefused, cfg.Self, strings.Join(r1.args, " "))
	switch {
	case after != before:
		res.Observed = attack.Allowed
		res.Detail = "the caller's file changed through a planted link"
		res.Why = "got through: " + res.Detail
	case len(through) > 0:
		res.Observed = attack.Allowed
		res.Detail = "a run given a planted link was not refused at start: " + strings.Join(through, "; ")
		res.Why = "got through: " + res.Detail
	default:
		res.Observed, res.Pass = attack.Blocked, true
		res.Detail = fmt.Sprintf("the worker planted %d links; each later run refused at start naming the link, and the caller's file is unchanged", len(refused))
	}
	return res
}

func relinkPolicyReload(ctx context.Context, cfg Config, res judge.Result, h *attack.HostEnv, env []string, base string) judge.Result {
	ws := filepath.Join(base, "relink-ws")
	logs := filepath.Join(base, "relink-audit")
	for _, d := range []string{ws, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return erroredResult(res, err.Error())
		}
		os.Chmod(d, 0o777)
	}
	link := filepath.Join(ws, attack.RelinkPolicy)
	os.Remove(link)
	if err := os.Symlink(h.Policy, link); err != nil {
		return erroredResult(res, err.Error())
	}
	before := fileSum(h.Policy)
	log := filepath.Join(logs, "relink.jsonl")
	args := append([]string{"run", "--policy", link, "--audit", log, "--ro", h.Work, "--rw", ws, "--quiet"},
		attackerArgs(cfg, h, res.ID, ws)...)
	// The run must refuse to start: one that starts has already lost
	// (the worker re-points the link before any reload), whatever a
	// reload would then read.
	r := runOwn(ctx, cfg, res.ID, env, args)
	target, _ := os.Readlink(link)
	after := fileSum(h.Policy)
	res.HostCheck = fmt.Sprintf("%s: exit %d, %q; the operator's policy sha256 %s before, %s after; the link points to %s (%s %s)",
		res.HostCheck, r.code, judge.FirstLines(r.stderr, 1), before, after, target, cfg.Self, strings.Join(args, " "))
	switch {
	case r.obs != nil || r.code == 0:
		res.Observed = attack.Allowed
		res.Detail = "nsgate started with a --policy reached through a link in the worker's --rw tree"
		if r.obs != nil {
			res.Detail += "; the worker: " + r.obs.Detail
		}
		res.Why = "got through: " + res.Detail
	case !strings.Contains(r.stderr, "which the worker may write"):
		return erroredResult(res, fmt.Sprintf("the run exited %d without the refusal naming the writable tree: %s", r.code, judge.LastLines(r.stderr, 3)))
	case after != before || target != h.Policy:
		res.Observed = attack.Allowed
		res.Detail = "the operator's policy or its link changed"
		res.Why = "got through: " + res.Detail
	}
	// The reload stage: the policy lies outside the worker's --rw
	// folder, so the run starts; the worker writes a permissive policy in
	// its folder, the lab re-points the policy's folder by name to it (as
	// a worker that could rename it would) and sends SIGHUP.
	st := relinkReloadStage(ctx, cfg, h, env, base)
	res.HostCheck += "; reload stage: " + st.hostCheck
	switch {
	case st.errored != "":
		return erroredResult(res, "reload stage: "+st.errored)
	case !st.blocked:
		res.Observed = attack.Allowed
		res.Detail = "reload stage: " + st.detail
		res.Why = "got through: " + res.Detail
	default:
		res.Observed, res.Pass = attack.Blocked, true
		res.Detail = "refused at start: " + judge.FirstLines(r.stderr, 1) + "; the worker never ran and the operator's policy is unchanged; reload stage: " + st.detail
		res.AuditSeqs, res.Audit = st.seqs, st.recs
	}
	return res
}

// reloadStage is the outcome of relinkReloadStage.
type reloadStage struct {
	blocked                    bool
	detail, hostCheck, errored string
	seqs                       []uint64
	recs                       []json.RawMessage
}

// relinkReloadStage runs the reload stage of fs-relink-policy-reload.
func relinkReloadStage(ctx context.Context, cfg Config, h *attack.HostEnv, env []string, base string) (st reloadStage) {
	var hits atomic.Int64
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(attack.RelinkPort)))
	if err != nil {
		st.errored = "the loopback server: " + err.Error()
		return st
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Write([]byte("SSH-2.0-lab\r\n"))
			c.Close()
		}
	}()
	etc := filepath.Join(base, "reload-etc")
	ws := filepath.Join(base, "reload-ws")
	logs := filepath.Join(base, "reload-audit")
	for _, d := range []string{etc, ws, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			st.errored = err.Error()
			return st
		}
	}
	os.Chmod(ws, 0o777)
	text, err := os.ReadFile(h.Policy)
	if err != nil {
		st.errored = err.Error()
		return st
	}
	pol := filepath.Join(etc, attack.RelinkPolicy)
	if err := os.WriteFile(pol, text, 0o644); err != nil {
		st.errored = err.Error()
		return st
	}
	log := filepath.Join(logs, "reload.jsonl")
	args := append([]string{"run", "--policy", pol, "--audit", log, "--ro", h.Work, "--rw", ws, "--quiet"}, attackerArgs(cfg, h, "fs-relink-policy-reload", ws)...)
	run, err := startOwn(ctx, cfg, "fs-relink-policy-reload", env, args)
	if err != nil {
		st.errored = err.Error()
		return st
	}
	// Once the worker has written its policy, re-point the folder.
	written := filepath.Join(ws, attack.RelinkPolicy)
	repointed := false
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(written); err == nil && string(b) == attack.RelinkPermissiveText {
			if os.Rename(etc, etc+".old") == nil && os.Symlink(ws, etc) == nil {
				repointed = true
				run.cmd.Process.Signal(syscall.SIGHUP)
			}
			break
		}
	}
	out := run.wait()
	obs, code := out.obs, out.code
	n := hits.Load()
	recs, rerr := audit.ReadRecordsFile(log)
	var startSum, reloadSum, reloadAction, reloadErr string
	for _, rec := range recs {
		var f struct {
			Action string `json:"action"`
			Sum    string `json:"policy_sha256"`
			Error  string `json:"error"`
		}
		json.Unmarshal(rec.Raw, &f)
		switch rec.Name {
		case "start":
			startSum = f.Sum
		case "policy":
			reloadSum, reloadAction, reloadErr = f.Sum, f.Action, f.Error
			st.seqs = append(st.seqs, rec.Seq)
			st.recs = append(st.recs, rec.Raw)
		}
	}
	st.hostCheck = fmt.Sprintf("policy folder re-pointed to the worker's folder: %v; the loopback server (%s:%d) counted %d connections; start policy sha256 %s, policy record %s sha256 %s %q; exit %d (%s %s)",
		repointed, attack.RelinkName, attack.RelinkPort, n, startSum, reloadAction, reloadSum, reloadErr, code, cfg.Self, strings.Join(args, " "))
	switch {
	case n > 0 || obs != nil && obs.Observed == attack.Allowed:
		st.detail = fmt.Sprintf("the loopback server counted %d connections after the reload", n)
		if obs != nil {
			st.detail += "; the worker: " + obs.Detail
		}
	case rerr == nil && reloadSum != "" && reloadSum != startSum:
		st.detail = "the reload put another policy in force (sha256 " + reloadSum + ")"
	case !repointed:
		st.errored = "the worker never wrote its policy, or the folder could not be re-pointed: " + judge.LastLines(out.stderr, 3)
	case obs == nil || obs.Observed != attack.Blocked:
		st.errored = fmt.Sprintf("the run (exit %d) reported no refusal: %s", code, judge.LastLines(out.stderr, 3))
	case rerr != nil || reloadSum == "" || startSum == "":
		st.errored = fmt.Sprintf("the run's log has no start and policy records with a sha256 (%v)", rerr)
	default:
		st.blocked = true
		st.detail = "after the re-point and SIGHUP the policy record carries the start policy's sha256, and the loopback server counted no connection; the worker: " + obs.Detail
	}
	return st
}

func learnHostsLoopback(ctx context.Context, cfg Config, res judge.Result, h *attack.HostEnv, env []string, base string) judge.Result {
	var hits atomic.Int64
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(attack.LearnLoopbackPort)))
	if err != nil {
		return erroredResult(res, "the loopback server: "+err.Error())
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Write([]byte("SSH-2.0-lab\r\n"))
			c.Close()
		}
	}()
	own := filepath.Join(base, "learn-nsgate")
	if err := os.MkdirAll(own, 0o755); err != nil {
		return erroredResult(res, err.Error())
	}
	os.Chmod(own, 0o777)
	pol := filepath.Join(own, "start.yaml")
	text := "version: 1\nallow:\n  - host: " + attack.LearnLoopbackName + "\n    ports: [8080]\ndns:\n  upstream: [\"" + internet.UpstreamDNS + "\"]\n  hosts:\n    " + attack.LearnLoopbackName + ": [127.0.0.1]\n"
	if err := os.WriteFile(pol, []byte(text), 0o644); err != nil {
		return erroredResult(res, err.Error())
	}
	learned := filepath.Join(own, "learned.yaml")
	log := filepath.Join(own, "audit.jsonl")
	args := append([]string{"run", "--learn", learned, "--policy", pol, "--audit", log, "--quiet"}, attackerArgs(cfg, h, res.ID, "")...)
	r := runOwn(ctx, cfg, res.ID, env, args)
	n := hits.Load()
	data, lerr := os.ReadFile(learned)
	recs, rerr := audit.ReadRecordsFile(log)
	var deny json.RawMessage
	for _, rec := range recs {
		if rec.Name == "flow" && rec.Action() == "deny" && bytes.Contains(rec.Raw, []byte(`"builtin:special-range"`)) &&
			bytes.Contains(rec.Raw, []byte(":"+strconv.Itoa(attack.LearnLoopbackPort)+`"`)) {
			deny = rec.Raw
			res.AuditSeqs = append(res.AuditSeqs, rec.Seq)
			res.Audit = append(res.Audit, rec.Raw)
		}
	}
	// The learned file, decided as nsgate would decide under it: does it
	// allow the name's loopback address on the port?
	learnedAllows := false
	if lerr == nil {
		lp, perr := policy.Parse(learned, data)
		if perr != nil {
			return erroredResult(res, "the learned file does not parse: "+perr.Error())
		}
		d := lp.Decide(policy.Flow{Proto: policy.TCP, Host: attack.LearnLoopbackName, Addr: netip.MustParseAddr("127.0.0.1"), Port: attack.LearnLoopbackPort})
		learnedAllows = d.Verdict == policy.Allow
	}
	res.HostCheck = fmt.Sprintf("%s: the loopback server counted %d connections; learned file %s (%d bytes; under it 127.0.0.1:%d allowed: %v); %d records in %s (%s %s)",
		res.HostCheck, n, learned, len(data), attack.LearnLoopbackPort, learnedAllows, len(recs), log, cfg.Self, strings.Join(args, " "))
	switch {
	case n > 0 || r.obs != nil && r.obs.Observed == attack.Allowed:
		res.Observed = attack.Allowed
		res.Detail = fmt.Sprintf("the loopback server counted %d connections", n)
		if r.obs != nil {
			res.Detail += "; the worker: " + r.obs.Detail
		}
		res.Why = "got through: " + res.Detail
	case learnedAllows:
		res.Observed = attack.Allowed
		res.Detail = "the learned file allows the loopback port: " + string(data)
		res.Why = "got through: " + res.Detail
	case r.obs == nil:
		return erroredResult(res, fmt.Sprintf("the run (exit %d) reported no observation: %s", r.code, judge.LastLines(r.stderr, 3)))
	case r.obs.Observed != attack.Blocked:
		return erroredResult(res, r.obs.Detail)
	case lerr != nil:
		return erroredResult(res, "no learned file: "+lerr.Error())
	case rerr != nil || deny == nil:
		res.Observed = attack.Blocked
		res.Detail = r.obs.Detail + "; the loopback server counted no connection"
		res.Why = "blocked, but the run's log has no deny record with rule builtin:special-range for the port"
		if rerr != nil {
			res.Why += ": " + rerr.Error()
		}
	default:
		res.Observed, res.Pass = attack.Blocked, true
		res.Detail = r.obs.Detail + "; the loopback server counted no connection; the learned file does not allow the port"
	}
	return res
}
