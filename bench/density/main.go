// Command density is nsgate's density benchmark (`make bench-density`):
// it starts N sandboxes at once and measures how many came up, how long
// each took, what each costs in memory, threads and idle CPU, and the
// connection rate of one more sandbox while the N idle. It does the same,
// in the same run, for the floor (bare `unshare` with the same
// namespaces), for the floor with one small Go program started in each
// sandbox (unshare-go, with -gostub: what one Go runtime start per
// sandbox adds in a burst) and for the peers pasta and slirp4netns.
//
// The nsgate binaries are copied with the nsgate-init beside each, if
// any: -nsgate-b naming a copy of nsgate alone measures the sandboxes
// with nsgate re-executed as their init, beside nsgate-init, in one run.
//
//	density -nsgate bin/nsgate -connbench PATH [-gostub PATH] [-n 100,500,1000]
//	        [-cases unshare,unshare-go,nsgate,pasta,slirp4netns] [-reps 1] [-out DIR]
//
// Safety: it re-executes itself in a sealed network namespace (package
// lab/sealed: a new netns holding only lo, with a user namespace when not
// root) and checks it before starting anything, so no packet leaves the
// machine. As root it starts every sandbox as the ordinary user -user
// (default nsgate-test: setuid and setgid in the forked child, as setpriv
// does); without root, as the caller, inside the sealed user namespace.
//
// Start latency of one sandbox is the time from the start line to the
// launcher's read of the worker's first line, "ready", on the worker's
// standard output (a pipe). The worker is
// `sh -c 'echo ready; exec sleep 1000000'` in every case, so the line is
// written only once the worker runs inside its sandbox. The start line:
// the launcher first forks all N commands, each held by a small shell
// that waits on a shared pipe, and once all N wait it closes the pipe,
// which releases them at the same instant (each shell then execs its
// command, so the process tree is the command's own). The launcher reads
// every pipe concurrently.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/nsgate/nsgate/lab/sealed"
)

// idleWorker prints the readiness line and then idles. sleep keeps
// running as the worker (exec), so the process tree is the same in
// every case.
var idleWorker = []string{"/bin/sh", "-c", "echo ready; exec sleep 1000000"}

// Addresses inside the sealed namespace: the connection server on lo,
// and pasta's template interface (a veth pair whose ends both stay in
// the sealed namespace; pasta needs an interface with a default route).
const (
	serverAddr = "127.0.0.1:8080"
	vethAddr   = "192.0.2.1/24"
	vethGW     = "192.0.2.2"
)

