package pasta

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// Env is what Main needs from nsgate's command table.
type Env struct {
	Stdout, Stderr io.Writer
	// VersionLine is nsgate's `version` line, for --version.
	VersionLine string
	// Start is the audit log's first record (version, argv, PID).
	Start audit.Start
}

// Main runs `nsgate pasta ARGS` and returns its exit status: --help and
// --version; otherwise, unless -f, it starts the detached copy and
// returns 0 once that copy serves (Background); in the copy (or with
// -f) it runs the helper until the namespace is gone (Start, then
// Helper.Serve). Errors go to Env.Stderr as one line, status ExitFailure;
// command-line errors in getopt's form after the program's name.
func Main(args []string, e Env) int {
	cfg, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintf(e.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		return ExitFailure
	}
	switch {
	case cfg.Help:
		fmt.Fprint(e.Stdout, Help())
		return 0
	case cfg.Version:
		fmt.Fprint(e.Stdout, Version(e.VersionLine))
		return 0
	}
	if cfg.Debug {
		for _, n := range cfg.Notes {
			fmt.Fprintln(e.Stderr, "nsgate pasta: "+n)
		}
	}
	ready, fail := ChildReady()
	if ready < 0 && !cfg.Foreground {
		if err := Background(args, time.Minute); err != nil {
			fmt.Fprintf(e.Stderr, "nsgate pasta: %v\n", err)
			return ExitFailure
		}
		return 0
	}
	// In the foreground (-f), whoever read standard error may stop: a
	// denial's line written then must fail with EPIPE, not kill the
	// helper with SIGPIPE and the container's network with it (the
	// background copy writes to /dev/null).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	h, gone, err := Start(cfg, Options{Start: e.Start, Stderr: e.Stderr, ReadyFD: ready, Getenv: os.Getenv})
	switch {
	case err == nil:
		return h.Serve(gone)
	case h.AuditFailed(): // the session said the cause
	case fail != nil:
		fmt.Fprint(fail, err) // the waiting parent says it
	default:
		fmt.Fprintf(e.Stderr, "nsgate pasta: %v\n", err)
	}
	return ExitFailure
}
