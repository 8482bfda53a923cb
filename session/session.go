// Package session assembles one nsgate gateway: the policy in force (an
// immutable snapshot, swapped whole on reload), the audit log, the DNS
// server and the gVisor gateway on a link endpoint, the inbound forwards
// and the exec audit. Every mode (nsgate run, the Podman helpers) turns its
// command line into a Config and calls Open, then Attach once it holds the
// worker's link, and Close at the end; so reload, teardown, counters and
// the audit's fail-closed behaviour are the same in every mode by
// construction.
//
//	s, err := session.Open(cfg)        // policy, audit log, start record
//	... build what needs the policy (the worker's sandbox), get a link
//	err = s.Attach(link)                // DNS and the gateway on the link
//	s.Inbound().Add(rule)               // host-side forwards, audited
//	s.StopOnAuditFailure(kill)          // the audit fails closed
//	status := s.Close(code)             // teardown, exit record, head
//
// A Session's methods are safe for concurrent use, except that Attach and
// Close must not race each other.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/dns"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/intercept"
	"github.com/nsgate/nsgate/internal/hostpath"
	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/netstack"
	"github.com/nsgate/nsgate/policy"
)

// Reload says whether and how the policy file is read again while the
// session runs.
type Reload int

const (
	// NoReload keeps the policy loaded by Open; Session.Reload refuses.
	NoReload Reload = iota
	// ReloadOnSIGHUP re-reads the policy file on every SIGHUP (on a
	// goroutine of its own, SIGHUPs that arrive meanwhile folded into one
	// more). A bad file is refused and the old policy kept; both outcomes
	// are audited and said on Config.Stderr.
	ReloadOnSIGHUP
)

// ExitAuditFailed is Close's status when the audit log failed: nsgate's
// own failure.
const ExitAuditFailed = 125

// Config is one gateway's assembly. It is plain data plus the writers it
// names; Open does not keep a reference to it beyond its fields' values.
type Config struct {
	// PolicyPath is the policy file; "" means deny-all.
	PolicyPath string
	// Reload is the reload behaviour (default NoReload).
	Reload Reload
	// OnReload, when set, is called after a policy was reloaded and put
	// in force. It returns what of the new policy is not in force (the
	// sections fixed at the worker's start), or "": when it says
	// something, Reload records it as a policy record with action
	// degraded, after the reload's own record.
	OnReload func(*policy.Policy) (notInForce string)
	// WithoutMetadataStep removes the cloud-metadata step from every
	// policy put in force. Only `nsgate lab --break metadata` sets it, to
	// show that the lab notices.
	WithoutMetadataStep bool
	// BreakSubstitute and BreakPathCheck switch off, for the lab's
	// --break only, the credential checks (placeholders neither replaced
	// nor refused) or the request rules of terminated flows.
	BreakSubstitute, BreakPathCheck bool
	// BreakScrub, for the lab's --break echo-scrub only, leaves what
	// comes back from a credential's host as it is.
	BreakScrub bool
	// Learn puts every policy in force through policy.Learning (nsgate
	// run --learn): what no rule decides is allowed with rule learn,
	// the built-in sets and deny rules still refuse.
	Learn bool
	// Observe, when set, sees every event the session logs, as it is
	// logged, before the log folds repeats (audit.Tee): the learner's
	// view of the run. It must be safe for concurrent use and must not
	// block.
	Observe func(audit.Event)

	// AuditPath is the audit log ("" none, "-" stderr); see audit.Open.
	AuditPath string
	// AuditCopy, when set, is a second place the log's lines are written
	// to: "-" or /dev/stderr, /dev/stdout, or a FIFO (audit.OpenCopy).
	AuditCopy string
	// AuditKey is an HMAC key file ("" none).
	AuditKey string
	// Paths decides every host path the session opens (the policy, the
	// key, the audit log, its head and copy) against the trees the
	// worker may write (internal/hostpath). nil: hostpath.Default.
	Paths *hostpath.Checker
	// DHCP answers DHCPv4 on a TAP link (netstack.Config.DHCP): the
	// container engines' helpers, never `nsgate run` (a TUN).
	DHCP bool
	// AuditLockWait is how long to wait for another process to let go
	// of the audit log (audit.Options.LockWait); 0 refuses at once.
	AuditLockWait time.Duration
	// Human receives the readable denial lines (nil: none).
	Human io.Writer
	// Stderr is where the session speaks: reload outcomes, the audit head
	// at Close, the one line when the audit log failed. Default os.Stderr.
	Stderr io.Writer
	// Start is the log's first record; Open fills in PolicySHA256.
	Start audit.Start
	// Stopped is how the audit failure line ends when the log failed,
	// naming what became of the worker (default: "the worker was
	// stopped", or "the worker exited with status N" when it ended by
	// itself first).
	Stopped string

	// Plan is the worker's network.
	Plan netplan.Plan
	// IPv6 gives the worker IPv6.
	IPv6 bool
	// MTU is the link's MTU.
	MTU uint32
	// Limits bound the gateway's flows (zero fields: netstack's defaults).
	Limits netstack.Limits
	// NoDNS: serve no DNS on the gateway's DNS address.
	NoDNS bool
	// BlockPage answers a name the policy refuses with nsgate's block
	// page (netstack.Config.BlockPage), whatever the policy's
	// dns.block_page says. A TLS ClientHello to it gets an alert.
	BlockPage bool
	// Dial dials upstream (nil: the gateway's default dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Pcap, when set, receives a pcap of every packet on the link.
	Pcap io.Writer
	// PcapMax bounds the capture in bytes (0: none; netstack.Config.PcapMax).
	PcapMax int64
	// NoNetwork: the session audits a command without a gateway (nsgate
	// guard): no policy is read and the start record names none.
	NoNetwork bool
}

