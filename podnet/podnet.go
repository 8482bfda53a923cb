// Package podnet runs nsgate as the network helper of a rootless container
// engine (Podman's slirp4netns and pasta, RootlessKit's slirp4netns
// driver). The engine creates the container's network namespace and runs
// the helper in the host's; the helper opens a TAP device in the
// container's namespace (or takes one it is handed), serves it with a
// gateway assembled by session (the same policy, DNS and audit as `nsgate
// run`), says when it is ready, and stays until the engine lets it go.
// The command line of each helper (slirp/, and its own argv package for
// pasta) only turns its arguments into a Config.
//
//	h, err := podnet.Start(cfg)   // session, TAP, gateway, API, confinement, ready
//	status := h.Serve(done)       // until the exit fd hangs up, done, a signal or an audit failure
package podnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/intercept"
	"github.com/nsgate/nsgate/internal/hostpath"
	"github.com/nsgate/nsgate/policy"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
	"github.com/nsgate/nsgate/tun"
)

// The helpers' environment (docs/podman.md): a container engine passes no
// nsgate flags, so the policy and the audit come from here.
const (
	// EnvPolicy names the policy file.
	EnvPolicy = "NSGATE_POLICY"
	// EnvAuditDir names a directory: each container's audit log is
	// DIR/<netns name>.jsonl.
	EnvAuditDir = "NSGATE_AUDIT_DIR"
	// EnvAuditKey names an HMAC key file: every audit record gets a mac.
	EnvAuditKey = "NSGATE_AUDIT_KEY"
	// EnvCACert names a file the helper writes the run's CA certificate
	// to (PEM; never the key), before it says it is ready, for a
	// container to trust (docs/podman.md, "Terminated hosts").
	EnvCACert = "NSGATE_CA_CERT"
	// EnvCABundle names a file the helper writes the host's system bundle
	// plus the run's CA certificate to, for a container's SSL_CERT_FILE.
	EnvCABundle = "NSGATE_CA_BUNDLE"
	// EnvPlaceholders names a file the helper writes the credentials'
	// placeholders to, one NAME=placeholder line for each placeholder_env
	// (a container sources it: the engine, not nsgate, makes the
	// container's environment).
	EnvPlaceholders = "NSGATE_PLACEHOLDERS"
)

// AuditLockWait is how long a helper waits for the previous helper of
// the same network namespace to let go of their audit log. Podman's
// rootless network namespace keeps its name across restarts (`podman
// network reload`, `podman restart` of its last container): Podman sends
// the old helper SIGTERM and starts the new one at once. The new one
// waits for the old one's exit record and continues the log's chain.
const AuditLockWait = 10 * time.Second

// SystemPolicy is the last place a helper looks for a policy.
const SystemPolicy = "/etc/nsgate/policy.yaml"

// PolicyPath returns a helper's policy file: $NSGATE_POLICY, else
// $XDG_CONFIG_HOME/nsgate/policy.yaml ($HOME/.config when XDG_CONFIG_HOME
// is unset), else /etc/nsgate/policy.yaml, else "" for deny-all.
// $NSGATE_POLICY is taken as given (a missing file is then an error); the
// other two are used only if they exist.
func PolicyPath(getenv func(string) string, exists func(string) bool) string {
	if p := getenv(EnvPolicy); p != "" {
		return p
	}
	cfgHome := getenv("XDG_CONFIG_HOME")
	if cfgHome == "" && getenv("HOME") != "" {
		cfgHome = filepath.Join(getenv("HOME"), ".config")
	}
	if cfgHome != "" {
		if p := filepath.Join(cfgHome, "nsgate", "policy.yaml"); exists(p) {
			return p
		}
	}
	if exists(SystemPolicy) {
		return SystemPolicy
	}
	return ""
}

// NotInForce names the sections of p that a helper cannot apply, or ""
// when p has none: exec (exec.allow) and filesystem (filesystem.write,
// filesystem.hide) govern the programs and files of `nsgate run`'s
// worker, whereas a helper serves only the container's network (what the
// container runs and writes is its engine's business). Start records them
// as a policy record with action degraded, as `nsgate run` records a layer
// it could not apply, so that a policy shared with `nsgate run` is not
// taken for more than it does here.
func NotInForce(p *policy.Policy) string {
	if p == nil {
		return ""
	}
	var out []string
	if len(p.ExecAllow()) > 0 {
		out = append(out, "exec (the container's programs are not nsgate's to allow)")
	}
	if w, hide := p.FilesystemPaths(); len(w)+len(hide) > 0 {
		out = append(out, "filesystem (the container's files are not nsgate's to show or hide)")
	}
	return strings.Join(out, ", ")
}

// FileExists reports whether p exists (PolicyPath's exists).
func FileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// AuditPath returns the audit log of the helper for the network namespace
// called name: $NSGATE_AUDIT_DIR/name.jsonl, or "" when the variable is
// unset.
func AuditPath(getenv func(string) string, name string) string {
	dir := getenv(EnvAuditDir)
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name+".jsonl")
}

