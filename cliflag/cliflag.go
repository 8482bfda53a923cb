// Package cliflag is the standard library's flag package as nsgate's
// commands present it: flags are written and listed GNU-style (--policy,
// as the docs spell them; -policy works too), --help prints the usage on
// stdout and is not an error, and a mistake is one line on stderr that
// says what was wrong and, for an unknown flag, which flag was probably
// meant, instead of the whole flag list.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Set is a flag set of one command.
type Set struct {
	*flag.FlagSet
	name, usage    string
	stdout, stderr io.Writer
	hidden         map[string]bool
}

// New returns the flag set of the command name ("nsgate run"). usage is
// the text above the flag list ("Usage: nsgate run [flags] -- COMMAND").
func New(name, usage string, stdout, stderr io.Writer) *Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := &Set{FlagSet: fs, name: name, usage: usage, stdout: stdout, stderr: stderr, hidden: map[string]bool{}}
	fs.Usage = func() {}
	return s
}

// Hide leaves flags out of the listing (they still parse): test knobs.
func (s *Set) Hide(names ...string) {
	for _, n := range names {
		s.hidden[n] = true
	}
}

// ErrHelp is Parse's error when --help was asked for and printed.
var ErrHelp = flag.ErrHelp

// Parse parses args. On --help it prints the usage to stdout and returns
// ErrHelp; on a mistake it prints one line to stderr and returns the
// error. The caller exits 0 on ErrHelp and with its usage status else.
func (s *Set) Parse(args []string) error {
	err := s.FlagSet.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		s.PrintUsage(s.stdout)
		return ErrHelp
	}
	fmt.Fprintf(s.stderr, "%s: %s (see %s --help)\n", s.name, s.explain(err), s.name)
	return err
}

// explain rewrites the flag package's error message in nsgate's terms.
func (s *Set) explain(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		if near := s.nearest(name); near != "" {
			return fmt.Sprintf("unknown flag --%s (did you mean --%s?)", name, near)
		}
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "flag --" + strings.TrimLeft(name, "-") + " needs a value"
	}
	// invalid value "x" for flag -mtu: parse error
	if i := strings.Index(msg, " for flag -"); i >= 0 {
		rest := msg[i+len(" for flag -"):]
		name, why, _ := strings.Cut(rest, ": ")
		return msg[:i] + " for --" + name + ": " + why
	}
	return msg
}

// nearest returns the shown flag closest to name (edit distance at most
// two, or name is a prefix of it), or "".
func (s *Set) nearest(name string) string {
	best, bestD := "", 3
	s.VisitAll(func(f *flag.Flag) {
		if s.hidden[f.Name] {
			return
		}
		d := distance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// PrintUsage writes the usage line and the shown flags, GNU-style.
func (s *Set) PrintUsage(w io.Writer) {
	fmt.Fprintln(w, s.usage)
	first := true
	s.VisitAll(func(f *flag.Flag) {
		if s.hidden[f.Name] {
			return
		}
		if first {
			fmt.Fprintln(w, "\nFlags:")
			first = false
		}
		arg, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "[]" {
			help += " (default " + def + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(help, "\n", "\n    \t"))
	})
}
