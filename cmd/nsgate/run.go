package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/cliflag"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/netstack"
	"github.com/nsgate/nsgate/profile"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
	"github.com/nsgate/nsgate/tun/tundev"
	"github.com/nsgate/nsgate/worker"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// runFlags are the flags of `nsgate run`.
type runFlags struct {
	policy, auditKey, pcap            string
	learn                             string
	audit, publish, execAllow, rw, ro listFlag
	profiles                          listFlag
	home                              string
	scratchSize                       string
	allowUserns, allowUnix, root      bool
	mtu                               uint
	maxFlows, maxProcs                int
	pcapMax                           int64
	ipv6, quiet, blockPage            bool
	execGuard                         string
	// unsafeBreak disables enforcement layers (comma-separated). Hidden:
	// only tests and `nsgate lab --break` use it, to show that a missing
	// layer is noticed (or that another layer holds alone).
	unsafeBreak string
}

// defaultPcapMaxMiB is --pcap-max's default: a capture the worker cannot
// grow past 1 GiB (a refused UDP flood wrote 200 MB a second).
const defaultPcapMaxMiB = 1024

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.policy, "policy", os.Getenv("NSGATE_POLICY"), "policy `FILE` (YAML); default $NSGATE_POLICY, else deny-all")
	fs.Var(&f.audit, "audit", "append the JSON-lines audit log to `FILE` (- for stderr); a second --audit gets a copy of every line: -, /dev/stdout, /dev/stderr or a FIFO (a container's log)")
	fs.StringVar(&f.auditKey, "audit-key", "", "HMAC-SHA256 key `FILE`: every audit record gets a mac")
	fs.StringVar(&f.learn, "learn", "", "learn a policy: allow every name and public address (metadata, special ranges and deny rules still refuse) and write what the worker used to `OUT.yaml`")
	fs.StringVar(&f.pcap, "pcap", "", "write a pcap of every packet on the worker's TUN to `FILE`")
	fs.Int64Var(&f.pcapMax, "pcap-max", defaultPcapMaxMiB, "stop the --pcap capture at `MIB` mebibytes (0: no bound); later packets are counted, not captured")
	fs.Var(&f.publish, "publish", "inbound forward `[HOSTIP:]HOSTPORT:PORT[/tcp|/udp]` from the host to the worker (repeatable)")
	fs.Var(&f.profiles, "profile", "add the settings of the worker profile `NAME` (repeatable; nsgate profile list)")
	fs.Var(&f.execAllow, "exec-allow", "`PATH` (file or directory) the worker may execute (repeatable)")
	fs.BoolVar(&f.allowUserns, "allow-userns", false, "let the worker create namespaces (Chromium's own sandbox)")
	fs.BoolVar(&f.allowUnix, "allow-unix", false, "let the worker create AF_UNIX sockets (its own: every socket bound on the host is hidden from it, unless named with --ro)")
	fs.BoolVar(&f.root, "root", false, "map the caller to uid 0 inside the sandbox")
	fs.UintVar(&f.mtu, "mtu", tundev.DefaultMTU, "MTU of the worker's TUN device")
	fs.IntVar(&f.maxFlows, "max-flows", netstack.DefaultMaxFlows, "concurrent TCP flows the worker may hold open; more are refused (audited)")
	fs.IntVar(&f.maxProcs, "max-procs", sandbox.DefaultMaxProcs, "processes and threads the worker may run at once (its RLIMIT_NPROC; at most half of the caller's own, and not applied to a root caller's worker)")
	fs.BoolVar(&f.ipv6, "ipv6", true, "give the worker IPv6 (--ipv6=false: IPv4 only)")
	fs.BoolVar(&f.quiet, "quiet", false, "no human-readable denial lines on stderr")
	fs.BoolVar(&f.blockPage, "block-page", false, "answer a refused name with a page saying why (policy dns.block_page); default: NXDOMAIN and a reset")
	fs.Var(&f.rw, "rw", "host `PATH` (file or directory) the worker may write (repeatable); the rest of the host is read-only")
	fs.Var(&f.ro, "ro", "host `PATH` the worker may read where the view would hide it: below /tmp, /var/tmp, /dev/shm or $HOME (repeatable)")
	fs.StringVar(&f.home, "home", "", "host `DIR` to be the worker's $HOME, writable (default: a private, empty tmpfs)")
	fs.StringVar(&f.scratchSize, "scratch-size", "2G", "what the worker may keep in its private /tmp, /var/tmp, /dev/shm, /run/user/UID and $HOME all together, in `BYTES` (K, M, G suffixes: powers of 1024), with one file per 4 KiB, and as much SysV shared memory; 0: the kernel's defaults (half of RAM; no limit)")
	fs.StringVar(&f.execGuard, "exec-guard", "strict", "`strict`, or best-effort: start even if Landlock or seccomp is missing (audited)")
}

func cmdRun(e env, args []string) int {
	fs := cliflag.New("nsgate run", "Usage: nsgate run [flags] -- COMMAND [ARG...]", e.stdout, e.stderr)
	var f runFlags
	f.register(fs.FlagSet)
	fs.StringVar(&f.unsafeBreak, "unsafe-break", "", "")
	fs.Hide("unsafe-break")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, cliflag.ErrHelp) {
			return 0
		}
		return exitFailure
	}
	argv := fs.Args()
	if len(argv) == 0 {
		e.errorf("run: no command given (usage: nsgate run [flags] -- COMMAND [ARG...])")
		return exitFailure
	}
	if err := f.validate(); err != nil {
		e.errorf("run: %v", err)
		return exitFailure
	}
	prof, err := profile.Apply(f.profiles, f.root || os.Geteuid() == 0)
	if err != nil {
		e.errorf("run: --profile: %v", err)
		return exitFailure
	}
	f.execAllow, f.ro = append(prof.ExecAllow, f.execAllow...), append(prof.ReadOnly, f.ro...)
	f.allowUnix, f.allowUserns = f.allowUnix || prof.AllowUnix, f.allowUserns || prof.AllowUserns
	cfg := f.config(e, argv)
	cfg.Env = prof.Environ(os.Environ())
	return worker.Run(cfg)
}