// NetnsOfPID returns the network namespace of process pid and, unless
// userns is given, the user namespace to join for it: the process's own,
// as slirp4netns does.
func NetnsOfPID(pid int, userns string) (netns, user string) {
	proc := "/proc/" + strconv.Itoa(pid)
	if userns == "" {
		userns = proc + "/ns/user"
	}
	return proc + "/ns/net", userns
}

// GatewayMAC is the gateway's Ethernet address on a TAP, in libslirp's
// style: 52:55 followed by the gateway's IPv4 address.
func GatewayMAC(gw netip.Addr) net.HardwareAddr {
	a := gw.As4()
	return net.HardwareAddr{0x52, 0x55, a[0], a[1], a[2], a[3]}
}

// Config is one helper.
type Config struct {
	// Session is the gateway: policy, audit, address plan, DNS, dialer.
	Session session.Config
	// TAP says where to open the TAP device, when TapFD is negative.
	TAP sandbox.TAPSpec
	// TapFD is a TAP device the engine handed over (-1: open TAP).
	TapFD int
	// MAC is the gateway's Ethernet address on the TAP.
	MAC net.HardwareAddr
	// API, when set, starts the helper's control socket over the
	// session's inbound forwarder (slirp4netns's --api-socket).
	API func(*inbound.Forwarder) (io.Closer, error)
	// Confine, when set, confines the helper itself once everything is
	// open (slirp4netns's --enable-sandbox and --enable-seccomp).
	Confine *sandbox.Confinement
	// NoDHCP leaves the TAP without a DHCP server (pasta's --no-dhcp).
	NoDHCP bool
	// ReadyFD gets "1" once the helper serves (-1: none).
	ReadyFD int
	// ExitFD ends the helper when it hangs up (-1: none).
	ExitFD int
	// ExitFailure is the status of a helper that failed.
	ExitFailure int
	// CACert and CABundle are the files the run's CA certificate and the
	// bundle (host roots plus the CA) are written to before the helper
	// says it is ready; "" takes $NSGATE_CA_CERT and $NSGATE_CA_BUNDLE
	// (a container engine passes no nsgate flags).
	CACert, CABundle string
	// Placeholders is the file the credentials' placeholders are written
	// to ("" takes $NSGATE_PLACEHOLDERS).
	Placeholders string
}

// Helper is one running helper.
type Helper struct {
	cfg   Config
	s     *session.Session
	tapFD int
	api   io.Closer
	// auditFailed: the audit log failed and the session said so.
	auditFailed bool
}

// Start sets everything up and signals readiness. On error nothing it
// started is left running, and the error has been said unless the audit
// log failed (then the session said that, the cause): see Said.
func Start(cfg Config) (h *Helper, err error) {
	h = &Helper{cfg: cfg, tapFD: -1}
	defer func() {
		if err != nil {
			h.Close(cfg.ExitFailure)
		}
	}()
	// Before anything worth taking exists (the audit log, the TAP, host
	// sockets): a container that sees this process must not be able to
	// read or write its memory or reopen its descriptors.
	if err := sandbox.NotDumpable(); err != nil {
		return h, err
	}
	scfg := cfg.Session
	// The TAP gets a DHCP server, as under slirp4netns and pasta
	// (unless pasta's --no-dhcp).
	scfg.DHCP = !cfg.NoDHCP
	if scfg.AuditLockWait == 0 {
		scfg.AuditLockWait = AuditLockWait
	}
	if scfg.AuditPath != "" && scfg.AuditPath != "-" {
		if err := os.MkdirAll(filepath.Dir(scfg.AuditPath), 0o700); err != nil {
			return h, fmt.Errorf("audit directory: %w", err)
		}
	}
	if h.s, err = session.Open(scfg); err != nil {
		return h, err
	}
	if d := NotInForce(h.s.Policy()); d != "" {
		h.s.Log().Log(audit.Policy{Action: "degraded", Error: "not in force: " + d, Layers: []string{d}})
	}
	if cfg.CACert == "" {
		cfg.CACert = os.Getenv(EnvCACert)
	}
	if cfg.CABundle == "" {
		cfg.CABundle = os.Getenv(EnvCABundle)
	}
	if cfg.Placeholders == "" {
		cfg.Placeholders = os.Getenv(EnvPlaceholders)
	}
	paths := scfg.Paths
	if paths == nil {
		paths = hostpath.Default()
	}
	if err := WriteCA(h.s.Intercept(), paths, cfg.CACert, cfg.CABundle, cfg.Placeholders); err != nil {
		return h, err
	}
	if cfg.TapFD >= 0 {
		h.tapFD = cfg.TapFD
	} else if h.tapFD, err = sandbox.OpenTAP(cfg.TAP); err != nil {
		return h, err
	}
	link, err := tun.NewEndpoint(h.tapFD, tun.EndpointOptions{MTU: scfg.MTU, TAP: true, MAC: cfg.MAC})
	if err != nil {
		return h, err
	}
	if err := h.s.Attach(link); err != nil {
		return h, err
	}
	if cfg.API != nil {
		if h.api, err = cfg.API(h.s.Inbound()); err != nil {
			return h, err
		}
	}
	if c := cfg.Confine; c != nil {
		if c.Root {
			// The DNS resolver reads the host's resolv.conf on each cache
			// miss: give the confined helper a copy.
			c.Files = map[string][]byte{}
			if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
				c.Files["etc/resolv.conf"] = b
			}
		}
		if err := sandbox.Confine(*c); err != nil {
			return h, err
		}
	}
	if cfg.ReadyFD >= 0 {
		f := os.NewFile(uintptr(cfg.ReadyFD), "ready-fd")
		_, err := f.Write([]byte("1"))
		f.Close()
		if err != nil {
			return h, fmt.Errorf("ready-fd: %w", err)
		}
	}
	return h, nil
}

