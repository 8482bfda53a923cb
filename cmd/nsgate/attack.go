package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/lab"
)

// `nsgate __attack` (hidden) is the lab's attacker: it runs inside the
// worker and tries every attempt of the catalogue, in pure Go, printing
// one line per attempt (a JSON lab.Observation with --json). It exits 0
// once every attempt has run, whatever they observed; 2 on usage errors.
//
//	nsgate __attack [--json] [--ca FILE] [--unix PATH] [--abstract @NAME] [--only IDS] [--timeout D]
//	                [--token T] [--policy-file F] [--audit-file F] [--key-file F] [--work-dir D] [--rw-dir D]
//	nsgate __attack --helper CMD ARGS...   (its own helper processes, and the lab's)

func cmdAttack(e env, args []string) int {
	if len(args) > 0 && args[0] == "--helper" {
		return lab.AttackHelper(args[1:], e.stdout, e.stderr)
	}
	fs := flag.NewFlagSet("nsgate __attack", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	asJSON := fs.Bool("json", false, "one JSON observation per line")
	ca := fs.String("ca", "", "lab CA certificate `FILE` (PEM) for the HTTPS controls")
	unixPath := fs.String("unix", "", "host-side unix socket `PATH` to try")
	abstract := fs.String("abstract", "", "host-side abstract unix socket `@NAME` to try")
	only := fs.String("only", "", "run only these attempt `IDS` (comma-separated)")
	timeout := fs.Duration("timeout", 2*time.Second, "bound on one network operation")
	token := fs.String("token", "", "`TOKEN` unique to the run, naming the files the containment attempts write")
	policyFile := fs.String("policy-file", "", "nsgate's policy `FILE` (host path) to try to read")
	auditFile := fs.String("audit-file", "", "nsgate's audit log `FILE` (host path) to try to read, delete, truncate and replace")
	keyFile := fs.String("key-file", "", "nsgate's audit key `FILE` (host path) to try to read")
	workDir := fs.String("work-dir", "", "the lab's work `DIR` (shown read-only) to try to write")
	rwDir := fs.String("rw-dir", "", "the --rw `DIR` the lab gives the worker")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	cfg := lab.AttackConfig{
		CAFile:     *ca,
		UnixPath:   *unixPath,
		Abstract:   *abstract,
		HelperArgs: []string{"__attack", "--helper"},
		Timeout:    *timeout,
		Token:      *token,
		PolicyFile: *policyFile,
		AuditFile:  *auditFile,
		AuditKey:   *keyFile,
		WorkDir:    *workDir,
		RWDir:      *rwDir,
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	enc := json.NewEncoder(e.stdout)
	emit := func(o lab.Observation) {
		if *asJSON {
			enc.Encode(o)
			return
		}
		if o.Partial {
			fmt.Fprintf(e.stdout, "%-26s %-8s %s\n", o.ID, "...", o.Detail)
			return
		}
		fmt.Fprintf(e.stdout, "%-26s %-8s %s\n", o.ID, o.Observed, o.Detail)
	}
	if err := lab.Attack(ctx, cfg, emit); err != nil {
		e.errorf("attack: %v", err)
		if ctx.Err() != nil {
			return 130
		}
		return exitUsage
	}
	return 0
}
