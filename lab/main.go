package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nsgate/nsgate/cliflag"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/sealed"
)

// `nsgate lab`: the built-in security  The first process
// re-executes itself into a sealed network namespace (sealed.Enter);
// the sealed copy builds the fake internet and runs the attacker under
// `nsgate run` (Run).
//
// Hidden flags, for testing the lab itself:
//
//	--break LAYER   disable one layer (metadata, policy, l7, exec-guard,
//	                credentials, request-rules, echo-scrub):
//	                the lab must then fail and name what got through
//	--only IDS      run only these attempts (comma-separated)
//	--catalogue     print the catalogue as Markdown (integration/README.md)

// Stdio are the command's streams.
type Stdio = sealed.Stdio

// Main runs `nsgate lab ARGS` and returns its exit status: 0 when every
// attack was blocked and every control succeeded, 1 when not, 2 when the
// lab could not run or the command line is wrong. version is nsgate's
// version line, for the evidence.
func Main(args []string, stdio Stdio, version string) int {
	e := labEnv{stdio}
	fs := cliflag.New("nsgate lab", `Usage: nsgate lab [--evidence DIR] [--browser PATH] [--expect-degraded LAYERS]

Runs every attack of the catalogue (integration/README.md) against nsgate in
a sealed network namespace with a fake internet, plus controls that must
succeed. Exit 0 only if every attack was blocked and every control
succeeded; 1 if not; 2 if the lab could not run.`, stdio.Stdout, stdio.Stderr)
	evidence := fs.String("evidence", "nsgate-lab-evidence", "write the evidence record (evidence.json, evidence.md, audit.jsonl) to `DIR`")
	browser := fs.String("browser", "", "also run the browser attempts: headless Chromium at `PATH` (e.g. /usr/lib/chromium/chromium) as the worker under nsgate run, driven over CDP by a scripted agent")
	expectDegraded := fs.String("expect-degraded", "", "accept attacks through these `LAYERS` (comma-separated, as nsgate names them when it starts without them, e.g. namespace-quota in a pod with a read-only /proc/sys) when nsgate said at start they are not in force; each is still reported")
	brk := fs.String("break", "", "")
	only := fs.String("only", "", "")
	catalogue := fs.Bool("catalogue", false, "")
	fs.Hide("break", "only", "catalogue")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, cliflag.ErrHelp) {
			return 0
		}
		return ExitError
	}
	if fs.NArg() > 0 {
		e.errorf("lab: unexpected argument %q (usage: nsgate lab [--evidence DIR] [--browser PATH] [--expect-degraded LAYERS])", fs.Arg(0))
		return ExitError
	}
	if *catalogue {
		attack.WriteCatalogue(stdio.Stdout)
		return 0
	}
	if *browser != "" {
		abs, err := filepath.Abs(*browser)
		if err != nil {
			e.errorf("lab: --browser: %v", err)
			return ExitError
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			e.errorf("lab: --browser %s: not an executable file", *browser)
			return ExitError
		}
		*browser = abs
	}
	if _, err := Policy(*brk); err != nil {
		e.errorf("lab: %v", err)
		return ExitError
	}
	var ids []string
	if *only != "" {
		ids = strings.Split(*only, ",")
		for _, id := range ids {
			if _, ok := attack.Find(id); !ok {
				e.errorf("lab: --only: unknown attempt %q", id)
				return ExitError
			}
		}
	}
	dir, err := filepath.Abs(*evidence)
	if err != nil {
		e.errorf("lab: --evidence: %v", err)
		return ExitError
	}

	if _, ok := sealed.Current(); !ok {
		inner := []string{"nsgate", "lab", "--evidence", dir}
		if *brk != "" {
			inner = append(inner, "--break", *brk)
		}
		if *only != "" {
			inner = append(inner, "--only", *only)
		}
		if *browser != "" {
			inner = append(inner, "--browser", *browser)
		}
		if *expectDegraded != "" {
			inner = append(inner, "--expect-degraded", *expectDegraded)
		}
		code, err := sealed.Enter(inner, os.Environ(), stdio)
		if err != nil {
			e.errorf("lab: %v", err)
			return ExitError
		}
		return code
	}

	self, err := os.Executable()
	if err != nil {
		e.errorf("lab: find own executable: %v", err)
		return ExitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return Run(ctx, Config{
		Self:           self,
		AttackArgs:     []string{"__attack"},
		Version:        version,
		Evidence:       dir,
		Break:          *brk,
		Only:           ids,
		Browser:        *browser,
		ExpectDegraded: splitList(*expectDegraded),
		Stdout:         stdio.Stdout,
		Stderr:         stdio.Stderr,
	})
}

// labEnv says the command's errors.
type labEnv struct{ Stdio }

func (e labEnv) errorf(format string, args ...any) {
	fmt.Fprintf(e.Stderr, "nsgate: "+format+"\n", args...)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
