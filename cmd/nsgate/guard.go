package main

import (
	"errors"
	"os"
	"strings"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/cliflag"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/session"
)

// cmdGuard: nsgate guard [--exec-allow PATH]... [--audit FILE] -- COMMAND.
// The exec/syscall guard alone, for a container whose network nsgate
// already provides.
//
// The exec audit needs a process outside the guard to answer the
// notifier (Landlock gives each thread of a restricted Go process a domain
// of its own, and a thread may not read /proc of a process in a sibling
// domain). So nsgate guard stays as a small supervisor: it re-executes
// itself as the guard child, which restricts itself, passes the notifier's
// listener back over a socketpair and executes COMMAND in place. The
// supervisor answers and audits every exec, forwards signals, reaps
// orphans (it may be PID 1 of a container) and exits with COMMAND's
// status (128+N when killed by signal N).
func cmdGuard(e env, args []string) int {
	fs := cliflag.New("nsgate guard", "Usage: nsgate guard [flags] -- COMMAND [ARG...]", e.stdout, e.stderr)
	var allow listFlag
	fs.Var(&allow, "exec-allow", "`PATH` (file or directory) the command may execute (repeatable)")
	auditPath := fs.String("audit", "", "append the JSON-lines audit log (start, every exec attempt, exit) to `FILE` (- for stderr)")
	userns := fs.Bool("allow-userns", false, "let the command create namespaces")
	unixSock := fs.Bool("allow-unix", false, "let the command create AF_UNIX sockets")
	mode := fs.String("exec-guard", "strict", "`strict`, or best-effort: start even if Landlock, seccomp or the exec audit is missing")
	quiet := fs.Bool("quiet", false, "no human-readable denial lines on stderr")
	// Hidden, for tests: guard layers to treat as missing (comma-separated).
	absent := fs.String("unsafe-break", "", "")
	fs.Hide("unsafe-break")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, cliflag.ErrHelp) {
			return 0
		}
		return exitFailure
	}
	if fs.NArg() == 0 {
		e.errorf("guard: no command given (usage: nsgate guard [flags] -- COMMAND [ARG...])")
		return exitFailure
	}
	if *mode != "strict" && *mode != "best-effort" {
		e.errorf("guard: --exec-guard %q: want strict or best-effort", *mode)
		return exitFailure
	}
	cfg := guard.Config{Command: fs.Args(), ExecAllow: allow, AllowUserns: *userns, AllowUnix: *unixSock, BestEffort: *mode == "best-effort"}
	for _, l := range strings.Split(*absent, ",") {
		switch l {
		case "":
		case guard.LayerLandlock, guard.LayerSeccomp, guard.LayerExecAudit:
			cfg.Absent = append(cfg.Absent, l)
		default:
			e.errorf("guard: --unsafe-break %q: only landlock, seccomp and exec-audit can be broken", *absent)
			return exitFailure
		}
	}
	plan, err := guard.Resolve(cfg)
	if err != nil {
		e.errorf("guard: %v", err)
		return exitFailure
	}
	missing, err := guard.Preflight(cfg)
	if err != nil {
		e.errorf("guard: exec guard cannot be enforced: %v", err)
		return exitFailure
	}
	// A session without a network: the audit log, its fail-closed
	// behaviour (a log that cannot be written ends the command, and nsgate
	// exits 125 naming the cause) and the exec audit.
	scfg := session.Config{
		AuditPath: *auditPath,
		Stderr:    e.stderr,
		Start:     audit.Start{Version: versionString(), Argv: cfg.Command, PID: os.Getpid(), Degraded: missing},
		NoNetwork: true,
	}
	if *auditPath != "-" && !*quiet {
		scfg.Human = e.stderr
	}
	s, err := session.Open(scfg)
	if err != nil {
		e.errorf("guard: %v", err)
		return exitFailure
	}
	return s.Close(guard.Supervise(guard.SuperviseOptions{
		Config: cfg,
		Serve:  s.ExecAudit(plan),
		Degraded: func(d string) {
			s.Log().Log(audit.Policy{Action: "degraded", Error: "not in force: " + d, Layers: []string{d}})
		},
		OnStart: s.StopOnAuditFailure,
		Stderr:  e.stderr,
	}))
}
