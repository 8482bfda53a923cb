package profile

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Fragment renders p as a policy fragment a user can copy into a policy
// file and adapt: its exec entries as exec.allow, and, as comments, the
// settings that have no policy key (the flags and environment that
// --profile sets). It parses as a policy on its own (version: 1 and the
// exec section).
func (p Profile) Fragment() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# nsgate profile %s: %s\n", p.Name, p.Summary)
	b.WriteString("# `nsgate run --profile " + p.Name + "` is this exec section plus, as flags:\n")
	if p.AllowUnix {
		b.WriteString("#   --allow-unix\n")
	}
	switch p.Userns {
	case UsernsAlways:
		b.WriteString("#   --allow-userns\n")
	case UsernsUnlessRoot:
		b.WriteString("#   --allow-userns (unless the worker is uid 0: a root caller, or --root)\n")
	}
	for _, r := range p.ReadOnly {
		b.WriteString("#   --ro " + r + " (when it exists)\n")
	}
	if len(p.Env) > 0 {
		b.WriteString("# and, unless the caller's environment sets them, these variables:\n")
		var keys []string
		for k := range p.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteString("#   " + k + "=" + p.Env[k] + "\n")
		}
	}
	for _, n := range p.Needs {
		b.WriteString("# It needs " + n + " on the host.\n")
	}
	if p.Notes != "" {
		b.WriteString("#\n")
		for _, l := range strings.Split(strings.TrimRight(p.Notes, "\n"), "\n") {
			b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
		}
	}
	b.WriteString("version: 1\nexec:\n  allow:\n")
	for _, e := range p.Exec {
		b.WriteString("    - " + e + "\n")
	}
	return b.String()
}

// Main is `nsgate profile list` and `nsgate profile show NAME`.
func Main(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, "usage: nsgate profile list | nsgate profile show NAME")
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	switch {
	case args[0] == "list" && len(args) == 1:
		all, err := All()
		if err != nil {
			fmt.Fprintln(stderr, "nsgate: profile:", err)
			return 125
		}
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		for _, p := range all {
			fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Summary)
		}
		tw.Flush()
		return 0
	case args[0] == "show" && len(args) == 2:
		p, err := Get(args[1])
		if err != nil {
			fmt.Fprintln(stderr, "nsgate: profile:", err)
			return 2
		}
		fmt.Fprint(stdout, p.Fragment())
		return 0
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(stdout, "usage: nsgate profile list | nsgate profile show NAME")
		return 0
	}
	return usage()
}
