package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/judge"
)

// runUnixPhase runs attempt at (attack.PhaseSessionBus or
// attack.PhaseEngineSocket) in an `nsgate run --allow-unix` of its own,
// with a host-side socket that answers attack.SessionBusBanner and counts
// connections, in a directory of the work tree, which the run shows the
// worker read-only (--ro, as the main run does).
//
// PhaseSessionBus: the caller's environment names a session bus in a
// runtime directory outside /run/user/UID (0700) at $XDG_RUNTIME_DIR/bus.
// A session bus there would let the worker ask `systemd --user` or D-Bus
// activation to run any command outside the sandbox; the view must make
// the runtime directory private and hide the socket
// DBUS_SESSION_BUS_ADDRESS names.
//
// PhaseEngineSocket: DOCKER_HOST names a container engine's socket in a
// directory open to all. An engine would start a privileged container for
// the worker; the view must hide the socket DOCKER_HOST names.
func runUnixPhase(ctx context.Context, cfg Config, at attack.Attempt, h *attack.HostEnv, env []string) (res judge.Result) {
	res = ownRunResult(at)
	// res is the named result: the end is stamped on what is returned.
	defer func() { res.End = time.Now() }()
	errored := func(why string) judge.Result { return erroredResult(res, why) }
	dir := filepath.Join(h.Work, at.Phase)
	rt := filepath.Join(dir, "runtime")
	if err := os.MkdirAll(rt, 0o700); err != nil {
		return errored(err.Error())
	}
	os.Chmod(dir, 0o755)
	os.Chmod(rt, 0o700)
	bus, envKey, envVal := filepath.Join(rt, "bus"), "DBUS_SESSION_BUS_ADDRESS", ""
	switch at.Phase {
	case attack.PhaseSocketSweep: // a socket no variable names
		bus, envKey = filepath.Join(dir, "app.sock"), ""
	case attack.PhaseEngineSocket:
		bus, envKey = filepath.Join(dir, "docker.sock"), "DOCKER_HOST"
		envVal = "unix://" + bus
	default:
		envVal = "unix:path=" + bus
	}
	var hits atomic.Int64
	ln, err := internet.ListenUnixCounting(bus, &hits, func(c net.Conn) {
		fmt.Fprintf(c, "%s %s\n", attack.SessionBusBanner, h.Token)
	})
	if err != nil {
		return errored(err.Error())
	}
	defer ln.Close()

	// The run's audit log in a folder of its own: nsgate hides the
	// folder of its log whole, which must not be the bus's.
	logDir := filepath.Join(h.Work, at.Phase+"-audit")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return errored(err.Error())
	}
	args := []string{"run", "--allow-unix", "--policy", h.Policy, "--audit", filepath.Join(logDir, "audit.jsonl"), "--ro", h.Work, "--quiet", "--", cfg.Self}
	args = append(args, cfg.AttackArgs...)
	args = append(args, "--json", "--only", at.ID, "--token", h.Token)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, cfg.Self, args...)
	var e []string
	for _, kv := range withRuntime(env, rt) {
		if !strings.HasPrefix(kv, envKey+"=") {
			e = append(e, kv)
		}
	}
	cmd.Env = e
	if envKey != "" {
		cmd.Env = append(e, envKey+"="+envVal)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := &tail{max: 4 << 10}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return errored(err.Error())
	}
	if err := cmd.Start(); err != nil {
		return errored(err.Error())
	}
	var obs *attack.Observation
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var o attack.Observation
		if json.Unmarshal(sc.Bytes(), &o) == nil && o.ID == at.ID && !o.Partial {
			obs = &o
		}
	}
	werr := cmd.Wait()
	n := hits.Load()
	setting := ""
	if envKey != "" {
		setting = " " + envKey + "=" + envVal
	}
	res.HostCheck = fmt.Sprintf("%s: %d connections (XDG_RUNTIME_DIR=%s%s %s %s)",
		at.HostCheck, n, rt, setting, cfg.Self, strings.Join(args, " "))
	switch {
	case n > 0 || obs != nil && obs.Observed == attack.Allowed:
		res.Observed = attack.Allowed
		res.Detail = fmt.Sprintf("the socket counted %d connections", n)
		if obs != nil {
			res.Detail += "; the worker: " + obs.Detail
		}
		res.Why = "got through: " + res.Detail
	case obs == nil:
		return errored(fmt.Sprintf("the run (exit %d) reported no observation: %s", attack.ExitCode(werr), judge.LastLines(stderr.String(), 3)))
	case obs.Observed == attack.Blocked:
		res.Observed, res.Pass = attack.Blocked, true
		res.Detail = obs.Detail + "; the socket counted no connection"
	default:
		return errored(obs.Detail)
	}
	return res
}
