package learn

import (
	"fmt"
	"github.com/nsgate/nsgate/internal/hostpath"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nsgate/nsgate/policy"
)

// Run describes a learning run, for the learned file's header and the
// parts it keeps from the starting policy.
type Run struct {
	Argv []string
	Time time.Time
	// Base is the starting policy (--policy), nil for none; BasePath its
	// file.
	Base     *policy.Policy
	BasePath string
	// ExecAllow are the run's --exec-allow paths: the learned file lists
	// them in exec.allow, so that it runs the worker on its own.
	ExecAllow []string
	// ExitCode is the worker's exit status.
	ExitCode int
}

// LearnedPolicy renders the learned policy: the starting policy's rules and
// settings, the learned allow rules, exec.allow with the refused programs
// as commented-out suggestions, and a header saying what was seen and
// what was not learned. It parses what it wrote (policy.Parse) and returns
// an error instead of a file nsgate would refuse.
//
// Nothing refused by the built-in sets is named in the file, only counted:
// the addresses and names of the cloud-metadata set and the special ranges
// never appear in it.
func LearnedPolicy(res Result, run Run) ([]byte, error) {
	base := run.Base
	if base == nil {
		base = policy.DenyAll()
	}
	kept := base.AllowRules()
	if n := len(kept) + len(res.Rules) + len(base.DenyRules()); n > policy.MaxRules {
		return nil, fmt.Errorf("the worker used %d destinations: with the starting policy's rules that makes %d rules, more than a policy may hold (%d)", res.Hosts+res.Addrs, n, policy.MaxRules)
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	// The header.
	w("# nsgate policy learned by `nsgate run --learn`\n")
	w("# date: %s\n", run.Time.UTC().Format(time.RFC3339))
	w("# command: %s\n", commentText(quoteArgv(run.Argv)))
	w("# the worker exited with status %d\n", run.ExitCode)
	if run.Base != nil {
		w("# starting policy: %s (sha256 %s): its rules and settings are kept\n", commentText(run.BasePath), run.Base.SHA256())
	} else {
		w("# starting policy: none (deny-all)\n")
	}
	w("# seen: %s to %s and %s that no rule covered", plural(res.Flows, "flow"), plural(res.Hosts, "name"), plural(res.Addrs, "address"))
	if res.Kept > 0 {
		w("; %s and names allowed by the starting policy's rules", plural(res.Kept, "flow"))
	}
	execs := mergeExec(base.ExecAllow(), run.ExecAllow)
	w("\n# written: %s (%s) for them; exec.allow: %s, %s suggested in comments\n",
		plural(len(res.Rules), "allow rule"), plural(res.Wildcards, "wildcard"), plural(len(execs), "entry"), plural(len(res.Execs), "refused program"))
	w("# not learned: %d refused by the cloud-metadata set, the special ranges or the gateway's own\n", res.Builtin)
	w("#   addresses (no rule opens them); %d by the starting policy's deny rules; %d by the TLS SNI\n", res.DenyRule, res.L7)
	w("#   or HTTP Host check; %d allowed but failed (upstream DNS, dial, limits); %s answered\n", res.Failed, plural(len(res.NamesOnly), "name"))
	w("#   but never connected to (listed at the end)\n")
	w("# A \"*.parent\" rule stands for %d or more names seen directly under one parent that is not\n", WildcardMin)
	w("# a public suffix, with the ports of all of them; it also allows names under it never seen.\n")
	w("# Review before use: nsgate check FILE; nsgate explain --policy FILE DEST:PORT.\n")
	w("version: 1\n")

	// allow: the starting policy's, then the learned ones.
	if len(kept)+len(res.Rules) == 0 {
		w("allow: []\n")
	} else {
		w("allow:\n")
		if len(kept) > 0 {
			w("  # from the starting policy\n")
			for _, r := range kept {
				w("  - %s\n", r.YAML())
			}
			if len(res.Rules) > 0 {
				w("  # learned\n")
			}
		}
		for _, r := range res.Rules {
			w("  - %s", r.Spec.YAML())
			if r.Comment != "" {
				w("  # %s", commentText(r.Comment))
			}
			w("\n")
		}
	}
	if deny := base.DenyRules(); len(deny) > 0 {
		w("deny:  # from the starting policy\n")
		for _, r := range deny {
			w("  - %s\n", r.YAML())
		}
	}
	writeDNS(&b, base)
	if !base.VerifySNI() {
		w("tls: {verify_sni: false}\n")
	}
	if !base.VerifyHost() {
		w("http: {verify_host: false}\n")
	}

	// exec: what the worker could run, then what it was refused.
	prefix := "    # " // suggestions as comments inside exec.allow
	switch {
	case len(execs) > 0:
		w("exec:\n  allow:\n")
		for _, e := range execs {
			w("    - %s  # %s\n", yamlString(e.path), e.from)
		}
	case len(res.Execs) > 0:
		w("# exec:\n#   allow:\n")
		prefix = "#     "
	}
	if len(res.Execs) > 0 {
		w("%srefused during learning (the worker did not run them); uncomment to allow:\n", prefix)
		for _, e := range res.Execs {
			w("%s- %s  # refused %s\n", prefix, yamlString(e.Path), plural(e.Count, "time"))
		}
	}
	if write, hide := base.FilesystemPaths(); len(write)+len(hide) > 0 {
		w("filesystem:  # from the starting policy\n")
		for _, sec := range []struct {
			key   string
			paths []string
		}{{"write", write}, {"hide", hide}} {
			if len(sec.paths) > 0 {
				w("  %s:\n", sec.key)
				for _, p := range sec.paths {
					w("    - %s\n", yamlString(p))
				}
			}
		}
	}

	// The trailer: what was seen but not written as rules.
	if len(res.NamesOnly) > 0 {
		w("# Names DNS answered during learning that the worker never connected to (no rule written;\n")
		w("# they now get NXDOMAIN): %s\n", commentText(listSome(res.NamesOnly, 20)))
	}
	if len(res.FailedSeen) > 0 {
		w("# Allowed during learning but failed, not learned (%d; the first distinct ones):\n", res.Failed)
		for _, f := range res.FailedSeen {
			w("#   %s\n", commentText(f))
		}
	}
	out := []byte(b.String())
	if _, err := policy.Parse("learned policy", out); err != nil {
		return nil, fmt.Errorf("the learned policy does not parse (a bug in nsgate): %v", err)
	}
	return out, nil
}

// execEntry is one exec.allow entry of the learned file and where it came
// from.
type execEntry struct{ path, from string }

func mergeExec(fromPolicy, fromFlag []string) []execEntry {
	var out []execEntry
	for _, p := range fromPolicy {
		out = append(out, execEntry{p, "from the starting policy"})
	}
	for _, p := range fromFlag {
		if strings.HasPrefix(p, "/") && !strings.ContainsRune(p, 0) && !slices.ContainsFunc(out, func(e execEntry) bool { return e.path == p }) {
			out = append(out, execEntry{p, "--exec-allow during learning"})
		}
	}
	return out
}

// writeDNS writes the starting policy's dns section, if it has one.
func writeDNS(b *strings.Builder, p *policy.Policy) {
	ups, names := p.Upstreams(), p.HostNames()
	if ups == nil && len(names) == 0 {
		return
	}
	b.WriteString("dns:  # from the starting policy\n")
	if ups != nil {
		b.WriteString("  upstream: [")
		for i, u := range ups {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(yamlString(u))
		}
		b.WriteString("]\n")
	}
	if len(names) > 0 {
		b.WriteString("  hosts:\n")
		for _, n := range names {
			addrs, _ := p.StaticHosts(n)
			b.WriteString("    " + yamlString(n) + ": [")
			for i, a := range addrs {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(yamlString(a.String()))
			}
			b.WriteString("]\n")
		}
	}
}

// quoteArgv writes argv as a shell would need it: plain words as they
// are, others quoted.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
		}) < 0 {
			out[i] = a
		} else {
			out[i] = strconv.Quote(a)
		}
	}
	return strings.Join(out, " ")
}

