package attack

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// The lab's two hidden commands, which nsgate runs as the worker: their
// command lines are the lab's own protocol with its attacker, so they live
// here; cmd/nsgate only lists them.

// mainEnv carries a hidden command's output streams.
type mainEnv struct{ stdout, stderr io.Writer }

func (e mainEnv) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "nsgate: "+format+"\n", args...)
}

// `nsgate __attack` (hidden) is the lab's attacker: it runs inside the
// worker and tries every attempt of the catalogue, in pure Go, printing
// one line per attempt (a JSON Observation with --json). It exits 0
// once every attempt has run, whatever they observed; 2 on usage errors.
//
//	nsgate __attack [--json] [--ca FILE] [--unix PATH] [--abstract @NAME] [--only IDS] [--timeout D]
//	                [--token T] [--policy-file F] [--audit-file F] [--key-file F] [--work-dir D] [--rw-dir D]
//	nsgate __attack --helper CMD ARGS...   (its own helper processes, and the lab's)

// Main is `nsgate __attack ARGS...`; it returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	e := mainEnv{stdout, stderr}
	if len(args) > 0 && args[0] == "--helper" {
		return Helper(args[1:], e.stdout, e.stderr)
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
		return 2
	}
	cfg := Config{
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
	emit := func(o Observation) {
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
	if err := Run(ctx, cfg, emit); err != nil {
		e.errorf("attack: %v", err)
		if ctx.Err() != nil {
			return 130
		}
		return 2
	}
	return 0
}

// `nsgate __browserworker` (hidden) is the worker of `nsgate lab
// --browser`: inside `nsgate run` it starts Chromium with its DevTools
// port on the worker's 127.0.0.1:PORT and relays the worker's
// 10.0.2.100:PORT (where --publish forwards) to it (BrowserWorker).
// It exits with Chromium's status; 125 if it could not start, 2 on usage
// errors.
//
//	nsgate __browserworker --chromium PATH [--port 9222] [--listen ADDR] -- CHROMIUM-ARGS...

// BrowserWorkerMain is `nsgate __browserworker ARGS...`; it returns the
// exit status.
func BrowserWorkerMain(args []string, stdout, stderr io.Writer) int {
	e := mainEnv{stdout, stderr}
	fs := flag.NewFlagSet("nsgate __browserworker", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	chromium := fs.String("chromium", "", "Chromium executable `PATH`")
	port := fs.Int("port", 9222, "Chromium's DevTools `PORT` on 127.0.0.1, relayed from the same port of --listen's address")
	listen := fs.String("listen", "", "relay listen `ADDR` (default "+internet.GuestV4+":PORT)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *chromium == "" {
		e.errorf("__browserworker: --chromium PATH is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := BrowserWorker(ctx, BrowserWorkerConfig{
		Chromium: *chromium,
		Args:     fs.Args(),
		Port:     *port,
		Listen:   *listen,
		Stdout:   e.stdout,
		Stderr:   e.stderr,
	})
	if err != nil {
		e.errorf("__browserworker: %v", err)
		return 125
	}
	return code
}
