package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/netstack"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
	"github.com/nsgate/nsgate/tun"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// runFlags are the flags of `nsgate run`.
type runFlags struct {
	policy, audit, auditKey, pcap string
	publish, execAllow, rw, ro    listFlag
	home                          string
	allowUserns, allowUnix, root  bool
	mtu                           uint
	maxFlows                      int
	ipv6, quiet                   bool
	execGuard                     string
	// unsafeBreak disables enforcement layers (comma-separated). Hidden:
	// only tests and `nsgate lab --break` use it, to show that a missing
	// layer is noticed (or that another layer holds alone).
	unsafeBreak string
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.policy, "policy", os.Getenv("NSGATE_POLICY"), "policy `FILE` (YAML); default $NSGATE_POLICY, else deny-all")
	fs.StringVar(&f.audit, "audit", "", "append the JSON-lines audit log to `FILE` (- for stderr)")
	fs.StringVar(&f.auditKey, "audit-key", "", "HMAC-SHA256 key `FILE`: every audit record gets a mac")
	fs.StringVar(&f.pcap, "pcap", "", "write a pcap of every packet on the worker's TUN to `FILE`")
	fs.Var(&f.publish, "publish", "inbound forward `[HOSTIP:]HOSTPORT:PORT[/tcp|/udp]` from the host to the worker (repeatable)")
	fs.Var(&f.execAllow, "exec-allow", "`PATH` (file or directory) the worker may execute (repeatable)")
	fs.BoolVar(&f.allowUserns, "allow-userns", false, "let the worker create namespaces (Chromium's own sandbox)")
	fs.BoolVar(&f.allowUnix, "allow-unix", false, "let the worker create AF_UNIX sockets")
	fs.BoolVar(&f.root, "root", false, "map the caller to uid 0 inside the sandbox")
	fs.UintVar(&f.mtu, "mtu", tun.DefaultMTU, "MTU of the worker's TUN device")
	fs.IntVar(&f.maxFlows, "max-flows", netstack.DefaultMaxFlows, "concurrent TCP flows the worker may hold open; more are refused (audited)")
	fs.BoolVar(&f.ipv6, "ipv6", true, "give the worker IPv6 (--ipv6=false: IPv4 only)")
	fs.BoolVar(&f.quiet, "quiet", false, "no human-readable denial lines on stderr")
	fs.Var(&f.rw, "rw", "host `PATH` (file or directory) the worker may write (repeatable); the rest of the host is read-only")
	fs.Var(&f.ro, "ro", "host `PATH` the worker may read where the view would hide it: below /tmp, /var/tmp, /dev/shm or $HOME (repeatable)")
	fs.StringVar(&f.home, "home", "", "host `DIR` to be the worker's $HOME, writable (default: a private, empty tmpfs)")
	fs.StringVar(&f.execGuard, "exec-guard", "strict", "`strict`, or best-effort: start even if Landlock or seccomp is missing (audited)")
}

func cmdRun(e env, args []string) int {
	fs := flag.NewFlagSet("nsgate run", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "Usage: nsgate run [flags] -- COMMAND [ARG...]\n\nFlags:")
		fs.PrintDefaults()
	}
	var f runFlags
	f.register(fs)
	fs.StringVar(&f.unsafeBreak, "unsafe-break", "", "")
	fs.Usage = func() {
		// A second set without the hidden flag, for the listing.
		shown := flag.NewFlagSet("nsgate run", flag.ContinueOnError)
		shown.SetOutput(e.stderr)
		(&runFlags{}).register(shown)
		fmt.Fprintln(e.stderr, "Usage: nsgate run [flags] -- COMMAND [ARG...]\n\nFlags:")
		shown.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
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
	r := &runner{e: e, f: &f, argv: argv}
	return r.run()
}

func (f *runFlags) validate() error {
	for _, p := range f.publish {
		if _, err := parsePublish(p); err != nil {
			return err
		}
	}
	if f.mtu < 1280 || f.mtu > 65521 {
		return fmt.Errorf("--mtu %d out of range (1280 to 65521)", f.mtu)
	}
	if f.maxFlows < 1 || f.maxFlows > 1<<20 {
		return fmt.Errorf("--max-flows %d out of range (1 to %d)", f.maxFlows, 1<<20)
	}
	for _, b := range strings.Split(f.unsafeBreak, ",") {
		switch b {
		case "", "metadata", breakFSReadOnly, breakFSLandlock:
		default:
			return fmt.Errorf("--unsafe-break %q: only metadata, %s and %s can be broken (comma-separated)", f.unsafeBreak, breakFSReadOnly, breakFSLandlock)
		}
	}
	switch f.execGuard {
	case "strict", "best-effort":
	default:
		return fmt.Errorf("--exec-guard %q: want strict or best-effort", f.execGuard)
	}
	return nil
}

