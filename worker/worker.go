// Package worker runs one untrusted program (the worker) the way `nsgate
// run` does: in fresh user, network, mount and PID namespaces (sandbox),
// with its file-system view planned (sandbox.PlanView) and its exec guard
// resolved (guard), behind a gateway assembled by session on the worker's
// TUN device. The command line only turns its flags into a Config; Run
// does the rest and returns the exit status.
//
//	Run(cfg)
//	  guard.Preflight          can Landlock and seccomp be enforced?
//	  session.Open             policy, audit log, start record
//	  guard.Resolve            the exec allowlist, for a clear error now
//	  sandbox.PlanView         what the worker sees and may write
//	  sandbox.Start            namespaces; init builds the view, the guard
//	  tun.NewEndpoint          the worker's TUN, passed up by init
//	  session.Attach           DNS and the gateway on that link
//	  Inbound().Add            --publish forwards
//	  child.Release, Wait      the worker runs; its status is the result
//	  session.Close            exit record, audit head
//	  learn.LearnedPolicy      with --learn: the learned policy file
package worker

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/intercept"
	"github.com/nsgate/nsgate/internal/diag/starttrace"
	"github.com/nsgate/nsgate/internal/hostpath"
	"github.com/nsgate/nsgate/learn"
	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
	"github.com/nsgate/nsgate/tun"
	"github.com/nsgate/nsgate/tun/tundev"
)

// ExitFailure is Run's status when nsgate itself failed (set-up, the audit
// log): the worker's own statuses are passed through.
const ExitFailure = 125

// Break switches off enforcement layers, one at a time, so that tests and
// `nsgate lab --break` can show a missing layer is noticed, or that another
// layer holds alone. Nothing else sets it; a run with any of them set says
// so on stderr and in its start record.
type Break struct {
	Metadata   bool // the cloud-metadata decision step
	FSReadOnly bool // the read-only remount of the host
	FSLandlock bool // Landlock's write rules
	// Guard layers treated as missing (guard.Config.Absent): with
	// BestEffort the run goes on without them, else it is refused.
	Landlock, Seccomp, ExecAudit bool
	// Credentials: placeholders are neither replaced nor refused;
	// RequestRules: terminated requests are not decided; EchoScrub: the
	// secret is put in as ever but what comes back is not scrubbed (nor
	// an unreadable encoding refused, nor Range dropped).
	Credentials, RequestRules, EchoScrub bool
}

// ParseBreak reads --unsafe-break: comma-separated layer names.
func ParseBreak(s string) (Break, error) {
	var b Break
	for _, name := range strings.Split(s, ",") {
		switch name {
		case "":
		case "metadata":
			b.Metadata = true
		case "fs-readonly":
			b.FSReadOnly = true
		case "fs-landlock":
			b.FSLandlock = true
		case guard.LayerLandlock:
			b.Landlock = true
		case guard.LayerSeccomp:
			b.Seccomp = true
		case guard.LayerExecAudit:
			b.ExecAudit = true
		case "credentials":
			b.Credentials = true
		case "request-rules":
			b.RequestRules = true
		case "echo-scrub":
			b.EchoScrub = true
		default:
			return Break{}, fmt.Errorf("--unsafe-break %q: only metadata, fs-readonly, fs-landlock, landlock, seccomp, exec-audit, credentials, request-rules and echo-scrub can be broken (comma-separated)", s)
		}
	}
	return b, nil
}

func (b Break) String() string {
	return strings.Join(append(b.layers(false), b.layers(true)...), ",")
}

// absent is the guard layers b takes away (guard.Config.Absent).
func (b Break) absent() []string { return b.layers(true) }

// layers lists the layers b switches off: the guard's, or the others.
func (b Break) layers(guardLayers bool) []string {
	var s []string
	for _, l := range []struct {
		on, guard bool
		name      string
	}{{b.Metadata, false, "metadata"}, {b.FSReadOnly, false, "fs-readonly"}, {b.FSLandlock, false, "fs-landlock"},
		{b.Credentials, false, "credentials"}, {b.RequestRules, false, "request-rules"}, {b.EchoScrub, false, "echo-scrub"},
		{b.Landlock, true, guard.LayerLandlock}, {b.Seccomp, true, guard.LayerSeccomp}, {b.ExecAudit, true, guard.LayerExecAudit}} {
		if l.on && l.guard == guardLayers {
			s = append(s, l.name)
		}
	}
	return s
}