// AuditFailed reports whether the helper's audit log failed (and the
// session has said so); a caller then adds nothing of its own.
func (h *Helper) AuditFailed() bool {
	return h != nil && (h.auditFailed || h.s != nil && h.s.AuditFailed())
}

// Serve runs until the exit fd hangs up, done is closed, or SIGINT,
// SIGTERM or SIGHUP arrives, then shuts down and returns 0; or until the
// audit log fails, then shuts down (the audit fails closed: the
// container's network stops) and returns ExitFailure after the session's
// one line naming the cause. A nil done never closes.
func (h *Helper) Serve(done <-chan struct{}) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	hup := make(chan struct{})
	if h.cfg.ExitFD >= 0 {
		go waitHangup(h.cfg.ExitFD, hup)
	}
	select {
	case <-sigs:
	case <-hup:
	case <-done:
	case <-h.s.Log().Failed():
	}
	return h.Close(0)
}

// waitHangup closes done once fd reports hang-up or an error (slirp4netns
// exits on G_IO_HUP of its exit fd); data read from it is discarded.
func waitHangup(fd int, done chan<- struct{}) {
	defer close(done)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	buf := make([]byte, 64)
	for {
		_, err := unix.Poll(pfd, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
		if pfd[0].Revents&unix.POLLIN != 0 {
			if n, err := unix.Read(fd, buf); n == 0 || (err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)) {
				return
			}
		}
	}
}

// Close stops everything that was started, in reverse order, and ends the
// audit log with an exit record. It returns code, or ExitFailure when the
// audit log failed.
func (h *Helper) Close(code int) int {
	if h.api != nil {
		h.api.Close()
		h.api = nil
	}
	if h.s != nil {
		if h.s.Close(code) != code {
			code = h.cfg.ExitFailure // the audit log failed; Close said why
		}
		h.auditFailed = h.s.AuditFailed()
		h.s = nil
	}
	if h.tapFD >= 0 {
		unix.Close(h.tapFD)
		h.tapFD = -1
	}
	return code
}

// WriteCA writes the run's CA certificate (PEM) to cert, the host's
// system bundle plus that certificate to bundle, and the credentials'
// placeholders (NAME=placeholder lines) to placeholders ("" for none), each
// through paths' output rules: created with O_EXCL|O_NOFOLLOW, or, when
// it exists, the same regular file of the caller's, rewritten in place
// (so that a directory or a file bind-mounted into a container shows the
// new CA). The CA's key is never written. A file asked for when the
// policy terminates no TLS (e is nil: there is no run CA) is an error:
// the container would otherwise trust something that is not there.
func WriteCA(e *intercept.Engine, paths *hostpath.Checker, cert, bundle, placeholders string) error {
	if cert == "" && bundle == "" && placeholders == "" {
		return nil
	}
	if e == nil || e.CA == nil {
		return fmt.Errorf("%s, %s or %s is set, but the policy terminates no TLS (no tls: terminate rule), so this helper has no CA or placeholder to write", EnvCACert, EnvCABundle, EnvPlaceholders)
	}
	env := func() []byte {
		var b []byte
		for _, kv := range e.Vault.WorkerEnv() {
			b = append(b, kv+"\n"...)
		}
		return b
	}
	for _, f := range []struct {
		what, path string
		data       func() []byte
	}{{"the run's CA certificate", cert, e.CA.PEM}, {"the CA bundle", bundle, e.Bundle}, {"the placeholders", placeholders, env}} {
		if f.path == "" {
			continue
		}
		if err := writeOutput(paths, f.path, f.data()); err != nil {
			return fmt.Errorf("write %s: %w", f.what, err)
		}
	}
	return nil
}

// writeOutput writes data to path through paths' output rules (mode
// 0644: a certificate is public, and the container's user must read it).
func writeOutput(paths *hostpath.Checker, path string, data []byte) error {
	p, err := paths.ResolveOutput(path)
	if err != nil {
		return err
	}
	defer p.Close()
	f, err := p.OpenOutput(os.O_WRONLY|os.O_TRUNC, 0o644, hostpath.Regular)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