// runner holds one `nsgate run` while it lives.
type runner struct {
	e       env
	f       *runFlags
	argv    []string
	s       *session.Session
	child   *sandbox.Child
	fs      policy.Filesystem // the policy's filesystem section at start
	cleanup []func()          // after the session closed, last first
}

// fail says err (unless the audit log failed: then Close says that, the
// cause) and ends the run with 125.
func (r *runner) fail(err error) int {
	if r.s == nil || !r.s.AuditFailed() {
		r.e.errorf("%v", err)
	}
	if r.child != nil {
		r.child.Kill()
	}
	r.finish(exitFailure)
	return exitFailure
}

// run turns the flags into a session, starts the worker in its sandbox,
// attaches the session to the worker's TUN and waits.
func (r *runner) run() int {
	degraded, err := guard.Preflight(r.f.execGuard == "best-effort")
	if err != nil {
		r.e.errorf("exec guard cannot be enforced: %v", err)
		return exitFailure
	}
	if r.f.unsafeBreak != "" {
		degraded = append(degraded, r.f.unsafeBreak+" (--unsafe-break)")
		r.e.errorf("WARNING: the %s layer is switched off (--unsafe-break): this run is NOT safe", r.f.unsafeBreak)
	}
	// The pcap exists before the worker's view is built, so that the view
	// hides it.
	var pcap *bufio.Writer
	if r.f.pcap != "" {
		pf, err := os.OpenFile(r.f.pcap, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return r.fail(fmt.Errorf("pcap: %w", err))
		}
		pcap = bufio.NewWriterSize(pf, 1<<20)
		r.cleanup = append(r.cleanup, func() { pcap.Flush(); pf.Close() })
	}
	cfg := session.Config{
		PolicyPath:          r.f.policy,
		Reload:              session.ReloadOnSIGHUP,
		OnReload:            r.onReload,
		WithoutMetadataStep: r.f.broken("metadata"),
		AuditPath:           r.f.audit,
		AuditKey:            r.f.auditKey,
		Stderr:              r.e.stderr,
		Start:               audit.Start{Version: versionString(), Argv: r.argv, PID: os.Getpid(), Degraded: degraded},
		Plan:                netplan.Default(),
		IPv6:                r.f.ipv6,
		MTU:                 uint32(r.f.mtu),
		Limits:              netstack.Limits{MaxFlows: r.f.maxFlows},
	}
	if pcap != nil {
		cfg.Pcap = pcap
	}
	if r.f.audit == "" && !r.f.quiet {
		cfg.Human = r.e.stderr
	}
	if r.s, err = session.Open(cfg); err != nil {
		return r.fail(err)
	}

	gcfg := guard.Config{
		Command:     r.argv,
		ExecAllow:   append(append([]string(nil), r.f.execAllow...), r.s.Policy().ExecAllow()...),
		AllowUserns: r.f.allowUserns,
		AllowUnix:   r.f.allowUnix,
		BestEffort:  r.f.execGuard == "best-effort",
	}
	// Resolved here for a clear error before any namespace exists; init
	// resolves again in the worker's mount namespace and enforces that.
	plan, err := guard.Resolve(gcfg)
	if err != nil {
		return r.fail(err)
	}
	for _, si := range plan.ShellInterpreters() {
		// Said even with --quiet: it is about what the allowlist means.
		r.e.errorf("warning: %s is a script run by the shell %s, so the worker may run that shell with any command line; to avoid it, run the program the script starts instead", si.Script, si.Shell)
	}
	view, err := r.view(plan)
	if err != nil {
		return r.fail(err)
	}
	paths, devices := view.WritePaths()
	gcfg.Writes = &guard.WriteRules{Paths: paths, Devices: devices}
	if r.f.broken(breakFSReadOnly) {
		view.KeepHostWritable = true
	}
	if r.f.broken(breakFSLandlock) {
		gcfg.Writes = nil
	}
	gspec, err := json.Marshal(gcfg)
	if err != nil {
		return r.fail(err)
	}
	spec := sandbox.Spec{
		Argv:      r.argv,
		Root:      r.f.root,
		Iface:     workerIface(cfg.Plan, uint32(r.f.mtu), r.f.ipv6),
		View:      view,
		Hostname:  "nsgate",
		GuardSpec: gspec,
	}
	child, err := sandbox.Start(spec, sandbox.Stdio{Stdin: r.e.stdin, Stdout: r.e.stdout, Stderr: r.e.stderr})
	if err != nil {
		return r.fail(err)
	}
	r.child = child
	r.cleanup = append(r.cleanup, func() { syscall.Close(child.TunFD) })
	r.s.StopOnAuditFailure(func() { child.Signal(syscall.SIGKILL) }) // the audit fails closed
	child.ExecListener = r.s.ExecAudit(plan)

	link, err := tun.NewEndpoint(child.TunFD, tun.EndpointOptions{MTU: uint32(r.f.mtu)})
	if err != nil {
		return r.fail(err)
	}
	if err := r.s.Attach(link); err != nil {
		return r.fail(err)
	}
	for _, p := range r.f.publish {
		spec, _ := parsePublish(p) // validated with the flags
		rule := inbound.Rule{Proto: spec.Proto, HostAddr: spec.Host, HostPort: spec.HostPort, GuestPort: spec.GuestPort}
		if _, err := r.s.Inbound().Add(rule); err != nil {
			return r.fail(fmt.Errorf("--publish %s: %w", p, err))
		}
	}

	// SIGHUP is the session's (a reload); the rest go to the worker.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			child.Signal(sig)
		}
	}()

	d, err := child.Release()
	if err != nil {
		return r.fail(err)
	}
	if len(d) > 0 {
		r.s.Log().Log(audit.Policy{Action: "degraded", Error: "not in force: " + strings.Join(d, ", ")})
		if !r.f.quiet {
			r.e.errorf("running without %s", strings.Join(d, ", "))
		}
	}
	r.child = nil // it exits by itself now
	return r.finish(child.Wait())
}