// config turns the flags into the run's Config.
func (f *runFlags) config(e env, argv []string) worker.Config {
	cfg := worker.Config{
		Argv: argv,
		Session: session.Config{
			PolicyPath: f.policy,
			AuditPath:  f.auditAt(0),
			AuditCopy:  f.auditAt(1),
			AuditKey:   f.auditKey,
			Stderr:     e.stderr,
			Start:      audit.Start{Version: versionString()},
			Plan:       netplan.Default(),
			IPv6:       f.ipv6,
			MTU:        uint32(f.mtu),
			Limits:     netstack.Limits{MaxFlows: f.maxFlows},
			BlockPage:  f.blockPage,
		},
		Pcap:        f.pcap,
		PcapMax:     f.pcapMax << 20,
		ExecAllow:   f.execAllow,
		AllowUserns: f.allowUserns,
		AllowUnix:   f.allowUnix,
		BestEffort:  f.execGuard == "best-effort",
		Writable:    f.rw,
		ReadOnly:    f.ro,
		HomeDir:     f.home,
		ScratchSize: f.scratchBytes(),
		MaxProcs:    f.maxProcs,
		Root:        f.root,
		Quiet:       f.quiet,
		Learn:       f.learn,
		Stdio:       sandbox.Stdio{Stdin: e.stdin, Stdout: e.stdout, Stderr: e.stderr},
	}
	if !f.auditOnStderr() && !f.quiet { // with --audit -, the records are on stderr already
		cfg.Session.Human = e.stderr
	}
	for _, p := range f.publish {
		rule, _ := inbound.ParsePublish(p) // validated with the flags
		cfg.Publish = append(cfg.Publish, rule)
	}
	cfg.Break, _ = worker.ParseBreak(f.unsafeBreak) // validated with the flags
	return cfg
}

// auditAt is the i-th --audit ("" none): 0 is the log, 1 where a copy of
// every line goes.
func (f *runFlags) auditAt(i int) string {
	if len(f.audit) <= i {
		return ""
	}
	return f.audit[i]
}

// auditOnStderr says the records go to stderr (one --audit is - or
// /dev/stderr): the human lines would then be mixed with them.
func (f *runFlags) auditOnStderr() bool {
	for _, a := range f.audit {
		if a == "-" || a == "/dev/stderr" {
			return true
		}
	}
	return false
}

func (f *runFlags) validate() error {
	switch {
	case len(f.audit) > 2:
		return fmt.Errorf("--audit given %d times: at most twice (the log, and one copy of it)", len(f.audit))
	case slices.Contains(f.audit, ""):
		return errors.New("--audit: empty path")
	case len(f.audit) == 2 && sameStream(f.audit[0], f.audit[1]):
		return fmt.Errorf("--audit %s given twice: a copy must go elsewhere", f.audit[1])
	}
	for _, p := range f.publish {
		if _, err := inbound.ParsePublish(p); err != nil {
			return err
		}
	}
	if f.mtu < 1280 || f.mtu > 65521 {
		return fmt.Errorf("--mtu %d out of range (1280 to 65521)", f.mtu)
	}
	if f.pcapMax < 0 || f.pcapMax > 1<<30 {
		return fmt.Errorf("--pcap-max %d out of range (0 for no bound, else 1 to %d MiB)", f.pcapMax, 1<<30)
	}
	if f.scratchSize == "" {
		// the default
	} else if n, err := cliflag.ParseBytes(f.scratchSize); err != nil {
		return fmt.Errorf("--scratch-size %q: %v", f.scratchSize, err)
	} else if n != 0 && n < 1<<20 {
		return fmt.Errorf("--scratch-size %q: want at least 1M, or 0 for the kernel's default", f.scratchSize)
	}
	if f.maxProcs != 0 && (f.maxProcs < 16 || f.maxProcs > 1<<22) {
		return fmt.Errorf("--max-procs %d out of range (16 to %d)", f.maxProcs, 1<<22)
	}
	if f.maxFlows < 1 || f.maxFlows > 1<<20 {
		return fmt.Errorf("--max-flows %d out of range (1 to %d)", f.maxFlows, 1<<20)
	}
	if _, err := worker.ParseBreak(f.unsafeBreak); err != nil {
		return err
	}
	switch f.execGuard {
	case "strict", "best-effort":
	default:
		return fmt.Errorf("--exec-guard %q: want strict or best-effort", f.execGuard)
	}
	return nil
}

// sameStream says two --audit values name the same place.
func sameStream(a, b string) bool {
	canon := func(s string) string {
		if s == "-" {
			return "/dev/stderr"
		}
		return filepath.Clean(s)
	}
	return canon(a) == canon(b)
}

// scratchBytes is --scratch-size for worker.Config (validated with the
// flags): 0 on the command line is the kernel's default, which the
// Config spells as a negative size.
func (f *runFlags) scratchBytes() int64 {
	if f.scratchSize == "" {
		return 0 // sandbox.DefaultScratchSize
	}
	n, _ := cliflag.ParseBytes(f.scratchSize)
	if n == 0 {
		return -1
	}
	return n
}
