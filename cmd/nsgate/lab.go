package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nsgate/nsgate/lab"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/sealed"
)

// `nsgate lab`: the built-in security lab (SPEC §9). The first process
// re-executes itself into a sealed network namespace (sealed.Enter);
// the sealed copy builds the fake internet and runs the attacker under
// `nsgate run` (lab.Run).
//
// Hidden flags, for testing the lab itself:
//
//	--break LAYER   disable one layer (metadata, policy, l7, exec-guard):
//	                the lab must then fail and name what got through
//	--only IDS      run only these attempts (comma-separated)
//	--catalogue     print the catalogue as Markdown (integration/README.md)

func cmdLab(e env, args []string) int {
	fs := flag.NewFlagSet("nsgate lab", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	evidence := fs.String("evidence", "nsgate-lab-evidence", "write the evidence record (evidence.json, evidence.md, audit.jsonl) to `DIR`")
	browser := fs.String("browser", "", "also drive the headless Chromium at `PATH` through the browser attacks")
	brk := fs.String("break", "", "")
	only := fs.String("only", "", "")
	catalogue := fs.Bool("catalogue", false, "")
	fs.Usage = func() {
		fmt.Fprint(e.stderr, `Usage: nsgate lab [--evidence DIR] [--browser PATH]

Runs every attack of the catalogue (integration/README.md) against nsgate in
a sealed network namespace with a fake internet, plus controls that must
succeed. Exit 0 only if every attack was blocked and every control
succeeded; 1 if not; 2 if the lab could not run.

Flags:
  --evidence DIR   write evidence.json, evidence.md and audit.jsonl to DIR
                   (default ./nsgate-lab-evidence)
  --browser PATH   also run the browser attempts: headless Chromium at PATH
                   (e.g. /usr/lib/chromium/chromium) as the worker under
                   nsgate run, driven over CDP by a scripted agent
`)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		e.errorf("lab: unexpected argument %q (usage: nsgate lab [--evidence DIR] [--browser PATH])", fs.Arg(0))
		return exitUsage
	}
	if *catalogue {
		attack.WriteCatalogue(e.stdout)
		return 0
	}
	if *browser != "" {
		abs, err := filepath.Abs(*browser)
		if err != nil {
			e.errorf("lab: --browser: %v", err)
			return exitUsage
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			e.errorf("lab: --browser %s: not an executable file", *browser)
			return exitUsage
		}
		*browser = abs
	}
	if _, err := lab.Policy(*brk); err != nil {
		e.errorf("lab: %v", err)
		return exitUsage
	}
	var ids []string
	if *only != "" {
		ids = strings.Split(*only, ",")
		for _, id := range ids {
			if _, ok := attack.Find(id); !ok {
				e.errorf("lab: --only: unknown attempt %q", id)
				return exitUsage
			}
		}
	}
	dir, err := filepath.Abs(*evidence)
	if err != nil {
		e.errorf("lab: --evidence: %v", err)
		return exitUsage
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
		code, err := sealed.Enter(inner, os.Environ(), sealed.Stdio{Stdin: e.stdin, Stdout: e.stdout, Stderr: e.stderr})
		if err != nil {
			e.errorf("lab: %v", err)
			return lab.ExitError
		}
		return code
	}

	self, err := os.Executable()
	if err != nil {
		e.errorf("lab: find own executable: %v", err)
		return lab.ExitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return lab.Run(ctx, lab.Config{
		Self:       self,
		AttackArgs: []string{"__attack"},
		Version:    versionLine(),
		Evidence:   dir,
		Break:      *brk,
		Only:       ids,
		Browser:    *browser,
		Stdout:     e.stdout,
		Stderr:     e.stderr,
	})
}