// onReload says when a reloaded policy's filesystem section differs from
// the one the worker's view was built from.
func (r *runner) onReload(p *policy.Policy) {
	if fs, err := p.Filesystem(os.Getenv("HOME")); err != nil || !slices.Equal(fs.Write, r.fs.Write) || !slices.Equal(fs.Hide, r.fs.Hide) {
		r.e.errorf("reload: the filesystem section changed; the worker's view stays as it started, the new one applies to the next run")
	}
}

// finish closes the session (exit record, head) and what the run opened
// besides. It returns the exit status: code, or 125 when the audit log
// failed.
func (r *runner) finish(code int) int {
	if r.s != nil {
		code = r.s.Close(code)
	}
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
	return code
}

// workerIface is the worker's TUN device on plan.
func workerIface(plan netplan.Plan, mtu uint32, ipv6 bool) tun.Iface {
	ifc := tun.Iface{Name: "tun0", MTU: mtu, Addrs: []netip.Prefix{plan.GuestPrefix4()}, Gateways: []netip.Addr{plan.Gateway4()}}
	if ipv6 {
		ifc.Addrs = append(ifc.Addrs, plan.GuestPrefix6())
		ifc.Gateways = append(ifc.Gateways, plan.Gateway6())
	}
	return ifc
}

// broken reports whether --unsafe-break names layer.
func (f *runFlags) broken(layer string) bool {
	return slices.Contains(strings.Split(f.unsafeBreak, ","), layer)
}

// The two layers of the worker's read-only host, each of which the tests
// switch off alone (--unsafe-break) to show that the other holds by itself.
const (
	breakFSReadOnly = "fs-readonly" // no read-only remount of the host
	breakFSLandlock = "fs-landlock" // no Landlock write rules
)

// view plans the worker's file system: the host read-only but for --rw
// and the policy's filesystem.write, private scratch directories and home
// (or --home), and nsgate's own files hidden.
func (r *runner) view(plan guard.Plan) (sandbox.View, error) {
	conf := netplan.Default().ResolvConf(r.f.ipv6)
	var own []string
	for _, p := range []string{r.f.policy, r.f.auditKey, r.f.pcap} {
		if p != "" {
			own = append(own, p)
		}
	}
	if r.f.audit != "" && r.f.audit != "-" {
		own = append(own, r.f.audit, r.f.audit+".head")
	}
	fs, err := r.s.Policy().Filesystem(os.Getenv("HOME"))
	if err != nil {
		return sandbox.View{}, fmt.Errorf("policy %s: %w", r.f.policy, err)
	}
	r.fs = fs
	cwd, _ := os.Getwd()
	v, err := sandbox.PlanView(sandbox.ViewConfig{
		Writable:   append(append([]string(nil), r.f.rw...), fs.Write...),
		Hide:       fs.Hide,
		ReadOnly:   r.f.ro,
		Home:       os.Getenv("HOME"),
		HomeDir:    r.f.home,
		UID:        os.Getuid(),
		Exec:       plan.Allow,
		Own:        own,
		ResolvConf: conf,
		Cwd:        cwd,
	})
	if err != nil {
		return sandbox.View{}, fmt.Errorf("run: %w", err)
	}
	for _, w := range v.Warnings {
		r.e.errorf("warning: %s", w)
	}
	return v, nil
}
