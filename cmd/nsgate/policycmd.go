package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/nsgate/nsgate/cliflag"
	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/netstack"
	"github.com/nsgate/nsgate/policy"
)

// printPolicyError prints a policy load error: each FILE:LINE:COL problem
// on its own line.
func printPolicyError(e env, err error) {
	var errs policy.Errors
	if errors.As(err, &errs) {
		for _, pe := range errs {
			fmt.Fprintln(e.stderr, pe.Error())
		}
		return
	}
	e.errorf("%v", err)
}

// cmdCheck: nsgate check FILE. It validates FILE as `run` would load it,
// prints the warnings (including allow cidr rules that overlap the
// gateway's own addresses under run's default network) and the normalized
// summary, followed by the filesystem paths expanded for the caller.
func cmdCheck(e env, args []string) int {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprintln(e.stdout, "Usage: nsgate check FILE\n\nValidates a policy file as nsgate run would load it: errors and warnings\non stderr, the normalized policy on stdout. See docs/policy.md.")
		return 0
	}
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		e.errorf("usage: nsgate check FILE")
		return exitUsage
	}
	p, err := policy.Load(args[0])
	if err != nil {
		printPolicyError(e, err)
		return exitUsage
	}
	p = p.WithLocal(netplan.Default().Local()...)
	for _, w := range p.Warnings() {
		fmt.Fprintln(e.stderr, "warning: "+w)
	}
	fmt.Fprint(e.stdout, p.Summary())
	home, _ := os.UserHomeDir()
	fs, err := p.Filesystem(home)
	if err != nil {
		fmt.Fprintln(e.stderr, "warning: "+err.Error())
		return 0
	}
	for _, w := range fs.Write {
		fmt.Fprintln(e.stdout, "# filesystem write: "+w)
	}
	for _, h := range fs.Hide {
		fmt.Fprintln(e.stdout, "# filesystem hide: "+h)
	}
	return 0
}

// cmdExplain: nsgate explain --policy FILE [--proto tcp|udp] DEST:PORT.
func cmdExplain(e env, args []string) int {
	fs := cliflag.New("nsgate explain", "Usage: nsgate explain --policy FILE [--proto tcp|udp] DEST:PORT", e.stdout, e.stderr)
	file := fs.String("policy", os.Getenv("NSGATE_POLICY"), "policy `FILE`")
	proto := fs.String("proto", "tcp", "`tcp` or udp")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, cliflag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		e.errorf("usage: nsgate explain --policy FILE [--proto tcp|udp] DEST:PORT")
		return exitUsage
	}
	var pr policy.Proto
	switch *proto {
	case "tcp":
		pr = policy.TCP
	case "udp":
		pr = policy.UDP
	default:
		e.errorf("explain: --proto %q: want tcp or udp", *proto)
		return exitUsage
	}
	host, portStr, err := net.SplitHostPort(fs.Arg(0))
	if err != nil {
		e.errorf("explain: %q: want DEST:PORT (an IPv6 address in brackets: [2001:db8::1]:443)", fs.Arg(0))
		return exitUsage
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		e.errorf("explain: port %q: want 1 to 65535", portStr)
		return exitUsage
	}
	p := policy.DenyAll()
	if *file != "" {
		if p, err = policy.Load(*file); err != nil {
			printPolicyError(e, err)
			return exitUsage
		}
	}
	// The gateway guards the host's own addresses as it finds them when
	// a flow is made; explain reads them here, in the network namespace
	// it runs in, which is the gateway's when both run on one host.
	p = p.WithLocal(netplan.Default().Local()...)
	if h, err := netstack.ReadHostSet(); err != nil {
		fmt.Fprintf(e.stderr, "warning: explain: the host's own addresses are unknown (%v): the answer does not guard them, a flow would\n", err)
	} else {
		p = p.WithHostAddrs(h)
	}
	d, err := p.Explain(pr, host, uint16(port))
	if err != nil {
		e.errorf("explain: %v", err)
		return exitUsage
	}
	fmt.Fprintln(e.stdout, d.String())
	if d.Verdict == policy.Allow {
		return 0
	}
	return 1
}