// yamlString writes s as a YAML double-quoted string in printable ASCII:
// Go's escapes with every rune past '~' as \uXXXX, which YAML reads back
// to the same string (s is valid UTF-8: package learn takes no path or
// name that is not). A path the worker chose then shows, in the file the
// operator reviews, every escape, bidi override, invisible or lookalike
// rune it holds as its code.
func yamlString(s string) string { return strconv.QuoteToASCII(s) }

// commentText makes s safe inside a YAML comment and plain to read: one
// line of printable ASCII, with every other rune (control characters,
// line breaks such as NEL or U+2028, a byte-order mark, bidi overrides,
// invisible and lookalike runes) written as its Go escape.
func commentText(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 0x20 && r <= 0x7e {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// OpenOutput opens the learned file's path for writing without changing
// it (created empty if missing), so that a path nsgate cannot write is an
// error before the worker runs; WriteFile writes it at the end.
func OpenOutput(path string) (*os.File, error) { return OpenOutputWith(path, nil) }

// OpenOutputWith is OpenOutput with the path decided by paths
// (internal/hostpath; nil: hostpath.Default): a link in its last component
// is refused, a new file is created with O_EXCL, and an existing one must
// be the caller's own regular file.
func OpenOutputWith(path string, paths *hostpath.Checker) (*os.File, error) {
	if paths == nil {
		paths = hostpath.Default()
	}
	hp, err := paths.ResolveOutput(path)
	if err != nil {
		return nil, fmt.Errorf("--learn: %w", err)
	}
	defer hp.Close()
	f, err := hp.OpenOutput(os.O_WRONLY, 0o644, hostpath.Regular)
	if err != nil {
		return nil, fmt.Errorf("--learn: %w", err)
	}
	return f, nil
}

// WriteFile writes data over the file f names (opened by the caller
// before the run, so that an unwritable path is said at start): it
// truncates and writes from the start.
func WriteFile(f *os.File, data []byte) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return nil
}