// Session is one assembled gateway. See the package comment.
type Session struct {
	cfg Config
	// polFile is the policy file, resolved once by Open: a reload reads
	// it through the folder descriptor held there, never by name.
	polFile *hostpath.Path
	pol     atomic.Pointer[policy.Policy]
	log     *audit.Logger
	// sink is what every part of the session logs to: log, teed to
	// Config.Observe when set.
	sink audit.Sink

	stopSighup func()

	mu      sync.Mutex
	gw      *netstack.Gateway
	names   *dns.Server
	icpt    *intercept.Engine // nil when no rule terminates TLS
	link    stack.LinkEndpoint
	fwds    *inbound.Forwarder
	execs   []*execAudit
	kill    func() // ends the worker when the log fails; nil until set
	killed  bool   // the worker was ended because the log failed
	watched chan struct{}
}

// Open loads the policy, opens the audit log and writes its start record.
// On error nothing is left open.
func Open(cfg Config) (*Session, error) {
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Paths == nil {
		cfg.Paths = hostpath.Default()
	}
	s := &Session{cfg: cfg, watched: make(chan struct{})}
	p := policy.DenyAll()
	var err error
	if cfg.PolicyPath != "" {
		if s.polFile, err = cfg.Paths.Resolve(cfg.PolicyPath); err != nil {
			return nil, fmt.Errorf("read policy: %w", err)
		}
		if p, err = s.readPolicy(); err != nil {
			s.polFile.Close()
			return nil, err
		}
	}
	s.store(p)
	if !cfg.NoNetwork {
		// The run's CA and credentials are fixed at start: secrets are
		// read now, from nsgate's own environment or files.
		if s.icpt, err = intercept.NewEngine(p, nil, s.readHostFile); err != nil {
			s.closePolicy()
			return nil, fmt.Errorf("credentials: %w", err)
		}
		if s.icpt != nil {
			s.icpt.NoSubstitute, s.icpt.NoPathCheck, s.icpt.NoScrub = cfg.BreakSubstitute, cfg.BreakPathCheck, cfg.BreakScrub
		}
	}
	opts := audit.Options{Human: cfg.Human, LockWait: cfg.AuditLockWait, Copy: cfg.AuditCopy, Paths: cfg.Paths}
	if cfg.AuditKey != "" {
		if opts.Key, err = audit.LoadKeyWith(cfg.AuditKey, cfg.Paths); err != nil {
			s.closePolicy()
			return nil, err
		}
	}
	if s.log, err = audit.Open(cfg.AuditPath, opts); err != nil {
		s.closePolicy()
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if w := s.log.ReserveWarning(); w != nil {
		fmt.Fprintf(cfg.Stderr, "nsgate: warning: %v\n", w)
	}
	s.sink = audit.Tee(s.log, cfg.Observe)
	if cfg.AuditPath == "-" || cfg.AuditCopy != "" {
		// A write to a stderr (or stdout) nobody reads any more must fail
		// (EPIPE) and fail the log, not kill nsgate with SIGPIPE before it
		// can end the worker and say why.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	go s.watchAudit()
	start := cfg.Start
	if !cfg.NoNetwork {
		start.PolicySHA256 = p.SHA256()
	}
	s.sink.Log(start)
	if cfg.Reload == ReloadOnSIGHUP {
		s.stopSighup = s.reloadOnSIGHUP()
	}
	return s, nil
}

// Load reads and parses a policy file (a regular file of bounded size: see
// policy.Load); "" gives deny-all.
func Load(path string) (*policy.Policy, error) {
	if path == "" {
		return policy.DenyAll(), nil
	}
	return policy.Load(path)
}

// readPolicy reads the policy file through the folder Open resolved.
func (s *Session) readPolicy() (*policy.Policy, error) {
	f, err := s.polFile.OpenRead()
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	return policy.Read(f, s.cfg.PolicyPath)
}

func (s *Session) closePolicy() {
	if s.polFile != nil {
		s.polFile.Close()
	}
}

// store puts p in force, guarding the gateway's own prefixes.
func (s *Session) store(p *policy.Policy) {
	if s.cfg.WithoutMetadataStep {
		p = p.WithoutMetadataStep()
	}
	if s.cfg.Learn {
		p = policy.Learning(p)
	}
	s.pol.Store(p.WithLocal(s.cfg.Plan.Local()...))
}

// Intercept returns the run's TLS termination engine (its CA and
// credentials), or nil when the start policy terminates nothing.
func (s *Session) Intercept() *intercept.Engine { return s.icpt }

// Policy returns the policy in force (an immutable snapshot).
func (s *Session) Policy() *policy.Policy { return s.pol.Load() }

// Log returns the audit log. Events logged to it directly are not seen
// by Config.Observe: use Sink for that.
func (s *Session) Log() *audit.Logger { return s.log }

// Sink returns what the session's parts log to: the audit log, teed to
// Config.Observe when set.
func (s *Session) Sink() audit.Sink { return s.sink }

// Attach builds the DNS server and the gateway on link, which the session
// owns from then on (Close stops the gateway; the caller still closes the
// descriptor under link after Close).
func (s *Session) Attach(link stack.LinkEndpoint) error {
	ncfg := netstack.Config{
		Link:    link,
		MTU:     s.cfg.MTU,
		Network: s.cfg.Plan,
		Policy:  s.pol.Load,
		Audit:   s.sink,
		IPv6:    s.cfg.IPv6,
		Dial:    s.cfg.Dial,
		Limits:  s.cfg.Limits,
		Pcap:    s.cfg.Pcap,
		PcapMax: s.cfg.PcapMax,
		DHCP:    s.cfg.DHCP,

		BlockPage: s.cfg.BlockPage,
	}
	if s.icpt != nil {
		ncfg.Intercept = s.icpt
	}
	if !s.cfg.NoDNS {
		dcfg := dns.Config{Policy: s.pol.Load, Audit: s.sink, IPv6: s.cfg.IPv6, BlockPage: s.cfg.BlockPage}
		if s.icpt != nil && !s.icpt.Vault.Empty() && !s.icpt.NoSubstitute {
			dcfg.Leak = s.icpt.Vault.FindString
		}
		names, err := dns.New(dcfg)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		ncfg.Names = names
	}
	gw, err := netstack.New(ncfg)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	s.mu.Lock()
	s.gw, s.link = gw, link
	s.names, _ = ncfg.Names.(*dns.Server)
	s.mu.Unlock()
	return nil
}

// linkDrops is what a link that counts its drops (tun.Endpoint) offers.
type linkDrops interface {
	Dropped() uint64
}

// counters gathers the run's totals for the exit record; nil when no
// gateway was attached.
func (s *Session) counters(gw *netstack.Gateway, names *dns.Server, link stack.LinkEndpoint) *audit.Counters {
	if gw == nil {
		return nil
	}
	st := gw.Stats()
	c := &audit.Counters{
		TCPAllowed: st.TCPAllowed, TCPDenied: st.TCPDenied,
		UDPAllowed: st.UDPAllowed, UDPDenied: st.UDPDenied,
		LimitRefused: st.LimitRefused, DialFailed: st.DialFailed, L7Refused: st.L7Refused,
		BytesOut: st.BytesOut, BytesIn: st.BytesIn,
		DNSQueries: st.DNSQueries,
		PacketsIn:  st.PacketsIn, PacketsRefused: st.PacketsRefused,
		Malformed: st.Malformed, Dropped: st.Dropped, PcapDropped: st.PcapDropped,
	}
	if names != nil {
		ds := names.Stats()
		c.DNSAllowed, c.DNSDenied = ds.Allowed, ds.Denied
	}
	if l, ok := link.(linkDrops); ok {
		c.LinkDropped = l.Dropped()
	}
	return c
}

// Inbound returns the host-side forwarder to the worker's guest address,
// audited, made on first use. Its connections reach the worker once Attach
// has put the gateway on the link; before that (and after Close) they are
// refused.
func (s *Session) Inbound() *inbound.Forwarder {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fwds == nil {
		s.fwds = inbound.New(inbound.Options{
			Guest: s.cfg.Plan.Guest4(),
			Audit: s.sink,
			Dial: func(ctx context.Context, proto string, client, a netip.AddrPort) (net.Conn, error) {
				s.mu.Lock()
				gw := s.gw
				s.mu.Unlock()
				if gw == nil {
					return nil, errors.New("the gateway is not attached (or already closed)")
				}
				return gw.DialGuest(ctx, proto, client.Addr(), a)
			},
		})
	}
	return s.fwds
}

// Reload re-reads the policy file and puts it in force; a bad file is
// refused, the old policy kept and the error returned. Both outcomes are
// audited. It refuses under NoReload, and when there is no policy file.
// Open flows the new policy refuses are cut (netstack's Gateway.Revoke).
func (s *Session) Reload() error {
	_, err := s.reload()
	return err
}

// reload is Reload, and returns the number of open flows it cut.
func (s *Session) reload() (revoked int, err error) {
	if s.cfg.Reload == NoReload {
		return 0, errors.New("reload is off for this session")
	}
	if s.cfg.PolicyPath == "" {
		// Nothing to read: say so rather than "reloaded", which would
		// suggest a file was read and put in force.
		err := errors.New("no policy file was given (deny-all): nothing to reload")
		s.sink.Log(audit.Policy{Action: "deny", Error: err.Error()})
		return 0, err
	}
	if s.polFile == nil {
		err := errors.New("the policy file was not opened at start")
		s.sink.Log(audit.Policy{Action: "deny", Error: err.Error()})
		return 0, err
	}
	p, err := s.readPolicy()
	if err != nil {
		s.sink.Log(audit.Policy{Action: "deny", Error: audit.ClipText(err.Error(), maxPolicyError)})
		return 0, err
	}
	s.store(p)
	// New flows are decided by p from here on; the open ones are
	// decided again now, and those p refuses are cut.
	s.mu.Lock()
	gw := s.gw
	s.mu.Unlock()
	if gw != nil {
		revoked = gw.Revoke()
	}
	s.sink.Log(audit.Policy{Action: "allow", PolicySHA256: p.SHA256(), Revoked: revoked})
	if s.cfg.OnReload != nil {
		if note := s.cfg.OnReload(p); note != "" {
			s.sink.Log(audit.Policy{Action: "degraded", PolicySHA256: p.SHA256(), Error: note})
		}
	}
	return revoked, nil
}

// maxPolicyError bounds the error text of a refused reload in its audit
// record. Parse lists at most policy.MaxErrors problems, but a message
// may quote what the file holds (a name of nearly 1 MiB), and the log's
// reader refuses lines past a few MiB.
const maxPolicyError = 64 << 10

// reloadOnSIGHUP reloads on every SIGHUP until the returned func is called.
func (s *Session) reloadOnSIGHUP() (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sigs:
				switch n, err := s.reload(); {
				case err != nil:
					fmt.Fprintf(s.cfg.Stderr, "nsgate: reload refused, keeping the previous policy: %v\n", err)
				case n > 0:
					fmt.Fprintf(s.cfg.Stderr, "nsgate: policy reloaded (sha256 %s); %d open flows it refuses were cut\n", s.Policy().SHA256(), n)
				default:
					fmt.Fprintf(s.cfg.Stderr, "nsgate: policy reloaded (sha256 %s)\n", s.Policy().SHA256())
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// StopOnAuditFailure makes kill the way to end the worker when the audit
// log fails (the audit fails closed); if it has failed already, kill runs
// at once. kill must not block.
func (s *Session) StopOnAuditFailure(kill func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill = kill
	if s.AuditFailed() {
		s.killed = true
		kill()
	}
}

// watchAudit ends the worker when the log fails or is full (it can no
// longer keep its reserve: the gateway admits no new flow).
func (s *Session) watchAudit() {
	select {
	case <-s.log.Failed():
	case <-s.log.Full():
	case <-s.watched:
		return
	}
	s.mu.Lock()
	if s.kill != nil && !s.killed {
		s.killed = true
		s.kill()
	}
	s.mu.Unlock()
}

// AuditFailed reports whether the audit log has failed or is full.
func (s *Session) AuditFailed() bool { return s.log.Err() != nil || s.log.FullErr() != nil }

// Close stops the forwards, the gateway and the exec audits, writes the
// exit record with code and closes the log, then says on Config.Stderr the
// head (when there is an audit file) or the one line naming why the log
// failed. It returns code, or ExitAuditFailed when the log failed.
func (s *Session) Close(code int) int {
	if s.stopSighup != nil {
		s.stopSighup()
	}
	defer s.closePolicy()
	s.mu.Lock()
	fwds, gw, execs, names, link := s.fwds, s.gw, s.execs, s.names, s.link
	s.fwds, s.gw, s.execs, s.names, s.link = nil, nil, nil, nil, nil
	killed := s.killed
	s.mu.Unlock()
	if fwds != nil {
		fwds.Close()
	}
	if gw != nil {
		gw.Close()
		if err := gw.PcapErr(); err != nil {
			fmt.Fprintf(s.cfg.Stderr, "nsgate: pcap incomplete: %v; %d writes lost (the exit record's pcap_dropped)\n", err, gw.Stats().PcapDropped)
		} else if gw.PcapReached() {
			fmt.Fprintf(s.cfg.Stderr, "nsgate: pcap reached --pcap-max (%d bytes): %d later packets were not captured (the exit record's pcap_dropped)\n", s.cfg.PcapMax, gw.Stats().PcapDropped)
		}
	}
	for _, a := range execs {
		a.close()
	}
	close(s.watched)

	full := s.log.FullErr()
	exit := audit.Exit{Code: code, Counters: s.counters(gw, names, link)}
	if full != nil {
		exit.LogFull = full.Error()
	}
	s.sink.Log(exit)
	head, err := s.log.Close()
	if err == nil && full != nil {
		err = full
	}
	if err != nil {
		what := s.cfg.Stopped
		switch {
		case what != "":
		case killed:
			what = "the worker was stopped"
		default:
			what = fmt.Sprintf("the worker exited with status %d", code)
		}
		if full != nil && s.log.Err() == nil {
			writeBounded(s.cfg.Stderr, fmt.Sprintf("nsgate: audit log full: %v; no new flow was admitted from then on and %s; every admitted flow has its record (audit head %s)\n", err, what, head))
		} else {
			writeBounded(s.cfg.Stderr, fmt.Sprintf("nsgate: audit log failed: %v; %s\n", err, what))
		}
		return ExitAuditFailed
	}
	if herr := s.log.HeadFileErr(); herr != nil {
		fmt.Fprintf(s.cfg.Stderr, "nsgate: warning: %v (anchor the head printed below instead)\n", herr)
	}
	if s.cfg.AuditPath != "" {
		fmt.Fprintf(s.cfg.Stderr, "nsgate: audit head %s\n", head)
	}
	return code
}

// writeBounded writes msg to w, waiting at most a second: the failed log
// may be stderr itself, and a stderr nobody reads must not keep nsgate
// from exiting.
func writeBounded(w io.Writer, msg string) {
	done := make(chan struct{})
	go func() {
		io.WriteString(w, msg)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// readHostFile reads a file nsgate itself needs at start (a credential's
// secret file, tls.upstream_ca) through the run's host-path checker, so a
// link a worker could have planted is never followed. It reads at most
// 4 MiB.
func (s *Session) readHostFile(path string) ([]byte, error) {
	p, err := s.cfg.Paths.Resolve(path)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	f, err := p.OpenRead()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const limit = 4 << 20
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if len(b) > limit {
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("larger than 4 MiB")}
	}
	return b, nil
}
