package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
)

func init() { extraCommands["guard"] = cmdGuard }

// applyGuard is handed to the sandbox init: it decodes the guard.Config
// that run wrote, resolves the allowlist inside the worker's mount
// namespace and restricts every thread of init before the worker starts.
func applyGuard(spec []byte, argv []string) (string, []string, error) {
	var cfg guard.Config
	if err := json.Unmarshal(spec, &cfg); err != nil {
		return "", nil, fmt.Errorf("exec guard spec: %w", err)
	}
	cfg.Command = argv
	plan, err := guard.Resolve(cfg)
	if err != nil {
		return "", nil, err
	}
	degraded, err := plan.Apply(cfg)
	if err != nil {
		return "", nil, err
	}
	return plan.Path, degraded, nil
}

// guardPreflight checks, before any namespace exists, that the guard can be
// enforced, so a missing layer is one clear line and exit 125 (fail closed).
// Under best-effort it returns the layers that will be missing.
func guardPreflight(bestEffort bool) ([]string, error) {
	sup := guard.Probe()
	var missing []string
	var errs []error
	if sup.LandlockABI == 0 {
		missing = append(missing, guard.LayerLandlock)
		errs = append(errs, &guard.MissingLayerError{Layer: guard.LayerLandlock, Why: sup.LandlockWhy})
	}
	if !sup.Seccomp {
		missing = append(missing, guard.LayerSeccomp)
		errs = append(errs, &guard.MissingLayerError{Layer: guard.LayerSeccomp, Why: sup.SeccompWhy})
	}
	if len(errs) > 0 && !bestEffort {
		return nil, errors.Join(errs...)
	}
	return missing, nil
}

// cmdGuard: nsgate guard [--exec-allow PATH]... [--audit FILE] -- COMMAND.
// The exec/syscall guard alone, for a container whose network nsgate
// already provides: it restricts itself and execs COMMAND in place.
func cmdGuard(e env, args []string) int {
	fs := flag.NewFlagSet("nsgate guard", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var allow listFlag
	fs.Var(&allow, "exec-allow", "`PATH` (file or directory) the command may execute (repeatable)")
	auditPath := fs.String("audit", "", "append a JSON-lines audit record of the start to `FILE`")
	userns := fs.Bool("allow-userns", false, "let the command create namespaces")
	unixSock := fs.Bool("allow-unix", false, "let the command create AF_UNIX sockets")
	mode := fs.String("exec-guard", "strict", "`strict`, or best-effort: start even if Landlock or seccomp is missing")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
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
	plan, err := guard.Resolve(cfg)
	if err != nil {
		e.errorf("guard: %v", err)
		return exitFailure
	}
	runtime.LockOSThread()
	degraded, err := plan.Apply(cfg)
	if err != nil {
		e.errorf("guard: %v", err)
		return exitFailure
	}
	if len(degraded) > 0 {
		e.errorf("guard: running without %s (--exec-guard=best-effort)", strings.Join(degraded, ", "))
	}
	if *auditPath != "" {
		log, err := audit.Open(*auditPath, audit.Options{})
		if err != nil {
			e.errorf("guard: audit log: %v", err)
			return exitFailure
		}
		log.Log(audit.Start{Version: versionString(), Argv: cfg.Command, PID: os.Getpid(), Degraded: degraded})
		log.Log(audit.Exec{Action: "allow", Path: plan.Path, PID: os.Getpid()})
		if _, err := log.Close(); err != nil {
			e.errorf("guard: audit log: %v", err)
			return exitFailure
		}
	}
	err = unix.Exec(plan.Path, cfg.Command, os.Environ())
	e.errorf("guard: exec %s: %v", plan.Path, err)
	return exitFailure
}