// Config is one run. Session carries the gateway's part (policy, audit,
// address plan, limits); Run fills in its Start record's argv, the reload
// hook and the pcap writer.
type Config struct {
	Argv    []string
	Session session.Config
	// Pcap is a file to write a pcap of the worker's TUN to ("" none).
	Pcap string
	// PcapMax bounds the pcap, in bytes (0: no bound): the worker
	// decides how many packets cross its link. Packets past it are not
	// captured (the exit record's pcap_dropped counts them).
	PcapMax int64
	// Exec guard: programs the worker may run besides the policy's
	// exec.allow, and what it may do beyond the defaults.
	ExecAllow              []string
	AllowUserns, AllowUnix bool
	BestEffort             bool // start even if Landlock or seccomp is missing
	// File-system view: --rw, --ro, --home.
	Writable, ReadOnly []string
	HomeDir            string
	// ScratchSize bounds the worker's private directories together, in
	// bytes (--scratch-size): 0 sandbox.DefaultScratchSize, negative the
	// kernel's default.
	ScratchSize int64
	// MaxProcs bounds the worker's processes and threads (--max-procs;
	// 0: sandbox.DefaultMaxProcs), and never above half of nsgate's own
	// RLIMIT_NPROC.
	MaxProcs int
	// Root maps the caller to uid 0 inside the sandbox.
	Root bool
	// Publish are inbound forwards from the host to the worker.
	Publish []inbound.Rule
	Break   Break
	// Quiet: no "running without" line (the degraded record is written
	// all the same).
	Quiet bool
	// Learn, when set, is the file to write a learned policy to (nsgate
	// run --learn): the worker runs under policy.Learning of the policy
	// (every name and public address allowed, the built-in sets and deny
	// rules still refuse; the exec guard is unchanged), and at its exit
	// what it used becomes a minimal policy (package learn). The file is
	// opened at start, so that a path nsgate cannot write fails the run
	// before the worker starts, and hidden from the worker.
	Learn string
	// Env is the worker's environment (nil: nsgate's own).
	Env   []string
	Stdio sandbox.Stdio
}

// run holds one Run while it lives.
type run struct {
	cfg    Config
	stderr io.Writer
	s      *session.Session
	child  *sandbox.Child
	// fixed holds what a reload cannot change for the running worker
	// (setFixed, onReload; the reload runs on a goroutine of its own).
	fixed struct {
		sync.Mutex
		set  bool
		exec []string
		fs   policy.Filesystem
	}
	cleanup []func() // after the session closed, last first
	// learner sees every event (session.Config.Observe) under --learn;
	// out is the learned file, written by finish once the worker ran.
	// paths decides every host path the run opens (internal/hostpath).
	paths   *hostpath.Checker
	learner *learn.Collector
	out     *os.File
	ran     bool
	// slot gives back the start slot (startSlot) once the worker runs
	// or the start failed.
	slot func()
}

// Run starts cfg.Argv as the worker and returns its exit status (128+N
// when a signal N ended it), or ExitFailure, after one line on stderr
// naming the cause, when nsgate failed: set-up, or the audit log (which
// fails closed: the worker is killed).
func Run(cfg Config) int {
	r := &run{cfg: cfg, stderr: cfg.Stdio.Stderr, slot: func() {}}
	if r.stderr == nil {
		r.stderr = os.Stderr
	}
	return r.run()
}

func (r *run) errorf(format string, args ...any) {
	fmt.Fprintf(r.stderr, "nsgate: "+format+"\n", args...)
}

// fail says err (unless the audit log failed: then Close says that, the
// cause) and ends the run with ExitFailure.
func (r *run) fail(err error) int {
	if r.s == nil || !r.s.AuditFailed() {
		r.errorf("%v", err)
	}
	r.slot()
	if r.child != nil {
		r.child.Kill()
	}
	r.finish(ExitFailure)
	return ExitFailure
}

