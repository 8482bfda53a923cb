// Package auditcli is `nsgate audit`: verify, show and stats, the
// commands that read an audit log. Package main only wires it.
package auditcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/cliflag"
)

// exitUsage: bad input or a file that cannot be read.
const exitUsage = 2

// env carries the command's output streams.
type env struct{ stdout, stderr io.Writer }

func (e env) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "nsgate: "+format+"\n", args...)
}

// Main is nsgate audit verify [--key FILE] [--head HASH] FILE.
//
// Exit status: 0 and "ok: N records, head HASH" when the chain
// verifies and nothing contradicts its anchor; 1 and "FILE:LINE: what is
// wrong" at the first broken record, at a torn last line, or when the end
// of the log does not match its anchor (--head, else FILE.head); 2 when the
// file cannot be read or the command line is wrong.
//
// What the chain cannot prove is said, not hidden: a log whose last run has
// no exit record is reported "not closed", a keyed log verified without
// --key "MACs not checked", a log without anchor "nothing anchors the end"
// (warnings on stderr). They do not change the status: a run that is still
// going, or whose nsgate was killed, leaves a log that is authentic as far
// as it goes, and scripts that need more can ask for an anchor (FILE.head,
// which nsgate writes next to the log, makes a cut end an error).
func Main(args []string, stdout, stderr io.Writer) int {
	e := env{stdout, stderr}
	const usage = "Usage: nsgate audit verify|show|stats [flags] FILE"
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" {
		fmt.Fprintln(e.stdout, usage+"\n\n"+
			"  verify [--key FILE] [--head HASH] FILE   check the hash chain (and MACs) against its anchor\n"+
			"  show [--follow] [--event E] [--action A] [--since T] FILE   the records as readable lines\n"+
			"  stats FILE                                totals by event, destination, rule, name and program")
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	switch args[0] {
	case "verify":
	case "show":
		return cmdAuditShow(e, args[1:])
	case "stats":
		return cmdAuditStats(e, args[1:])
	default:
		e.errorf("audit: unknown subcommand %q (%s)", args[0], usage)
		return exitUsage
	}
	fs := cliflag.New("nsgate audit verify", "Usage: nsgate audit verify [--key FILE] [--head HASH] FILE", e.stdout, e.stderr)
	keyFile := fs.String("key", "", "HMAC key `FILE` the log was written with: every record's mac is checked")
	anchor := fs.String("head", "", "expected head `HASH` (as printed at exit); default: the one in FILE.head, when that file exists")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, cliflag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		e.errorf(usage)
		return exitUsage
	}
	var key []byte
	if *keyFile != "" {
		k, err := audit.LoadKey(*keyFile)
		if err != nil {
			e.errorf("audit verify: %v", err)
			return exitUsage
		}
		key = k
	}
	if *anchor != "" && !audit.IsHead(*anchor) {
		e.errorf("audit verify: --head %q: want 64 lower-case hex digits", *anchor)
		return exitUsage
	}
	name := fs.Arg(0)
	s, err := audit.Check(name, key, *anchor)
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		fmt.Fprintln(e.stderr, ve)
		return 1
	case err != nil:
		e.errorf("audit verify: %v", err)
		return exitUsage
	}
	fmt.Fprintf(e.stdout, "ok: %d records, head %s\n", s.Records, s.Head)
	for _, n := range s.Notes() {
		fmt.Fprintln(e.stdout, n)
	}
	for _, w := range s.Warnings(name) {
		fmt.Fprintln(e.stderr, w)
	}
	return 0
}

// cmdAuditShow: nsgate audit show [--follow] [--event E] [--action A]
// [--since T] FILE. Exit 0, or 2 when the file cannot be read or holds a
// line that is not a record (it says which).
func cmdAuditShow(e env, args []string) int {
	fs := cliflag.New("nsgate audit show", "Usage: nsgate audit show [--follow] [--event E] [--action A] [--since T] FILE", e.stdout, e.stderr)
	follow := fs.Bool("follow", false, "keep printing records as they are written, until interrupted")
	var f audit.Filter
	fs.StringVar(&f.Event, "event", "", "only records of `EVENT` (flow, dns, l7, exec, packet, inbound, inbound_end, forward, policy, start, exit, flow_end)")
	fs.StringVar(&f.Action, "action", "", "only records with `ACTION` (allow or deny)")
	since := fs.String("since", "", "only records at or after `T`: a time (2026-12-01T10:00:00Z) or an age (10m, 2h)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, cliflag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		e.errorf("audit show: want one FILE (see nsgate audit show --help)")
		return exitUsage
	}
	if *since != "" {
		if d, err := time.ParseDuration(*since); err == nil && d >= 0 {
			f.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, *since); err == nil {
			f.Since = t
		} else {
			e.errorf("audit show: --since %q: want a time such as 2026-12-01T10:00:00Z or an age such as 10m", *since)
			return exitUsage
		}
	}
	var err error
	if *follow {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = audit.Follow(ctx, e.stdout, fs.Arg(0), f, 250*time.Millisecond)
	} else {
		err = withFile(fs.Arg(0), func(r io.Reader) error { return audit.Show(e.stdout, r, f) })
	}
	if err != nil {
		e.errorf("audit show: %s: %v", fs.Arg(0), err)
		return exitUsage
	}
	return 0
}

// cmdAuditStats: nsgate audit stats FILE.
func cmdAuditStats(e env, args []string) int {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprintln(e.stdout, "Usage: nsgate audit stats FILE\n\nTotals of an audit log by event, destination, rule, name and program.")
		return 0
	}
	if len(args) != 1 {
		e.errorf("audit stats: want one FILE (see nsgate audit stats --help)")
		return exitUsage
	}
	err := withFile(args[0], func(r io.Reader) error {
		s, err := audit.ReadStats(r)
		if err != nil {
			return err
		}
		return s.Write(e.stdout)
	})
	if err != nil {
		e.errorf("audit stats: %s: %v", args[0], err)
		return exitUsage
	}
	return 0
}

// withFile runs fn on the file at path.
func withFile(path string, fn func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(f)
}
