// Command nsgate runs an untrusted program behind a policy-enforcing egress
// gateway. See README.md and docs/ for the tour and the contract.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/audit/auditcli"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/internal/diag/pprofenv"
	"github.com/nsgate/nsgate/lab"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/learn"
	"github.com/nsgate/nsgate/pasta"
	"github.com/nsgate/nsgate/probe"
	workerprofile "github.com/nsgate/nsgate/profile"
	"github.com/nsgate/nsgate/sandbox"
)

func main() {
	// Descriptors the caller left open (without close-on-exec) must not
	// reach the worker: an inherited socket from the host's network
	// namespace would bypass the gateway. nsgate's own descriptors are
	// opened close-on-exec; anything it passes on, it passes explicitly.
	sandbox.CloseInheritedOnExec()
	args := os.Args[1:]
	// Invoked through a link named slirp4netns or pasta: act as that drop-in.
	if b := filepath.Base(os.Args[0]); b == "slirp4netns" || b == "pasta" {
		args = append([]string{b}, args...)
	}
	setProcs()
	stop := pprofenv.Start()
	code := Main(args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// setProcs gives the Go scheduler half of the CPUs the runtime would use
// (at least one), unless GOMAXPROCS is set. Most of a flow's cost is
// kernel work inside nsgate's system calls (a write to the TUN runs the
// worker's receive path, a loopback connect the whole handshake), which
// does not need a P; fewer Ps mean fewer cross-thread wake-ups at each
// hand-off between goroutines, and the worker and its servers need the
// other CPUs. Measured in docs/performance.md ("The gateway: flows,
// goroutines and memory", step 4).
func setProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(max(1, (runtime.GOMAXPROCS(0)+1)/2))
}

// Exit statuses of nsgate's own failures.
const (
	exitUsage   = 2   // check, explain, audit verify: bad input
	exitFailure = 125 // run: nsgate itself failed
)

// env carries a command's standard streams, so Main is testable.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func (e env) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "nsgate: "+format+"\n", args...)
}

// command is one nsgate subcommand.
type command struct {
	name string
	run  func(e env, args []string) int
	// args and help make its line in `nsgate help`; a hidden command (one
	// nsgate runs itself, or tests and the lab run as the worker) has
	// none.
	args, help string
}

// commands is every subcommand nsgate has, public ones in the order
// `nsgate help` lists them, then the hidden ones.
var commands = []command{
	{"run", cmdRun, "[flags] -- COMMAND [ARG...]", "run COMMAND as the worker"},
	{"check", cmdCheck, "FILE", "validate a policy file"},
	{"explain", cmdExplain, "--policy FILE [--proto tcp|udp] DEST:PORT", "the decision for one destination"},
	{"policy", func(e env, args []string) int { return learn.PolicyMain(args, e.stdout, e.stderr) }, "suggest AUDIT.jsonl [--policy CURRENT]", "rules that would have allowed a log's denials"},
	{"audit", func(e env, args []string) int { return auditcli.Main(args, e.stdout, e.stderr) }, "verify|show|stats [flags] FILE", "verify an audit log; show it readably (--follow); totals"},
	{"profile", func(e env, args []string) int { return workerprofile.Main(args, e.stdout, e.stderr) }, "list | show NAME", "the worker profiles (run --profile NAME)"},
	{"guard", cmdGuard, "[flags] -- COMMAND", "only the exec/syscall guard"},
	{"lab", func(e env, args []string) int {
		return lab.Main(args, lab.Stdio{Stdin: e.stdin, Stdout: e.stdout, Stderr: e.stderr}, versionLine())
	}, "[--evidence DIR] [--browser PATH]", "the built-in security lab"},
	{"slirp4netns", cmdSlirp4netns, "...", "drop-in for Podman's slirp4netns"},
	{"pasta", cmdPasta, "...", "drop-in for Podman 5's pasta"}, // pasta.Main, docs/podman.md
	{"version", cmdVersion, "", "print the version"},
	{"help", nil, "", "this list"}, // Main prints usage (a run func here would be an initialization cycle)

	// Hidden: nsgate's own children.
	{sandbox.InitArg, func(env, []string) int { return sandbox.InitMain(guard.ApplySandbox) }, "", ""},
	{sandbox.JoinArg, func(env, []string) int { return sandbox.JoinMain() }, "", ""},
	{guard.ChildArg, func(e env, _ []string) int { return guard.ChildMain(e.stderr) }, "", ""},
	// Hidden: what tests and the lab run as the worker.
	{"__attack", func(e env, args []string) int { return attack.Main(args, e.stdout, e.stderr) }, "", ""},
	{"__browserworker", func(e env, args []string) int { return attack.BrowserWorkerMain(args, e.stdout, e.stderr) }, "", ""},
	{"__probe", func(e env, args []string) int { return probe.Main(args, e.stdout, e.stderr) }, "", ""},
	{"__guardprobe", func(e env, args []string) int { return probe.GuardMain(args, e.stdout, e.stderr) }, "", ""},
}

// cmdPasta is `nsgate pasta ...`: pasta.Main has it all.
func cmdPasta(e env, args []string) int {
	start := audit.Start{Version: versionString(), Argv: os.Args, PID: os.Getpid()}
	return pasta.Main(args, pasta.Env{Stdout: e.stdout, Stderr: e.stderr, VersionLine: versionLine(), Start: start})
}

// aliases are other names of commands.
var aliases = map[string]string{"--version": "version", "-v": "version", "--help": "help", "-h": "help"}

// Main runs one nsgate command line (without the program name) and returns
// its exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{stdin, stdout, stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	if a, ok := aliases[name]; ok {
		name = a
	}
	for _, c := range commands {
		switch {
		case c.name != name:
		case c.run == nil:
			usage(e.stdout)
			return 0
		default:
			return c.run(e, args[1:])
		}
	}
	e.errorf("unknown command %q (try: nsgate help)", args[0])
	return exitUsage
}

func cmdVersion(e env, _ []string) int {
	fmt.Fprintln(e.stdout, versionLine())
	return 0
}

// usage lists the public commands.
func usage(w io.Writer) {
	fmt.Fprint(w, "nsgate: run an untrusted program behind an egress gateway\n\nUsage:\n")
	for _, c := range commands {
		if c.help == "" {
			continue
		}
		line := "nsgate " + c.name
		if c.args != "" {
			line += " " + c.args
		}
		if len(line) > 39 {
			fmt.Fprintf(w, "  %s\n  %-39s  %s\n", line, "", c.help)
		} else {
			fmt.Fprintf(w, "  %-39s  %s\n", line, c.help)
		}
	}
	fmt.Fprint(w, "\nRun 'nsgate COMMAND --help' for a command's flags.\n")
}
