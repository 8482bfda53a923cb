package main

import (
	"errors"
	"fmt"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/cliflag"
)

// cmdAudit: nsgate audit verify [--key FILE] [--head HASH] FILE.
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
func cmdAudit(e env, args []string) int {
	const usage = "usage: nsgate audit verify [--key FILE] [--head HASH] FILE"
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprintln(e.stdout, "Usage: nsgate audit verify [--key FILE] [--head HASH] FILE\n\nChecks an audit log's hash chain (and MACs, with --key) against its anchor.")
		return 0
	}
	if len(args) == 0 || args[0] != "verify" {
		e.errorf(usage)
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
