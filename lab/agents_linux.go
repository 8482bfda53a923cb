package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
)

// DefaultNodeModules is where the lab looks for the npm packages of the
// browser agents (playwright-core, @playwright/mcp, the MCP SDK) unless
// $NSGATE_NODE_MODULES names another folder.
const DefaultNodeModules = "/var/cache/nsgate/node/node_modules"

// agentRun is the outcome of one agent phase (runAgent).
type agentRun struct {
	agent    string
	attempts []attack.Attempt
	obs      []attack.Observation
	command  []string
	started  time.Time
	// recStart is the number of audit records before the phase.
	recStart int
	exitCode int
	stderr   string
	reported string // the audit head its nsgate run printed
	// skipped says why the phase did not run (node or a package is
	// missing); err why it could not run to its end.
	skipped string
	err     error
}

// agentNeeds finds node and the agent's npm packages; it returns why the
// agent cannot run, or "".
func agentNeeds(agent string) (node, modules, why string) {
	modules = os.Getenv("NSGATE_NODE_MODULES")
	if modules == "" {
		modules = DefaultNodeModules
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", modules, "node is not installed (Debian package nodejs)"
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		return "", modules, "node: " + err.Error()
	}
	need := []string{"playwright-core/package.json"}
	if agent == attack.AgentMCP {
		need = append(need, "@playwright/mcp/cli.js", "@modelcontextprotocol/sdk/package.json")
	}
	for _, n := range need {
		if _, err := os.Stat(filepath.Join(modules, n)); err != nil {
			return "", modules, "npm package file " + filepath.Join(modules, n) + " is missing (docs/agents.md says how to install it)"
		}
	}
	return node, modules, ""
}

