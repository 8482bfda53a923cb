package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
)

// The lab's side of the containment attempts: what it sets up on the host
// before the run, the host checks after it, and the run of its own that
// fills an audit volume.

// auditVolumeSize is the size of the tmpfs the fill attempt's log lies on.
const auditVolumeSize = 64 << 10

// setupContainment creates, below h.Work, the caller's home (with its
// canary), the --rw directory and the audit key, creates the audit log
// empty (so that its inode is known before nsgate opens it), and takes
// the snapshots the host checks compare with.
func setupContainment(h *hostEnv) error {
	for _, d := range []string{h.Home, h.RW} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	canary := filepath.Join(h.Home, HomeCanary)
	if err := os.WriteFile(canary, []byte("canary "+h.Token+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(h.sshKey()), 0o700); err != nil {
		return err
	}
	fake := "-----BEGIN OPENSSH PRIVATE KEY-----\nnsgate-lab fake key " + h.Token + " " + randHex(24) + "\n-----END OPENSSH PRIVATE KEY-----\n"
	if err := os.WriteFile(h.sshKey(), []byte(fake), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(h.AuditKey, []byte(randHex(32)+"\n"), 0o600); err != nil {
		return fmt.Errorf("audit key: %w", err)
	}
	f, err := os.OpenFile(h.AuditLog, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	f.Close()
	for _, p := range []string{h.Policy, h.AuditKey, canary, h.sshKey(), h.AuditLog} {
		if err := h.snapshot(p); err != nil {
			return err
		}
	}
	return nil
}

// hostChecks makes the host check of every attempt of cat that has one.
func (h *hostEnv) hostChecks(cat []Attempt) map[string]HostResult {
	out := make(map[string]HostResult)
	for _, at := range cat {
		if at.host == nil {
			continue
		}
		if _, ran := h.obs[at.ID]; !ran {
			continue
		}
		out[at.ID] = at.host(h, at)
	}
	return out
}

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

// fillRun is the outcome of the fill phase.
type fillRun struct {
	command         []string
	started, ended  time.Time
	obs             []Observation
	exitCode        int
	stderr          string
	copy            string // the evidence copy of the log nsgate wrote
	err             error  // the phase could not run
	volume, logPath string
}

// runAuditFill runs the fill attempt in an `nsgate run` of its own whose
// audit log lies on a tmpfs of auditVolumeSize bytes. The lab mounts it
// through a helper (`nsgate __attack --helper audit-volume`) started in a
// mount namespace of its own, which works as root and, rootless, as root
// of the lab's sealed user namespace; the helper copies the log and its
// head file into the evidence folder when nsgate run has exited.
func runAuditFill(ctx context.Context, cfg Config, h *hostEnv, breakArgs, env []string) *fillRun {
	fr := &fillRun{volume: filepath.Join(h.Work, "audit-volume")}
	fr.logPath = filepath.Join(fr.volume, EvidenceAudit)
	fr.copy = filepath.Join(cfg.Evidence, EvidenceAuditFill)
	if err := os.MkdirAll(fr.volume, 0o700); err != nil {
		fr.err = err
		return fr
	}
	run := []string{"run", "--policy", h.Policy, "--audit", fr.logPath, "--audit-key", h.AuditKey, "--ro", h.Work, "--quiet"}
	run = append(append(run, breakArgs...), "--", cfg.Self)
	run = append(run, cfg.AttackArgs...)
	run = append(run, "--json", "--only", "audit-fill-volume", "--token", h.Token)
	args := append(append([]string(nil), cfg.AttackArgs...), "--helper", "audit-volume", fr.volume, strconv.Itoa(auditVolumeSize), fr.copy, "--", cfg.Self)
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
		fr.err = err
		return fr
	}
	fr.started = time.Now()
	if err := cmd.Start(); err != nil {
		fr.err = fmt.Errorf("start the audit volume helper: %w", err)
		return fr
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var o Observation
		if json.Unmarshal(sc.Bytes(), &o) == nil && o.ID != "" {
			fr.obs = append(fr.obs, o)
		}
	}
	werr := cmd.Wait()
	fr.ended = time.Now()
	fr.stderr = stderr.String()
	fr.exitCode = exitCode(werr)
	return fr
}

// auditFailLines are the lines of stderr that report the audit failure.
func auditFailLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "audit log failed") {
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

// judgeAuditFill judges the fill attempt on the fill run: the worker saw
// the refusal (the resolver's REFUSED, a refused flow, or nsgate ending it
// mid-flood); the unapproved server saw nothing and app.test no connection
// the log does not hold; nsgate exited 125 with one line naming the
// audit failure; and the records it wrote verify with the key against
// their head file.
func judgeAuditFill(at Attempt, fr *fillRun, hits []Hit, key []byte) Result {
	res := Result{
		ID: at.ID, Category: at.Category, Layer: at.Layer, Description: at.Description,
		Expected: at.Expect, AuditSeqs: []uint64{}, Audit: []json.RawMessage{}, Hits: []Hit{},
		Start: fr.started, End: fr.ended,
	}
	fail := func(why string) Result {
		res.Why = why
		return res
	}
	if fr.err != nil {
		res.Observed, res.Detail = Errored, fr.err.Error()
		return fail("could not be carried out: " + fr.err.Error())
	}
	var last *Observation
	for i := range fr.obs {
		if fr.obs[i].ID == at.ID {
			last = &fr.obs[i]
		}
	}
	lines := auditFailLines(fr.stderr)
	stopped := fr.exitCode == 125 && len(lines) == 1
	switch {
	case last == nil:
		res.Observed, res.Detail = Errored, "the worker reported nothing (nsgate run exited "+strconv.Itoa(fr.exitCode)+": "+firstLines(fr.stderr, 3)+")"
	case last.Partial && stopped:
		res.Observed, res.Detail = Blocked, last.Detail+"; then nsgate stopped the worker: "+lines[0]
	case last.Partial:
		res.Observed, res.Detail = Errored, "the worker was ended while it "+last.Detail+" (nsgate run exited "+strconv.Itoa(fr.exitCode)+")"
	default:
		res.Observed, res.Detail = last.Observed, last.Detail
	}
	// The fake targets, during the fill run.
	apps, others := 0, 0
	for _, hh := range hits {
		if hh.Time.Before(fr.started) || hh.Time.After(fr.ended) {
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
	s, verr := audit.Check(fr.copy, key, "")
	recs, _ := audit.ReadRecordsFile(fr.copy)
	allowed := 0
	for _, r := range recs {
		if r.Name == "flow" && r.Action() == "allow" {
			allowed += max(1, int(r.Count()))
		}
	}
	denied := 0
	for _, r := range recs {
		if d, ok := r.Event.(audit.DNS); ok && d.Action == "deny" && strings.HasSuffix(strings.TrimSuffix(d.QName, "."), "."+floodZone) {
			denied++
		}
	}
	res.HostCheck = fmt.Sprintf("%s: the unapproved server saw %d connection(s) and app.test %d (the log holds %d allowed flow(s)); nsgate run exited %d", at.HostCheck, others, apps, allowed, fr.exitCode)
	if len(lines) > 0 {
		res.HostCheck += " saying " + strconv.Quote(lines[0])
	}
	all := nonEmptyLines(fr.stderr)
	if len(all) != len(lines) {
		res.HostCheck += fmt.Sprintf(" (its standard error, with the worker's, has %d lines: %s)", len(all), lastLines(fr.stderr, 5))
	}
	if verr == nil {
		res.Evidence = fmt.Sprintf("the log on the %d KiB volume (copied to %s): %d records, %d of them refused %s names, MACs checked %v, anchored by its head file %v, closed %v",
			auditVolumeSize>>10, filepath.Base(fr.copy), s.Records, denied, floodZone, s.MACsChecked, s.Anchor != "" && s.Anchor == s.Head, s.Closed)
	}
	var why []string
	if res.Observed == Errored {
		return fail("could not be carried out: " + res.Detail)
	}
	if res.Observed != Blocked {
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
	case fr.exitCode != 125:
		return fail(fmt.Sprintf("blocked, but nsgate run exited %d, not 125 (stderr: %s)", fr.exitCode, lastLines(fr.stderr, 3)))
	case len(lines) != 1:
		return fail(fmt.Sprintf("blocked, but nsgate said %d lines naming the audit failure, not one: %q", len(lines), lines))
	case len(all) != 1:
		return fail(fmt.Sprintf("blocked, but nsgate's standard error has %d lines, not just the one naming the audit failure: %s", len(all), lastLines(fr.stderr, 5)))
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

// auditVolumeHelper is the helper `audit-volume DIR SIZE COPY -- CMD...`:
// run in a mount namespace of its own (the lab starts it with
// CLONE_NEWNS), it makes its mounts private, mounts a tmpfs of SIZE bytes
// on DIR, runs CMD with this process's standard streams (forwarding
// SIGINT and SIGTERM), then copies DIR/audit.jsonl and its head file to
// COPY and COPY.head, and exits with CMD's status.
func auditVolumeHelper(args []string, stdout, stderr io.Writer) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(stderr, "helper: usage: audit-volume DIR SIZE COPY -- CMD...")
		return 2
	}
	dir, size, copyTo, argv := args[0], args[1], args[2], args[4:]
	if _, err := strconv.Atoi(size); err != nil {
		fmt.Fprintf(stderr, "helper: size %q: %v\n", size, err)
		return 2
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(stderr, "helper: make mounts private: %v\n", err)
		return 2
	}
	if err := unix.Mount("nsgate-lab-audit", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size="+size+",mode=0700"); err != nil {
		fmt.Fprintf(stderr, "helper: mount a %s-byte tmpfs on %s: %v\n", size, dir, err)
		return 2
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "helper: %v\n", err)
		return 2
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	code := exitCode(cmd.Wait())
	log := filepath.Join(dir, EvidenceAudit)
	for _, p := range [][2]string{{log, copyTo}, {audit.HeadFile(log), audit.HeadFile(copyTo)}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			fmt.Fprintf(stderr, "helper: %v\n", err)
			continue
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			fmt.Fprintf(stderr, "helper: %v\n", err)
		}
	}
	return code
}