type config struct {
	sizes      []int
	cases      []string
	reps       int
	nsgate     string
	nsgateB    string
	envB       []string
	nsgateArgs []string
	connbench  string
	gostub     string
	policy     string
	user       string
	settle     time.Duration
	idle       time.Duration
	conn       time.Duration
	timeout    time.Duration
	out        string
	memShare   float64
	keep       bool
	pause      time.Duration
	trace      bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "density:", err)
		os.Exit(2)
	}
	if _, ok := sealed.Current(); !ok {
		code, err := sealed.Enter(os.Args, os.Environ(), sealed.Stdio{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "density:", err)
			os.Exit(1)
		}
		os.Exit(code)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "density:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("density", flag.ContinueOnError)
	var c config
	sizes := fs.String("n", "100,500,1000", "comma-separated numbers of sandboxes started at once")
	cases := fs.String("cases", "unshare,unshare-go,nsgate,pasta,slirp4netns", "comma-separated cases, run in this order for each size (unshare-go only with -gostub)")
	fs.IntVar(&c.reps, "reps", 1, "repetitions of each size")
	fs.StringVar(&c.nsgate, "nsgate", "bin/nsgate", "the nsgate binary")
	fs.StringVar(&c.nsgateB, "nsgate-b", "", "another nsgate binary, case nsgate-b, for A/B comparisons in one run")
	envB := fs.String("env-b", "", "space-separated K=V added to the environment of case nsgate-b")
	nargs := fs.String("nsgate-args", "", "extra `nsgate run` flags, space-separated")
	fs.StringVar(&c.connbench, "connbench", "", "the connbench binary (go build ./bench/connbench); empty: no connection rates")
	fs.StringVar(&c.gostub, "gostub", "", "the gostub binary (go build ./bench/gostub), for case unshare-go; empty: no unshare-go")
	fs.StringVar(&c.policy, "policy", "bench/policy.yaml", "nsgate's policy")
	fs.StringVar(&c.user, "user", "nsgate-test", "as root: the ordinary user the sandboxes run as")
	fs.DurationVar(&c.settle, "settle", 3*time.Second, "wait after the last sandbox is ready, before measuring memory")
	fs.DurationVar(&c.idle, "idle", 5*time.Second, "window over which idle CPU is measured")
	fs.DurationVar(&c.conn, "conn", 5*time.Second, "length of each connection-rate run (0: none)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "how long a burst may take to come up")
	fs.StringVar(&c.out, "out", "", "directory for the raw results (results.tsv, latencies.tsv, failed sandboxes' stderr)")
	fs.Float64Var(&c.memShare, "mem-share", 0.6, "skip a burst whose expected memory exceeds this share of MemAvailable")
	fs.BoolVar(&c.trace, "trace", false, "nsgate cases: print when each sandbox passed each start-up phase (NSGATE_STARTTRACE)")
	fs.DurationVar(&c.pause, "pause", 3*time.Second, "pause before each burst (plus 10 ms per sandbox), for the last one's teardown to finish")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (the binaries run, audit logs, stderr), e.g. for perf")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.sizes, err = parseSizes(*sizes); err != nil {
		return c, err
	}
	for _, k := range strings.Split(*cases, ",") {
		k = strings.TrimSpace(k)
		if _, ok := caseKinds[k]; !ok {
			return c, fmt.Errorf("unknown case %q (unshare, unshare-go, nsgate, nsgate-b, pasta, slirp4netns)", k)
		}
		if k == "unshare-go" && c.gostub == "" {
			if *cases != fs.Lookup("cases").DefValue {
				return c, errors.New("case unshare-go needs -gostub")
			}
			continue
		}
		c.cases = append(c.cases, k)
	}
	c.nsgateArgs = strings.Fields(*nargs)
	c.envB = strings.Fields(*envB)
	if c.reps < 1 {
		return c, errors.New("-reps must be at least 1")
	}
	for _, p := range []*string{&c.nsgate, &c.nsgateB, &c.connbench, &c.gostub, &c.policy, &c.out} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// parseSizes parses "100,500,1000".
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-n: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// bench is one run's state inside the sealed namespace.
type bench struct {
	cfg  config
	work string
	cred *syscall.Credential // nil: run as ourselves
	env  []string
	// bin are the binaries the sandboxes run, copied into work so that
	// the ordinary user can run them wherever the checkout lies.
	nsgate, nsgateB, connbench, gostub, policy string
	runas0                                     bool // pasta as uid 0 must be told to stay so
	res                                        *os.File
	lat                                        *os.File
	// perSandboxKiB: the last burst's MemAvailable drop per sandbox, by
	// case, to skip a burst that would not fit.
	perSandboxKiB map[string]uint64
}

func run(cfg config) error {
	if err := sealed.Check(); err != nil {
		return fmt.Errorf("refusing to run: %w", err)
	}
	if _, err := sealed.AddLoopback(nil, nil); err != nil {
		return err
	}
	b := &bench{cfg: cfg, perSandboxKiB: map[string]uint64{}}
	var err error
	if b.work, err = os.MkdirTemp("", "nsgate-density."); err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "density: keeping %s\n", b.work)
	} else {
		defer os.RemoveAll(b.work)
	}
	if err := os.Chmod(b.work, 0o755); err != nil {
		return err
	}
	uid, gid := os.Getuid(), os.Getgid()
	if info, _ := sealed.Current(); os.Getuid() == 0 && !info.Userns {
		u, err := user.Lookup(cfg.user)
		if err != nil {
			return fmt.Errorf("as root the sandboxes run as an ordinary user: %w (create it, or name another with -user)", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		b.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	} else if os.Getuid() == 0 {
		b.runas0 = true
	}
	home, rundir := filepath.Join(b.work, "home"), filepath.Join(b.work, "run")
	for _, d := range []string{home, rundir, filepath.Join(b.work, "audit"), filepath.Join(b.work, "err")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	// A login session's runtime directory (nsgate's start gate lives
	// there).
	if err := os.Chmod(rundir, 0o700); err != nil {
		return err
	}
	b.env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home, "XDG_RUNTIME_DIR=" + rundir, "LANG=C.UTF-8"}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		b.env = append(b.env, "USER="+u.Username, "LOGNAME="+u.Username)
	}
	if b.nsgate, err = copyNsgate(b.work, cfg.nsgate); err != nil && slices.Contains(cfg.cases, "nsgate") {
		return fmt.Errorf("nsgate binary: %w", err)
	}
	if slices.Contains(cfg.cases, "nsgate-b") {
		if err := os.Mkdir(filepath.Join(b.work, "b"), 0o755); err != nil {
			return err
		}
		if b.nsgateB, err = copyNsgate(filepath.Join(b.work, "b"), cfg.nsgateB); err != nil {
			return fmt.Errorf("-nsgate-b: %w", err)
		}
	}
	if b.policy, err = copyInto(b.work, cfg.policy); err != nil && slices.Contains(cfg.cases, "nsgate") {
		return fmt.Errorf("policy: %w", err)
	}
	if cfg.connbench != "" {
		if b.connbench, err = copyInto(b.work, cfg.connbench); err != nil {
			return fmt.Errorf("connbench: %w", err)
		}
	}
	if cfg.gostub != "" {
		if b.gostub, err = copyInto(b.work, cfg.gostub); err != nil {
			return fmt.Errorf("gostub: %w", err)
		}
	}
	var cases []string
	for _, k := range cfg.cases {
		ok := true
		for _, tool := range caseKinds[k].needs {
			if _, err := exec.LookPath(tool); err != nil {
				fmt.Fprintf(os.Stderr, "density: leaving out case %s: it needs %s (apt-get install %s)\n", k, tool, debPackage(tool))
				ok = false
			}
		}
		if ok {
			cases = append(cases, k)
		}
	}
	cfg.cases = cases
	b.cfg.cases = cases
	raiseNoFile()

	if b.connbench != "" {
		srv := exec.Command(b.connbench, "serve", "-addr", serverAddr)
		srv.Stdout, srv.Stderr = io.Discard, os.Stderr
		srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := srv.Start(); err != nil {
			return fmt.Errorf("connbench serve: %w", err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
		if err := waitListening(serverAddr, 5*time.Second); err != nil {
			return err
		}
	}
	if slices.Contains(cfg.cases, "pasta") {
		if err := addTemplateLink(); err != nil {
			return fmt.Errorf("pasta's template interface: %w", err)
		}
	}

	outDir := cfg.out
	if outDir == "" {
		outDir = filepath.Join(b.work, "out")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if b.res, err = os.Create(filepath.Join(outDir, "results.tsv")); err != nil {
		return err
	}
	defer b.res.Close()
	if b.lat, err = os.Create(filepath.Join(outDir, "latencies.tsv")); err != nil {
		return err
	}
	defer b.lat.Close()
	fmt.Fprintln(b.lat, "case\tn\trep\tindex\tstart_ms\tok")

	b.header()
	for _, n := range cfg.sizes {
		for rep := 1; rep <= cfg.reps; rep++ {
			var rows []*result
			for _, k := range cfg.cases {
				r := b.burst(k, n, rep)
				rows = append(rows, r)
				b.record(r)
			}
			printTable(os.Stdout, n, rep, cfg.reps, rows)
		}
	}
	if cfg.out != "" {
		fmt.Fprintf(os.Stderr, "density: raw results in %s\n", cfg.out)
	}
	return nil
}

// caseKind is one way of starting a sandbox.
type caseKind struct {
	needs []string // programs it needs on PATH
	conn  bool     // has a network a connection rate can be measured on
	// guessKiB is a generous guess of the memory one sandbox takes,
	// used until a burst of the case has measured it: a burst that
	// would not fit is skipped rather than run into the OOM killer.
	guessKiB uint64
}

var caseKinds = map[string]caseKind{
	"unshare":     {needs: []string{"unshare"}, guessKiB: 2 << 10},
	"unshare-go":  {needs: []string{"unshare"}, guessKiB: 4 << 10},
	"nsgate":      {conn: true, guessKiB: 8 << 10},
	"nsgate-b":    {conn: true, guessKiB: 8 << 10},
	"pasta":       {needs: []string{"pasta"}, conn: true, guessKiB: 32 << 10},
	"slirp4netns": {needs: []string{"unshare", "slirp4netns"}, conn: true, guessKiB: 8 << 10},
}

func debPackage(tool string) string {
	switch tool {
	case "pasta":
		return "passt"
	case "unshare":
		return "util-linux"
	}
	return tool
}

// unshareArgv is the floor's command: the namespaces nsgate makes.
func unshareArgv(worker []string) []string {
	return append([]string{"unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--"}, worker...)
}

// argv is the command line of one sandbox of case k running worker.
func (b *bench) argv(k string, worker []string, i int, tag string) []string {
	switch k {
	case "unshare":
		return unshareArgv(worker)
	case "unshare-go":
		return unshareArgv(append([]string{b.gostub}, worker...))
	case "slirp4netns":
		// The worker waits until slirp4netns has configured tap0 in its
		// namespaces (attachSlirp): it says "ns", then reads a line.
		return unshareArgv(append([]string{"/bin/sh", "-c", `echo ns; read x; exec "$@"`, "sh"}, worker...))
	case "nsgate", "nsgate-b":
		bin := b.nsgate
		if k == "nsgate-b" {
			bin = b.nsgateB
		}
		a := []string{bin, "run", "--quiet", "--policy", b.policy,
			"--audit", filepath.Join(b.work, "audit", fmt.Sprintf("%s-%d.jsonl", tag, i)),
			"--exec-allow", sleepPath()}
		a = append(a, b.cfg.nsgateArgs...)
		return append(append(a, "--"), worker...)
	case "pasta":
		a := []string{"pasta", "--config-net", "-q", "-f", "-4"}
		if b.runas0 {
			a = append(a, "--runas", "0")
		}
		return append(append(a, "--"), worker...)
	}
	panic("unknown case " + k)
}

func sleepPath() string {
	if p, err := exec.LookPath("sleep"); err == nil {
		return p
	}
	return "/bin/sleep"
}

// sandbox is one launched sandbox.
type sandbox struct {
	i          int
	cmd        *exec.Cmd
	helper     *exec.Cmd // slirp4netns's helper
	launched   time.Time
	ready      time.Time
	ok         bool
	err        string
	errFile    string
	waiting    chan struct{} // closed when held at the barrier
	done       chan struct{} // closed when ready or failed
	exited     chan struct{} // closed when cmd was reaped
	stdinW     *os.File
	stdoutR    *os.File
	exitStatus string
}

// barrierScript holds a launched command at the start line: it says "w"
// and waits until the barrier pipe (fd 3) is closed, then closes it and
// becomes the command (exec, so the process tree is the command's).
const barrierScript = `echo w; read x <&3; exec 3<&-; exec "$@"`

// launch forks one sandbox of case k running worker; its stdout is a pipe
// the caller reads. With a barrier (the read end of a pipe), the sandbox
// waits until the pipe's write end is closed.
func (b *bench) launch(k string, worker []string, i int, tag string, barrier *os.File) (*sandbox, error) {
	s := &sandbox{i: i, done: make(chan struct{}), exited: make(chan struct{}), waiting: make(chan struct{})}
	argv := b.argv(k, worker, i, tag)
	if barrier != nil {
		argv = append([]string{"/bin/sh", "-c", barrierScript, "sh"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if barrier != nil {
		cmd.ExtraFiles = []*os.File{barrier}
	}
	cmd.Env = b.env
	if k == "nsgate-b" {
		cmd.Env = append(slices.Clone(b.env), b.cfg.envB...)
	}
	if b.cfg.trace && strings.HasPrefix(k, "nsgate") && barrier != nil {
		cmd.Env = append(slices.Clone(cmd.Env), "NSGATE_STARTTRACE="+b.tracePath(tag))
	}
	cmd.Dir = b.work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: b.cred}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	s.stdoutR = r
	cmd.Stdout = w
	if k == "slirp4netns" {
		ir, iw, err := os.Pipe()
		if err != nil {
			r.Close()
			return nil, err
		}
		defer ir.Close()
		cmd.Stdin, s.stdinW = ir, iw
	}
	s.errFile = filepath.Join(b.work, "err", fmt.Sprintf("%s-%d", tag, i))
	ef, err := os.Create(s.errFile)
	if err != nil {
		r.Close()
		return nil, err
	}
	defer ef.Close()
	cmd.Stderr = ef
	s.cmd = cmd
	s.launched = time.Now()
	if err := cmd.Start(); err != nil {
		r.Close()
		if s.stdinW != nil {
			s.stdinW.Close()
		}
		return nil, err
	}
	go func() {
		err := cmd.Wait()
		if err != nil {
			s.exitStatus = err.Error()
		}
		close(s.exited)
	}()
	return s, nil
}

// fail marks s as failed (once).
func (s *sandbox) fail(format string, args ...any) {
	s.err = fmt.Sprintf(format, args...)
	close(s.done)
}

// awaitReady reads s's stdout until the worker's "ready" line. For
// slirp4netns it first attaches the helper when the worker says "ns".
func (b *bench) awaitReady(k string, s *sandbox) {
	rd := bufio.NewReader(s.stdoutR)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			<-s.exited
			s.fail("exited before ready (%s): %s", orStr(s.exitStatus, "status 0"), tail(s.errFile))
			return
		}
		switch strings.TrimSpace(line) {
		case "w":
			close(s.waiting)
		case "ready":
			s.ready = time.Now()
			s.ok = true
			close(s.done)
			return
		case "ns":
			if err := b.attachSlirp(s); err != nil {
				s.fail("slirp4netns: %v", err)
				return
			}
		}
	}
}

// attachSlirp starts slirp4netns on the namespaces of s's worker (the
// child of unshare), waits until it has configured tap0, then lets the
// worker go on.
func (b *bench) attachSlirp(s *sandbox) error {
	pid, err := onlyChild(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer rr.Close()
	args := []string{"--configure", "--mtu=65520", "--ready-fd=3"}
	if b.cred != nil || os.Getuid() != 0 {
		args = append(args, "--userns-path=/proc/"+strconv.Itoa(pid)+"/ns/user")
	}
	h := exec.Command("slirp4netns", append(args, strconv.Itoa(pid), "tap0")...)
	h.Env = b.env
	h.ExtraFiles = []*os.File{rw}
	ef, err := os.OpenFile(s.errFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		rw.Close()
		return err
	}
	h.Stderr = ef
	h.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: b.cred}
	err = h.Start()
	rw.Close()
	ef.Close()
	if err != nil {
		return err
	}
	s.helper = h
	go h.Wait()
	buf := make([]byte, 1)
	if n, err := rr.Read(buf); n != 1 || buf[0] != '1' {
		return fmt.Errorf("not ready (%v)", err)
	}
	_, err = s.stdinW.Write([]byte("go\n"))
	return err
}

// onlyChild waits (briefly) for pid's single child and returns it.
func onlyChild(pid int) (int, error) {
	path := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	for range 200 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		if f := strings.Fields(string(b)); len(f) == 1 {
			return strconv.Atoi(f[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("pid %d has no single child", pid)
}

// result is one burst's measurements.
type result struct {
	kind      string
	n, rep    int
	skipped   string
	started   int
	lat       []time.Duration // of the started, ascending
	burst     time.Duration   // first launch to last ready
	failures  []string
	helperKiB uint64 // summed over the sandboxes: every process but the worker
	leaderKiB uint64 // of which the launched process (nsgate: the parent)
	workerKiB uint64
	memKiB    uint64 // MemAvailable before minus after
	threads   int    // helper threads, summed
	// startTicks is the CPU time its processes had used when measured
	// (start-up, and the settle time idle), summed.
	startTicks uint64
	idleCPU    float64
	connAlone  float64
	connIdle   float64
	stop       time.Duration
	// auditStops counts the sandboxes that nsgate stopped because their
	// audit log failed (their stderr says "audit log failed"), e.g. a
	// stuck-sink verdict; auditWhy is the first such message.
	auditStops int
	auditWhy   string
	measured   int // sandboxes whose processes were measured
	phases     phaseTimes
}

// burst starts n sandboxes of case k at once, measures them and stops
// them.
func (b *bench) burst(k string, n, rep int) *result {
	r := &result{kind: k, n: n, rep: rep}
	avail, _ := memAvailableKiB()
	per, ok := b.perSandboxKiB[k]
	if !ok {
		per = caseKinds[k].guessKiB
	}
	if float64(per*uint64(n)) > b.cfg.memShare*float64(avail) {
		r.skipped = fmt.Sprintf("skipped: %d × %.1f MiB would exceed %.0f%% of the %.0f MiB available", n, float64(per)/1024, b.cfg.memShare*100, float64(avail)/1024)
		fmt.Fprintf(os.Stderr, "density: %s n=%d: %s\n", k, n, r.skipped)
		return r
	}
	tag := fmt.Sprintf("%s-%d-%d", k, n, rep)
	// The kernel tears the last burst's namespaces down after its
	// processes are gone (network namespaces in a work queue): let it
	// finish first.
	time.Sleep(b.cfg.pause + time.Duration(n)*10*time.Millisecond)
	if b.connbench != "" && b.cfg.conn > 0 && caseKinds[k].conn {
		r.connAlone = b.connRate(k, tag+"-alone")
	}
	fmt.Fprintf(os.Stderr, "density: %s: starting %d at once\n", k, n)
	runtime.GC()
	before, _ := memAvailableKiB()
	sbs := make([]*sandbox, 0, n)
	// Every sandbox is forked first and held at the start line (a shell
	// reading a pipe); closing the pipe releases them all at once.
	hold, release, err := os.Pipe()
	if err != nil {
		r.failures = append(r.failures, "barrier: "+err.Error())
		return r
	}
	for i := range n {
		s, err := b.launch(k, idleWorker, i, tag, hold)
		if err != nil {
			r.failures = append(r.failures, fmt.Sprintf("#%d: launch: %v", i, err))
			continue
		}
		sbs = append(sbs, s)
		go b.awaitReady(k, s)
	}
	hold.Close()
	deadline := time.After(b.cfg.timeout)
	for _, s := range sbs {
		select {
		case <-s.waiting:
		case <-s.done:
		case <-deadline:
		}
	}
	first := time.Now()
	release.Close()
	for _, s := range sbs {
		s.launched = first
	}
	var last time.Time
wait:
	for _, s := range sbs {
		select {
		case <-s.done:
		case <-deadline:
			break wait
		}
	}
	for _, s := range sbs {
		select {
		case <-s.done:
			if s.ok {
				r.started++
				r.lat = append(r.lat, s.ready.Sub(s.launched))
				if s.ready.After(last) {
					last = s.ready
				}
			} else {
				r.failures = append(r.failures, fmt.Sprintf("#%d: %s", s.i, s.err))
			}
		default:
			r.failures = append(r.failures, fmt.Sprintf("#%d: not ready after %s", s.i, b.cfg.timeout))
		}
		ms, ok := float64(0), s.ok
		if ok {
			ms = float64(s.ready.Sub(s.launched).Microseconds()) / 1000
		}
		fmt.Fprintf(b.lat, "%s\t%d\t%d\t%d\t%.3f\t%v\n", k, n, rep, s.i, ms, ok)
	}
	slices.Sort(r.lat)
	if !last.IsZero() {
		r.burst = last.Sub(first)
	}
	if b.cfg.trace && strings.HasPrefix(k, "nsgate") {
		r.phases = b.readTrace(tag, sbs, first)
		r.phases.order = append(r.phases.order, "worker ready")
		r.phases.times["worker ready"] = r.lat
	}
	fmt.Fprintf(os.Stderr, "density: %s: %d/%d ready, p99 %s; measuring\n", k, r.started, n, percentile(r.lat, 99).Round(time.Millisecond))

	time.Sleep(b.cfg.settle)
	b.measure(r, sbs)
	if after, err := memAvailableKiB(); err == nil && before > after {
		r.memKiB = before - after
		if r.started > 0 {
			b.perSandboxKiB[k] = r.memKiB / uint64(r.started)
		}
	}
	if b.connbench != "" && b.cfg.conn > 0 && caseKinds[k].conn {
		r.connIdle = b.connRate(k, tag+"-idle")
	}
	r.stop = b.stopAll(k, sbs)
	for _, s := range sbs {
		if s.errFile == "" {
			continue
		}
		if data, err := os.ReadFile(s.errFile); err == nil {
			if i := bytes.Index(data, []byte("audit log failed")); i >= 0 {
				r.auditStops++
				if r.auditWhy == "" {
					line, _, _ := bytes.Cut(data[i:], []byte("\n"))
					r.auditWhy = string(line)
				}
			}
		}
	}
	if r.auditWhy != "" {
		fmt.Fprintf(os.Stderr, "density: %s n=%d: %d sandboxes stopped by their audit log, e.g. %s\n", k, n, r.auditStops, r.auditWhy)
	}
	return r
}

// tracePath is the start-up trace file of a burst.
func (b *bench) tracePath(tag string) string {
	return filepath.Join(b.work, "audit", "trace-"+tag)
}

// readTrace reads the start-up trace of a burst's sandboxes.
func (b *bench) readTrace(tag string, sbs []*sandbox, start time.Time) phaseTimes {
	ids := map[string]bool{}
	for _, s := range sbs {
		ids[strconv.Itoa(s.cmd.Process.Pid)] = true
	}
	f, err := os.Open(b.tracePath(tag))
	if err != nil {
		fmt.Fprintln(os.Stderr, "density: trace:", err)
		return phaseTimes{times: map[string][]time.Duration{}}
	}
	defer f.Close()
	p, err := parseTrace(f, ids, start)
	if err != nil {
		fmt.Fprintln(os.Stderr, "density: trace:", err)
	}
	return p
}

// measure reads the memory, threads and idle CPU of the sandboxes.
func (b *bench) measure(r *result, sbs []*sandbox) {
	t, err := scanProcs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "density: scan /proc:", err)
		return
	}
	var helpers []int
	for _, s := range sbs {
		if !s.ok {
			continue
		}
		procs := t.tree(s.cmd.Process.Pid)
		if s.helper != nil {
			procs = append(procs, t.tree(s.helper.Process.Pid)...)
		}
		if len(procs) == 0 {
			continue
		}
		r.measured++
		for j, p := range procs {
			r.startTicks += p.ticks
			kib, err := pssKiB(p.pid)
			if err != nil {
				continue
			}
			if p.comm == "sleep" {
				r.workerKiB += kib
				continue
			}
			r.helperKiB += kib
			r.threads += p.threads
			helpers = append(helpers, p.pid)
			if j == 0 {
				r.leaderKiB += kib
			}
		}
	}
	ticks := func() uint64 {
		var sum uint64
		for _, pid := range helpers {
			if s, err := readStat(pid); err == nil {
				sum += s.ticks
			}
		}
		return sum
	}
	t0, c0 := time.Now(), ticks()
	time.Sleep(b.cfg.idle)
	c1 := ticks()
	// Clock ticks are USER_HZ, 100 per second on Linux.
	r.idleCPU = float64(c1-c0) / 100 / time.Since(t0).Seconds() * 100
}

// connRate runs one more sandbox of case k whose worker is connbench's
// client, and returns its connections per second (0 when it failed).
func (b *bench) connRate(k, tag string) float64 {
	target := map[string]string{"nsgate": "bench.test:8080", "nsgate-b": "bench.test:8080", "pasta": vethGW + ":8080", "slirp4netns": "10.0.2.2:8080"}[k]
	worker := []string{b.connbench, "rate", "-4", "-addr", target, "-c", "1", "-t", b.cfg.conn.String()}
	s, err := b.launch(k, worker, 0, tag, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "density: %s connection rate: %v\n", k, err)
		return 0
	}
	var out strings.Builder
	s.stdoutR.SetReadDeadline(time.Now().Add(b.cfg.conn + time.Minute))
	rd := bufio.NewReader(s.stdoutR)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		if strings.TrimSpace(line) == "ns" {
			if err := b.attachSlirp(s); err != nil {
				fmt.Fprintf(os.Stderr, "density: %s connection rate: slirp4netns: %v\n", k, err)
			}
			continue
		}
		out.WriteString(line)
	}
	s.stdoutR.Close()
	select {
	case <-s.exited:
	case <-time.After(b.cfg.conn + time.Minute):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	if s.helper != nil {
		s.helper.Process.Signal(syscall.SIGTERM)
	}
	v, ok := parseRate(out.String())
	if !ok {
		fmt.Fprintf(os.Stderr, "density: %s connection rate: no result: %q %s\n", k, out.String(), tail(s.errFile))
	}
	return v
}

// stopSignal ends a sandbox of each case: nsgate and pasta stop on
// SIGTERM; unshare --fork ignores it while it waits for its child, and
// its --kill-child takes the child with it on SIGKILL.
var stopSignal = map[string]syscall.Signal{"nsgate": syscall.SIGTERM, "nsgate-b": syscall.SIGTERM, "pasta": syscall.SIGTERM,
	"unshare": syscall.SIGKILL, "unshare-go": syscall.SIGKILL, "slirp4netns": syscall.SIGKILL}

// stopAll ends every sandbox of case k: stopSignal to what was launched
// (SIGTERM to slirp4netns), then, after 60 s, SIGKILL to every process
// left in their process groups. It returns how long the launched
// processes took to exit.
func (b *bench) stopAll(k string, sbs []*sandbox) time.Duration {
	t0 := time.Now()
	for _, s := range sbs {
		s.cmd.Process.Signal(stopSignal[k])
		if s.helper != nil {
			s.helper.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(60 * time.Second)
wait:
	for _, s := range sbs {
		select {
		case <-s.exited:
		case <-deadline:
			break wait
		}
	}
	d := time.Since(t0)
	groups := map[int]bool{}
	for _, s := range sbs {
		groups[s.cmd.Process.Pid] = true
		if s.helper != nil {
			groups[s.helper.Process.Pid] = true
		}
	}
	// What a killed leader takes with it (unshare's child, by
	// --kill-child) goes a moment later.
	var members []int
	for range 50 {
		members = members[:0]
		t, _ := scanProcs()
		for _, p := range t.byPID {
			if groups[p.pgrp] {
				members = append(members, p.pid)
			}
		}
		if len(members) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	left := len(members)
	for _, pid := range members {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if left > 0 {
		fmt.Fprintf(os.Stderr, "density: %d processes left after SIGTERM were killed\n", left)
	}
	for _, s := range sbs {
		<-s.exited
		s.stdoutR.Close()
		if s.stdinW != nil {
			s.stdinW.Close()
		}
	}
	return d
}

// record writes r to results.tsv.
func (b *bench) record(r *result) {
	put := func(m string, v any) { fmt.Fprintf(b.res, "%s\t%d\t%d\t%s\t%v\n", r.kind, r.n, r.rep, m, v) }
	if r.skipped != "" {
		put("skipped", r.skipped)
		return
	}
	put("started", r.started)
	for _, p := range []float64{50, 90, 99, 100} {
		put(fmt.Sprintf("start_p%g_ms", p), ms(percentile(r.lat, p)))
	}
	put("burst_s", r.burst.Seconds())
	put("helper_pss_kib", r.helperKiB)
	put("leader_pss_kib", r.leaderKiB)
	put("worker_pss_kib", r.workerKiB)
	put("memavailable_drop_kib", r.memKiB)
	put("threads", r.threads)
	put("cpu_ticks", r.startTicks)
	put("idle_cpu_pct", r.idleCPU)
	put("conn_alone", r.connAlone)
	put("conn_idle", r.connIdle)
	put("stop_s", r.stop.Seconds())
	put("audit_stops", r.auditStops)
	for _, f := range r.failures {
		put("failure", f)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// header prints the machine, versions and the kernel limits a burst meets.
func (b *bench) header() {
	var uts syscall.Utsname
	syscall.Uname(&uts)
	rel := strings.TrimRight(string(int8sToBytes(uts.Release[:])), "\x00")
	mem, _ := readKB("/proc/meminfo")
	fmt.Printf("nsgate density benchmark: %s, %d CPUs, %.1f GiB RAM (%.1f GiB available at start)\n",
		rel, runtime.NumCPU(), float64(mem["MemTotal"])/(1<<20), float64(mem["MemAvailable"])/(1<<20))
	who := "as the caller, in the sealed user namespace"
	if b.cred != nil {
		who = "as " + b.cfg.user
	}
	fmt.Printf("sandboxes run %s; worker: %s\n", who, strings.Join(idleWorker, " "))
	if slices.Contains(b.cfg.cases, "nsgate") {
		v, _ := exec.Command(b.nsgate, "version").Output()
		fmt.Printf("nsgate: %s\n", strings.TrimSpace(string(v)))
	}
	for _, t := range []string{"pasta", "slirp4netns"} {
		if slices.Contains(b.cfg.cases, t) {
			v, _ := exec.Command(t, "--version").CombinedOutput()
			first, _, _ := strings.Cut(string(v), "\n")
			fmt.Printf("%s: %s\n", t, strings.TrimSpace(first))
		}
	}
	var lim []string
	for _, s := range []string{"user/max_user_namespaces", "user/max_net_namespaces", "user/max_mnt_namespaces", "user/max_pid_namespaces",
		"kernel/pid_max", "kernel/threads-max", "fs/inotify/max_user_instances", "kernel/keys/maxkeys"} {
		v, err := os.ReadFile("/proc/sys/" + s)
		if err == nil {
			lim = append(lim, strings.ReplaceAll(s, "/", ".")+"="+strings.TrimSpace(string(v)))
		}
	}
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	lim = append(lim, fmt.Sprintf("nofile=%d", rl.Cur))
	fmt.Printf("limits: %s\n", strings.Join(lim, " "))
}

func int8sToBytes(a []int8) []byte {
	out := make([]byte, len(a))
	for i, v := range a {
		out[i] = byte(v)
	}
	return out
}

// printTable prints one size's results side by side.
func printTable(w io.Writer, n, rep, reps int, rows []*result) {
	fmt.Fprintf(w, "\nN=%d", n)
	if reps > 1 {
		fmt.Fprintf(w, " (rep %d/%d)", rep, reps)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-36s", "metric")
	for _, r := range rows {
		fmt.Fprintf(w, "  %12s", r.kind)
	}
	fmt.Fprintln(w)
	line := func(label string, f func(r *result) string) {
		fmt.Fprintf(w, "%-36s", label)
		for _, r := range rows {
			v := "-"
			if r.skipped == "" {
				v = f(r)
			}
			fmt.Fprintf(w, "  %12s", v)
		}
		fmt.Fprintln(w)
	}
	per := func(kib uint64, r *result) string {
		if r.measured == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(kib)/1024/float64(r.measured))
	}
	line("started", func(r *result) string { return fmt.Sprintf("%d/%d", r.started, r.n) })
	for _, p := range []float64{50, 90, 99} {
		line(fmt.Sprintf("start p%g, ms", p), func(r *result) string { return fmt.Sprintf("%.0f", ms(percentile(r.lat, p))) })
	}
	line("start max, ms", func(r *result) string { return fmt.Sprintf("%.0f", ms(percentile(r.lat, 100))) })
	line("burst, s (first launch to last ready)", func(r *result) string { return fmt.Sprintf("%.2f", r.burst.Seconds()) })
	line("CPU per sandbox until measured, ms", func(r *result) string {
		if r.measured == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(r.startTicks)*10/float64(r.measured))
	})
	line("PSS per sandbox, MiB (not the worker)", func(r *result) string { return per(r.helperKiB, r) })
	line("  of which the launched process", func(r *result) string { return per(r.leaderKiB, r) })
	line("  and its other processes", func(r *result) string { return per(r.helperKiB-r.leaderKiB, r) })
	line("worker PSS per sandbox, MiB", func(r *result) string { return per(r.workerKiB, r) })
	line("total PSS, MiB", func(r *result) string { return fmt.Sprintf("%.0f", float64(r.helperKiB+r.workerKiB)/1024) })
	line("MemAvailable drop, MiB", func(r *result) string { return fmt.Sprintf("%.0f", float64(r.memKiB)/1024) })
	line("  per sandbox, MiB", func(r *result) string {
		if r.started == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(r.memKiB)/1024/float64(r.started))
	})
	line("threads per sandbox (not the worker)", func(r *result) string {
		if r.measured == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(r.threads)/float64(r.measured))
	})
	line("idle CPU, % of one core (all N)", func(r *result) string { return fmt.Sprintf("%.1f", r.idleCPU) })
	line("conn/s, one sandbox alone", func(r *result) string { return rate(r.connAlone, r) })
	line("conn/s, one more beside the N idle", func(r *result) string { return rate(r.connIdle, r) })
	line("stop all, s", func(r *result) string { return fmt.Sprintf("%.2f", r.stop.Seconds()) })
	line("stopped by their audit log", func(r *result) string { return fmt.Sprint(r.auditStops) })
	byKind := map[string]*result{}
	for _, r := range rows {
		byKind[r.kind] = r
	}
	if floor := byKind["unshare"]; floor != nil && len(floor.lat) > 0 {
		for _, k := range []string{"unshare-go", "nsgate"} {
			if r := byKind[k]; r != nil && len(r.lat) > 0 {
				fmt.Fprintf(w, "%s / unshare: start p50 %.2fx, p99 %.2fx\n", k,
					float64(percentile(r.lat, 50))/float64(percentile(floor.lat, 50)),
					float64(percentile(r.lat, 99))/float64(percentile(floor.lat, 99)))
			}
		}
	}
	for _, r := range rows {
		if len(r.phases.order) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s start phases, ms after the start line:      p50     p99  (sandboxes)\n", r.kind)
		for _, ph := range r.phases.order {
			v := r.phases.times[ph]
			fmt.Fprintf(w, "  %-40s %7.0f %7.0f  (%d)\n", ph, ms(percentile(v, 50)), ms(percentile(v, 99)), len(v))
		}
	}
	for _, r := range rows {
		if r.skipped != "" {
			fmt.Fprintf(w, "%s: %s\n", r.kind, r.skipped)
		}
		for i, f := range r.failures {
			if i == 5 {
				fmt.Fprintf(w, "%s: ... %d more failures (results.tsv)\n", r.kind, len(r.failures)-5)
				break
			}
			fmt.Fprintf(w, "%s failed %s\n", r.kind, f)
		}
	}
}

func rate(v float64, r *result) string {
	if !caseKinds[r.kind].conn {
		return "n/a"
	}
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// copyInto copies the file src into dir (mode 0755) and returns the copy.
// copyNsgate copies the nsgate binary src into dir, with the nsgate-init
// beside it when there is one (nsgate starts its sandbox's init from
// there; without it, nsgate re-executes itself as init).
func copyNsgate(dir, src string) (string, error) {
	dst, err := copyInto(dir, src)
	if err != nil || src == "" {
		return dst, err
	}
	if init := filepath.Join(filepath.Dir(src), "nsgate-init"); fileExists(init) {
		if _, err := copyInto(dir, init); err != nil {
			return "", err
		}
	}
	return dst, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func copyInto(dir, src string) (string, error) {
	if src == "" {
		return "", errors.New("not given")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(src))
	return dst, os.WriteFile(dst, data, 0o755)
}

// tail is the end of a sandbox's stderr, on one line.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	s := strings.Join(strings.Fields(string(data)), " ")
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// raiseNoFile raises the open-files limit to its maximum: the launcher
// holds a pipe per sandbox, and the sandboxes inherit the limit.
func raiseNoFile() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}

func waitListening(addr string, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("server on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addTemplateLink gives the sealed namespace the interface with a
// default route that pasta copies: a veth pair whose ends both stay here.
func addTemplateLink() error {
	la := netlink.NewLinkAttrs()
	la.Name = "dens0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "dens1"}); err != nil {
		return err
	}
	a, b := netlink.Link(nil), netlink.Link(nil)
	var err error
	if a, err = netlink.LinkByName("dens0"); err != nil {
		return err
	}
	if b, err = netlink.LinkByName("dens1"); err != nil {
		return err
	}
	p := netip.MustParsePrefix(vethAddr)
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
	if err := netlink.AddrAdd(a, addr); err != nil {
		return err
	}
	for _, l := range []netlink.Link{a, b} {
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: a.Attrs().Index, Gw: net.ParseIP(vethGW)})
}