// runAgent runs one browser agent's attempts (attack.PlaywrightAttempts
// or MCPAttempts) under `nsgate run --block-page` with the lab policy,
// appending to the lab's audit log, and copies each attempt's screenshot
// into the evidence folder.
//
// The Playwright agent is the worker: node runs playwright-core, which
// starts Chromium (Playwright passes --no-sandbox itself). The MCP agent
// is the MCP SDK's client, run by the lab outside the sandbox; the worker
// is @playwright/mcp, which the client starts as `nsgate run ... -- node
// cli.js` and speaks to over stdio.
func runAgent(ctx context.Context, cfg Config, agent, polFile, auditPath, work string, env []string) *agentRun {
	ar := &agentRun{agent: agent, started: time.Now(), attempts: attack.PlaywrightAttempts()}
	if agent == attack.AgentMCP {
		ar.attempts = attack.MCPAttempts()
	}
	if r, err := audit.ReadRecordsFile(auditPath); err == nil {
		ar.recStart = len(r)
	}
	node, modules, why := agentNeeds(agent)
	if why != "" {
		ar.skipped = why
		return ar
	}
	chromium := cfg.Browser
	dir := filepath.Join(work, "agent-"+agent)
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		ar.err = err
		return ar
	}
	steps := filepath.Join(dir, "steps.json")
	script := filepath.Join(dir, agent+"-agent.js")
	src := attack.PlaywrightAgentScript
	if agent == attack.AgentMCP {
		src = attack.MCPAgentScript
	}
	if err := errors.Join(os.WriteFile(steps, attack.AgentSteps(agent), 0o644), os.WriteFile(script, []byte(src), 0o644)); err != nil {
		ar.err = err
		return ar
	}
	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o700)
	run := []string{cfg.Self, "run", "--policy", polFile, "--audit", auditPath, "--audit-key", labKeyFile(work),
		"--block-page", "--ro", work, "--rw", out, "--allow-unix", "--exec-allow", chromium}
	if crash := filepath.Join(filepath.Dir(chromium), "chrome_crashpad_handler"); fileExists(crash) {
		run = append(run, "--exec-allow", crash)
	}
	asRoot := os.Getuid() == 0
	if !asRoot {
		run = append(run, "--allow-userns")
	}
	var cmd *exec.Cmd
	gctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cenv := agentEnv(env, home)
	switch agent {
	case attack.AgentPlaywright:
		run = append(run, "--", node, script, steps, out)
		cmd = exec.CommandContext(gctx, run[0], run[1:]...)
		cenv = append(cenv, "PW_CORE="+filepath.Join(modules, "playwright-core"), "PW_CHROMIUM="+chromium)
		ar.command = run
	default:
		run = append(run, "--quiet", "--", node, filepath.Join(modules, "@playwright", "mcp", "cli.js"),
			"--headless", "--isolated", "--executable-path", chromium, "--output-dir", out)
		if asRoot {
			run = append(run, "--no-sandbox")
		}
		sj, _ := json.Marshal(run)
		cmd = exec.CommandContext(gctx, node, script, steps, out)
		cenv = append(cenv, "MCP_SDK="+filepath.Join(modules, "@modelcontextprotocol", "sdk"), "MCP_SERVER="+string(sj))
		ar.command = append([]string{node, script, steps, out, "# with MCP_SERVER="}, run...)
	}
	cmd.Env = cenv
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	var stdout strings.Builder
	errs := &tail{max: 32 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, errs
	fmt.Fprintf(cfg.Stderr, "nsgate lab: %d %s agent attempts under nsgate run --block-page\n", len(ar.attempts), agent)
	werr := cmd.Run()
	ar.exitCode = attack.ExitCode(werr)
	ar.stderr = errs.String()
	if m := regexp.MustCompile(`nsgate: audit head ([0-9a-f]{64})`).FindAllStringSubmatch(ar.stderr, -1); m != nil {
		ar.reported = m[len(m)-1][1]
	}
	obs, shots, _ := attack.ParseAgentReports(stdout.String())
	byID := map[string]attack.Attempt{}
	for _, at := range ar.attempts {
		byID[at.ID] = at
	}
	for i, o := range obs {
		if b, err := os.ReadFile(shots[o.ID]); err == nil {
			if rel, err := attack.SaveScreenshot(cfg.Evidence, o.ID, b); err == nil {
				obs[i].Screenshot = rel
			}
		}
		at := byID[o.ID]
		mark := "ok"
		if o.Observed != at.Expect {
			mark = "UNEXPECTED"
		}
		fmt.Fprintf(cfg.Stderr, "[%s] %-30s %-8s %-10s %s\n", agent, audit.TermText(o.ID), o.Observed, mark, shorten(audit.TermText(o.Detail), 90))
	}
	ar.obs = obs
	if len(obs) != len(ar.attempts) && ar.err == nil {
		ar.err = fmt.Errorf("the %s agent reported %d of %d attempts (exit %d)", agent, len(obs), len(ar.attempts), ar.exitCode)
	}
	return ar
}

// agentEnv is the lab's environment for an agent run: the host's session
// bus and agents left out, the home and caches in the run's own folder.
func agentEnv(env []string, home string) []string {
	var out []string
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "PLAYWRIGHT_BROWSERS_PATH":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
}

// toolVersions are the versions of the browser stack a --browser run
// uses, as the programs and packages themselves state them.
func toolVersions(ctx context.Context, chromium string) []string {
	var out []string
	ver := func(name string, argv ...string) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		b, err := exec.CommandContext(cctx, argv[0], argv[1:]...).Output()
		if err != nil {
			out = append(out, name+": unknown ("+err.Error()+")")
			return
		}
		out = append(out, name+": "+strings.TrimSpace(string(b)))
	}
	ver("browser", chromium, "--version")
	node, modules, _ := agentNeeds(attack.AgentMCP)
	if node == "" {
		if n, err := exec.LookPath("node"); err == nil {
			node = n
		}
	}
	if node != "" {
		ver("node", node, "--version")
	}
	for _, pkg := range []string{"playwright-core", "@playwright/mcp", "@modelcontextprotocol/sdk"} {
		b, err := os.ReadFile(filepath.Join(modules, pkg, "package.json"))
		if err != nil {
			continue
		}
		var v struct{ Version string }
		if json.Unmarshal(b, &v) == nil && v.Version != "" {
			out = append(out, pkg+" "+v.Version)
		}
	}
	return out
}