func (r *run) run() int {
	cfg := &r.cfg
	// A write to a broken pipe on standard output or error (the human
	// lines, when whoever read them went away) would kill nsgate with
	// SIGPIPE: no exit record, a head file that anchors only the
	// records before the run. With SIGPIPE asked for, the write fails
	// with EPIPE instead: the human lines ignore it, and a log on
	// standard error (--audit -) fails closed as on any write error. A
	// handler, unlike SIG_IGN, is reset at exec, so the worker keeps the
	// default.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	degraded, err := guard.Preflight(guard.Config{BestEffort: cfg.BestEffort, Absent: cfg.Break.absent()})
	if err != nil {
		r.errorf("exec guard cannot be enforced: %v", err)
		return ExitFailure
	}
	if b := cfg.Break.String(); b != "" {
		r.errorf("WARNING: the %s layer is switched off (--unsafe-break): this run is NOT safe", b)
		// The guard's layers are in degraded already, as missing.
		if other := cfg.Break.layers(false); len(other) > 0 {
			degraded = append(degraded, strings.Join(other, ",")+" (--unsafe-break)")
		}
	}
	// Every host path nsgate opens is decided now, against the trees the
	// worker may write (internal/hostpath); the policy's filesystem.write
	// is added once the view is planned, and everything resolved so far is
	// checked again then.
	if r.paths, err = r.hostPaths(); err != nil {
		return r.fail(err)
	}
	scfg0 := &cfg.Session
	scfg0.Paths = r.paths
	// The pcap exists before the worker's view is built, so that the view
	// hides it.
	if cfg.Pcap != "" {
		if err := cfg.pcapClash(); err != nil {
			return r.fail(err)
		}
		pf, err := openOutput(r.paths, cfg.Pcap, os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return r.fail(fmt.Errorf("pcap: %w", err))
		}
		// The gateway buffers the capture and writes the rest when it
		// closes, before the exit record counts what it lost.
		cfg.Session.Pcap = pf
		cfg.Session.PcapMax = cfg.PcapMax
		r.cleanup = append(r.cleanup, func() { pf.Close() })
	}
	scfg := cfg.Session
	if cfg.Learn != "" {
		_, statErr := os.Stat(cfg.Learn)
		if r.out, err = learn.OpenOutputWith(cfg.Learn, r.paths); err != nil {
			return r.fail(err)
		}
		out := r.out
		r.cleanup = append(r.cleanup, func() {
			out.Close()
			if !r.ran && statErr != nil {
				os.Remove(out.Name()) // made here, never written
			}
		})
		r.learner = learn.NewCollector(learn.Learned)
		scfg.Learn = true
		scfg.Observe = r.learner.Observe
		r.errorf("learning: the worker may reach every name and public address on any port (the cloud-metadata set, the special ranges and deny rules still refuse); what it uses is written to %s at exit", cfg.Learn)
	}
	scfg.Reload = session.ReloadOnSIGHUP
	scfg.OnReload = r.onReload
	scfg.WithoutMetadataStep = cfg.Break.Metadata
	scfg.BreakSubstitute, scfg.BreakPathCheck, scfg.BreakScrub = cfg.Break.Credentials, cfg.Break.RequestRules, cfg.Break.EchoScrub
	scfg.Start.Argv = cfg.Argv
	scfg.Start.PID = os.Getpid()
	scfg.Start.Degraded = degraded
	if r.s, err = session.Open(scfg); err != nil {
		return r.fail(err)
	}
	starttrace.Mark("session-open")
	// From here until the worker runs is what the start gate spaces out
	// (not session.Open, which may wait for a reader of a FIFO log).
	r.slot = startSlot()
	starttrace.Mark("slot")

	start, err := r.startPolicy()
	if err != nil {
		return r.fail(err)
	}
	gcfg := guard.Config{
		Command:     cfg.Argv,
		ExecAllow:   append(slices.Clone(cfg.ExecAllow), start.ExecAllow()...),
		AllowUserns: cfg.AllowUserns,
		AllowUnix:   cfg.AllowUnix,
		BestEffort:  cfg.BestEffort,
		Absent:      cfg.Break.absent(),
	}
	// Resolved here for a clear error before any namespace exists; init
	// resolves again in the worker's mount namespace and enforces that.
	plan, err := guard.Resolve(gcfg)
	if err != nil {
		return r.fail(err)
	}
	for _, si := range plan.ShellInterpreters() {
		// Said even with --quiet: it is about what the allowlist means.
		r.errorf("warning: %s is a script run by the shell %s, so the worker may run that shell with any command line; to avoid it, run the program the script starts instead", si.Script, si.Shell)
	}
	view, err := r.view(plan)
	if err != nil {
		return r.fail(err)
	}
	paths, devices := view.WritePaths()
	// The host trees the worker may write: --rw, the policy's
	// filesystem.write, --home (the scratch directories are private).
	if err := r.paths.AddWritable(append(slices.Clone(view.Writable), view.HomeFrom)...); err != nil {
		return r.fail(err)
	}
	gcfg.Writes = &guard.WriteRules{Paths: paths, Devices: devices}
	view.KeepHostWritable = cfg.Break.FSReadOnly
	if cfg.Break.FSLandlock {
		gcfg.Writes = nil
	}
	gspec, err := json.Marshal(gcfg)
	if err != nil {
		return r.fail(err)
	}
	spec := sandbox.Spec{
		Argv:      cfg.Argv,
		Root:      cfg.Root,
		Iface:     Iface(scfg.Plan, scfg.MTU, scfg.IPv6),
		View:      view,
		Hostname:  "nsgate",
		GuardSpec: gspec,
		Env:       cfg.Env,
		// SysV shared memory is bounded like the private directories.
		Quota: sandbox.DefaultQuota(uint64(cmp.Or(cfg.MaxProcs, sandbox.DefaultMaxProcs)), view.ScratchSize),
	}
	if eng := r.s.Intercept(); eng != nil {
		// The worker trusts the run's CA with no flags, and holds
		// placeholders, never the secrets (docs/credentials.md).
		spec.Env = eng.WorkerEnv(os.Environ())
		spec.InitEnvDrop = eng.Vault.SourceEnv()
		bundle, create := intercept.BundleTarget()
		spec.View.Files = append(spec.View.Files, sandbox.File{Path: bundle, Content: string(eng.Bundle()), Create: create})
		if nss, err := nssDB(eng.CA.PEM()); err != nil {
			r.errorf("warning: %v", err)
		} else {
			spec.View.HomeFiles = append(spec.View.HomeFiles, nss...)
		}
		// A placeholder_file lands in the private home; with --home DIR
		// (the caller's own folder) nsgate writes nothing there, so the
		// run stops rather than start a worker without its placeholder.
		files := eng.Vault.WorkerFiles()
		for _, p := range slices.Sorted(maps.Keys(files)) {
			if view.HomeFrom != "" {
				return r.fail(fmt.Errorf("credentials: placeholder_file %s needs nsgate's private home; with --home it cannot be written (use placeholder_env)", p))
			}
			spec.View.HomeFiles = append(spec.View.HomeFiles, sandbox.HomeFile{Rel: strings.TrimPrefix(p, "~/"), Data: []byte(files[p])})
		}
	}
	starttrace.Mark("planned")
	child, err := sandbox.Start(spec, cfg.Stdio)
	if err != nil {
		return r.fail(err)
	}
	r.child = child
	r.cleanup = append(r.cleanup, func() {
		if r.ran {
			// The worker and its init have exited: nothing is left in
			// the namespace (see tun.CloseDead).
			tun.CloseDead(child.TunFD)
			return
		}
		syscall.Close(child.TunFD)
	})
	r.s.StopOnAuditFailure(func() { child.Signal(syscall.SIGKILL) }) // the audit fails closed
	child.ExecListener = r.s.ExecAudit(plan)

	link, err := tun.NewEndpoint(child.TunFD, tun.EndpointOptions{MTU: scfg.MTU})
	if err != nil {
		return r.fail(err)
	}
	if err := r.s.Attach(link); err != nil {
		return r.fail(err)
	}
	starttrace.Mark("attached")
	for _, rule := range cfg.Publish {
		if _, err := r.s.Inbound().Add(rule); err != nil {
			return r.fail(fmt.Errorf("--publish %s: %w", rule.Listen(), err))
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
	r.slot()
	starttrace.Mark("released")
	if len(d) > 0 {
		r.s.Log().Log(audit.Policy{Action: "degraded", Error: "not in force: " + strings.Join(d, ", "), Layers: d})
		if !cfg.Quiet {
			r.errorf("running without %s", strings.Join(d, ", "))
		}
	}
	r.child = nil // it exits by itself now
	r.ran = true
	return r.finish(child.Wait())
}

// setFixed records the sections a reload cannot change for the running
// worker: the exec.allow of the policy it started with and its
// filesystem view.
func (r *run) setFixed(p *policy.Policy, fs policy.Filesystem) {
	r.fixed.Lock()
	defer r.fixed.Unlock()
	r.setFixedLocked(p, fs)
}

func (r *run) setFixedLocked(p *policy.Policy, fs policy.Filesystem) {
	r.fixed.set, r.fixed.exec, r.fixed.fs = true, p.ExecAllow(), fs
}

// startPolicy returns the policy in force now and records its exec.allow
// and filesystem section (r.fixed.fs) as fixed, in one step under the lock
// that onReload takes: a reload either lands before (and the worker
// starts with it) or is compared against what the worker starts with.
func (r *run) startPolicy() (*policy.Policy, error) {
	r.fixed.Lock()
	defer r.fixed.Unlock()
	p := r.s.Policy()
	fs, err := p.Filesystem(os.Getenv("HOME"))
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", r.cfg.Session.PolicyPath, err)
	}
	r.setFixedLocked(p, fs)
	return p, nil
}

// onReload says, on stderr and (through its result) in the audit log,
// when a reloaded policy's exec.allow or filesystem section differs from
// the one the worker started with: those are fixed at start (Landlock,
// the exec guard and the mounts cannot be changed under a running
// worker), so the change applies to the next run, be it wider or
// narrower. Before the worker's start nothing is fixed yet.
func (r *run) onReload(p *policy.Policy) string {
	r.fixed.Lock()
	defer r.fixed.Unlock()
	if !r.fixed.set {
		return ""
	}
	var changed []string
	if !slices.Equal(p.ExecAllow(), r.fixed.exec) {
		changed = append(changed, "exec.allow")
	}
	if fs, err := p.Filesystem(os.Getenv("HOME")); err != nil || !slices.Equal(fs.Write, r.fixed.fs.Write) || !slices.Equal(fs.Hide, r.fixed.fs.Hide) {
		changed = append(changed, "filesystem")
	}
	if len(changed) == 0 {
		return ""
	}
	note := "reload: " + strings.Join(changed, " and ") + " changed; not in force for the running worker (it keeps the programs and file system view it started with), the new one applies to the next run"
	r.errorf("%s", note)
	return note
}

// finish closes the session (exit record, head) and what the run opened
// besides. It returns the exit status: code, or ExitFailure when the audit
// log failed.
func (r *run) finish(code int) int {
	var base *policy.Policy
	if r.s != nil {
		base = r.s.Policy()
		code = r.s.Close(code)
	}
	if r.ran && r.learner != nil {
		code = r.writeLearned(base, code)
	}
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
	return code
}

// writeLearned writes the learned policy (base is the policy in force at
// the end: its rules are kept) and says so; it returns code, or
// ExitFailure when the file could not be written.
func (r *run) writeLearned(base *policy.Policy, code int) int {
	if r.cfg.Session.PolicyPath == "" {
		base = nil
	}
	res := r.learner.Result(nil)
	data, err := learn.LearnedPolicy(res, learn.Run{
		Argv: r.cfg.Argv, Time: time.Now(), Base: base, BasePath: r.cfg.Session.PolicyPath,
		ExecAllow: r.cfg.ExecAllow, ExitCode: code,
	})
	if err == nil {
		err = learn.WriteFile(r.out, data)
	}
	if err != nil {
		r.errorf("learn: %v", err)
		return ExitFailure
	}
	r.errorf("learned policy written to %s: %d allow rules for %d names and %d addresses (%d wildcards), %d refused programs suggested in comments; review it with nsgate check %s",
		r.cfg.Learn, len(res.Rules), res.Hosts, res.Addrs, res.Wildcards, len(res.Execs), r.cfg.Learn)
	return code
}

// Iface is the worker's TUN device on plan.
func Iface(plan netplan.Plan, mtu uint32, ipv6 bool) tundev.Iface {
	ifc := tundev.Iface{Name: "tun0", MTU: mtu, Addrs: []netip.Prefix{plan.GuestPrefix4()}, Gateways: []netip.Addr{plan.Gateway4()}}
	if ipv6 {
		ifc.Addrs = append(ifc.Addrs, plan.GuestPrefix6())
		ifc.Gateways = append(ifc.Gateways, plan.Gateway6())
	}
	return ifc
}

// view plans the worker's file system: the host read-only but for --rw
// and the policy's filesystem.write, private scratch directories and home
// (or --home), and nsgate's own files hidden.
func (r *run) view(plan guard.Plan) (sandbox.View, error) {
	cfg, scfg := &r.cfg, &r.cfg.Session
	var own []string
	for _, p := range []string{scfg.PolicyPath, scfg.AuditKey, cfg.Pcap, cfg.Learn} {
		if p != "" {
			own = append(own, p)
		}
	}
	if eng := r.s.Intercept(); eng != nil {
		own = append(own, eng.Vault.SourceFiles()...) // the secrets' files
	}
	if scfg.AuditPath != "" && scfg.AuditPath != "-" {
		own = append(own, scfg.AuditPath, scfg.AuditPath+".head")
	}
	switch c := scfg.AuditCopy; c {
	case "", "-", "/dev/stdout", "/dev/stderr": // the process's own streams
	default:
		own = append(own, c) // a FIFO: the worker must not write into it
	}
	// startPolicy's; a reload only reads it from here on.
	fs := r.fixed.fs
	hide := fs.Hide
	// The start gate's folder is nsgate's too: a worker that saw it could
	// flock the slots (no write access needed) and hold up every later
	// start of the user. /run/user/UID is private anyway, but
	// XDG_RUNTIME_DIR may lie elsewhere. It is made now, even with the
	// gate off for this run, so that a later start cannot make it where
	// this worker already looks.
	if d, err := gateDir(); err == nil {
		hide = append(slices.Clone(hide), d)
	}
	progs, err := sandbox.Programs()
	if err != nil {
		return sandbox.View{}, fmt.Errorf("run: find own executable: %w", err)
	}
	cwd, _ := os.Getwd()
	var hostSockets []string
	if cfg.AllowUnix { // the worker may connect: none of the host's may be in its view
		if hostSockets, err = sandbox.HostSocketPaths(); err != nil {
			return sandbox.View{}, fmt.Errorf("run: --allow-unix: cannot list the host's unix sockets to hide them: %w", err)
		}
	}
	v, err := sandbox.PlanView(sandbox.ViewConfig{
		HostSockets: hostSockets,
		Writable:    append(slices.Clone(cfg.Writable), fs.Write...),
		Hide:        hide,
		ReadOnly:    cfg.ReadOnly,
		Home:        os.Getenv("HOME"),
		HomeDir:     cfg.HomeDir,
		ScratchSize: cfg.ScratchSize,
		UID:         os.Getuid(),
		RuntimeDir:  os.Getenv("XDG_RUNTIME_DIR"),
		SessionBus:  os.Getenv("DBUS_SESSION_BUS_ADDRESS"),
		SSHAgent:    os.Getenv("SSH_AUTH_SOCK"),
		SystemBus:   os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"),
		EngineHosts: []string{os.Getenv("DOCKER_HOST"), os.Getenv("CONTAINER_HOST"),
			os.Getenv("CONTAINERD_ADDRESS"), os.Getenv("BUILDKIT_HOST")},
		Exec:       plan.Allow,
		Own:        own,
		Programs:   progs,
		ResolvConf: scfg.Plan.ResolvConf(scfg.IPv6),
		Cwd:        cwd,
	})
	if err != nil {
		return sandbox.View{}, fmt.Errorf("run: %w", err)
	}
	for _, w := range v.Warnings {
		r.errorf("warning: %s", w)
	}
	return v, nil
}

// pcapClash refuses a --pcap path that is one of nsgate's own files: the
// pcap is opened with O_TRUNC, and the audit log, its head file, the key
// or the policy under it would be emptied and overwritten with packets.
// It compares the files, not the names, so another name for one of them
// (a link) is refused too.
func (c *Config) pcapClash() error {
	st, statErr := os.Stat(c.Pcap)
	abs, _ := filepath.Abs(c.Pcap)
	s := &c.Session
	own := []struct{ what, path string }{
		{"the policy", s.PolicyPath}, {"the audit key", s.AuditKey}, {"the learned policy", c.Learn},
	}
	if s.AuditPath != "" && s.AuditPath != "-" {
		own = append(own, struct{ what, path string }{"the audit log", s.AuditPath},
			struct{ what, path string }{"the audit log's head file", s.AuditPath + ".head"})
	}
	if s.AuditCopy != "" {
		own = append(own, struct{ what, path string }{"the audit copy", s.AuditCopy})
	}
	for _, o := range own {
		if o.path == "" {
			continue
		}
		ost, err := os.Stat(o.path)
		same := statErr == nil && err == nil && os.SameFile(st, ost)
		if statErr != nil || err != nil {
			// Not there yet: one new file named twice.
			oabs, _ := filepath.Abs(o.path)
			same = abs != "" && abs == oabs
		}
		if same {
			return fmt.Errorf("--pcap %s is %s (%s): it would be emptied", c.Pcap, o.what, o.path)
		}
	}
	return nil
}
