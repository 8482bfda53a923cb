package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
	"github.com/nsgate/nsgate/slirp"
	"github.com/nsgate/nsgate/tun"
)

// `nsgate slirp4netns ...` (SPEC §10): a drop-in for the slirp4netns 1.x
// network helper of rootless Podman. Podman runs it (through a link named
// slirp4netns, or network_cmd_path) as uid 0 of its rootless user
// namespace, in the host's network namespace; the container's network
// namespace is the target. nsgate opens a TAP device there (a short-lived
// child, sandbox.OpenTAP), serves the container's traffic with the same
// gateway, policy, DNS and audit as `nsgate run`, answers the API socket,
// signals readiness on the ready fd and exits when the exit fd hangs up.
// See docs/podman.md.

// Environment of the Podman helper (SPEC §10; docs/podman.md).
const (
	envPolicy   = "NSGATE_POLICY"
	envAuditDir = "NSGATE_AUDIT_DIR"
	// envAuditKey names an HMAC key file: every audit record gets a mac.
	envAuditKey = "NSGATE_AUDIT_KEY"
	// envOwnMountNS marks the copy of the helper that
	// sandbox.RunInOwnMountNS started in a fresh mount namespace.
	envOwnMountNS = "NSGATE_SLIRP4NETNS_MOUNTNS"
)

// systemPolicy is the last place the helper looks for a policy.
const systemPolicy = "/etc/nsgate/policy.yaml"

func cmdSlirp4netns(e env, args []string) int {
	cfg, err := slirp.ParseArgs(args)
	if err != nil {
		fmt.Fprintf(e.stderr, "nsgate slirp4netns: %v\n", err)
		return slirp.ExitFailure
	}
	switch {
	case cfg.Help:
		fmt.Fprint(e.stdout, slirp.Help())
		return 0
	case cfg.Version:
		fmt.Fprint(e.stdout, slirp.Version(versionLine()))
		return 0
	}
	// Podman's pipe ends must not leak into the join child.
	for _, fd := range []int{cfg.ExitFD, cfg.ReadyFD, cfg.TapFD} {
		if fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	if cfg.EnableSandbox && os.Getenv(envOwnMountNS) != "1" && sandbox.SharesMountNSWithParent() {
		// The sandbox's pivot_root needs a mount namespace of our own;
		// Podman gives one, a shell does not.
		code, err := sandbox.RunInOwnMountNS([]int{cfg.ExitFD, cfg.ReadyFD, cfg.TapFD}, envOwnMountNS)
		if err != nil {
			fmt.Fprintf(e.stderr, "nsgate slirp4netns: %v\n", err)
		}
		return code
	}
	os.Unsetenv(envOwnMountNS)
	for _, w := range cfg.Warnings {
		fmt.Fprintln(e.stdout, w)
	}
	h, err := startSlirp(e, cfg, os.Getenv)
	if err != nil {
		if h.s == nil || !h.s.AuditFailed() { // else close printed the cause
			fmt.Fprintf(e.stderr, "nsgate slirp4netns: %v\n", err)
		}
		return slirp.ExitFailure
	}
	return h.serve()
}

// slirpPolicyPath returns the Podman helper's policy file (SPEC §10):
// $NSGATE_POLICY, else $XDG_CONFIG_HOME/nsgate/policy.yaml ($HOME/.config
// when XDG_CONFIG_HOME is unset), else /etc/nsgate/policy.yaml, else ""
// for deny-all. $NSGATE_POLICY is taken as given (a missing file is then an
// error); the other two are used only if they exist.
func slirpPolicyPath(getenv func(string) string, exists func(string) bool) string {
	if p := getenv(envPolicy); p != "" {
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
	if exists(systemPolicy) {
		return systemPolicy
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// slirpAuditPath returns the audit log of this helper:
// $NSGATE_AUDIT_DIR/<netns name>.jsonl, or "" when the variable is unset.
func slirpAuditPath(getenv func(string) string, cfg slirp.Config) string {
	dir := getenv(envAuditDir)
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, cfg.NetnsName()+".jsonl")
}

// slirpIface is the TAP device -c configures: slirp4netns's addresses,
// plus fd00::100/64 and a default route via fd00::2 with -6 (slirp4netns
// leaves IPv6 to router advertisements, which nsgate does not send).
func slirpIface(cfg slirp.Config) tun.Iface {
	ifc := tun.Iface{
		Name:     cfg.TapName,
		TAP:      true,
		MTU:      uint32(cfg.MTU),
		MAC:      cfg.MAC,
		Addrs:    []netip.Prefix{cfg.GuestPrefix()},
		Gateways: []netip.Addr{cfg.Gateway()},
	}
	if cfg.IPv6 {
		ifc.Addrs = append(ifc.Addrs, netip.PrefixFrom(cfg.Guest6(), cfg.Prefix6().Bits()))
		ifc.Gateways = append(ifc.Gateways, cfg.Gateway6())
	}
	return ifc
}

// slirpTAPSpec says where to open the TAP for a PID or path target. For a
// PID without --userns-path, the target's user namespace is joined, as
// slirp4netns does; for a path, the owner of the network namespace.
func slirpTAPSpec(cfg slirp.Config) sandbox.TAPSpec {
	spec := sandbox.TAPSpec{Iface: slirpIface(cfg), Configure: cfg.Configure, UsernsPath: cfg.UsernsPath}
	switch cfg.NetnsType {
	case slirp.NetnsPID:
		proc := "/proc/" + strconv.Itoa(cfg.PID)
		spec.NetnsPath = proc + "/ns/net"
		if spec.UsernsPath == "" {
			spec.UsernsPath = proc + "/ns/user"
		}
	default:
		spec.NetnsPath = cfg.Target
	}
	return spec
}

// gatewayMAC is the gateway's Ethernet address on the TAP, in libslirp's
// style: 52:55 followed by the gateway's IPv4 address.
func gatewayMAC(gw netip.Addr) net.HardwareAddr {
	a := gw.As4()
	return net.HardwareAddr{0x52, 0x55, a[0], a[1], a[2], a[3]}
}

// slirpHelper is one running `nsgate slirp4netns`.
type slirpHelper struct {
	e     env
	cfg   slirp.Config
	s     *session.Session
	tapFD int
	api   *slirp.API
}

// startSlirp sets everything up and signals readiness. On error nothing it
// started is left running.
func startSlirp(e env, cfg slirp.Config, getenv func(string) string) (h *slirpHelper, err error) {
	h = &slirpHelper{e: e, cfg: cfg, tapFD: -1}
	defer func() {
		if err != nil {
			h.close(slirp.ExitFailure)
		}
	}()
	dial, err := session.BoundDialer(cfg.OutboundAddr, cfg.OutboundAddr6)
	if err != nil {
		return h, err
	}
	scfg := session.Config{
		PolicyPath: slirpPolicyPath(getenv, fileExists),
		// SIGHUP ends the helper, as it ends slirp4netns; a new policy
		// applies to the next container.
		Reload:    session.NoReload,
		AuditPath: slirpAuditPath(getenv, cfg),
		AuditKey:  getenv(envAuditKey),
		Stderr:    e.stderr,
		Stopped:   "the container's network was stopped",
		Start:     audit.Start{Version: versionString(), Argv: os.Args, PID: os.Getpid()},
		Plan:      cfg.Plan(),
		IPv6:      cfg.IPv6,
		MTU:       uint32(cfg.MTU),
		NoDNS:     cfg.DisableDNS,
		Dial:      dial,
	}
	if scfg.AuditPath == "" {
		scfg.Human = e.stderr
	} else if err := os.MkdirAll(filepath.Dir(scfg.AuditPath), 0o700); err != nil {
		return h, fmt.Errorf("audit directory: %w", err)
	}
	if h.s, err = session.Open(scfg); err != nil {
		return h, err
	}
	if cfg.NetnsType == slirp.NetnsTapFD {
		h.tapFD = cfg.TapFD
	} else if h.tapFD, err = sandbox.OpenTAP(slirpTAPSpec(cfg)); err != nil {
		return h, err
	}
	link, err := tun.NewEndpoint(h.tapFD, tun.EndpointOptions{MTU: uint32(cfg.MTU), TAP: true, MAC: gatewayMAC(cfg.Gateway())})
	if err != nil {
		return h, err
	}
	if err := h.s.Attach(link); err != nil {
		return h, err
	}
	if cfg.APISocket != "" {
		if h.api, err = slirp.ListenAPI(cfg.APISocket, slirp.NewHandler(h.s.Inbound())); err != nil {
			return h, err
		}
	}
	if cfg.EnableSandbox || cfg.EnableSeccomp {
		c := sandbox.Confinement{Root: cfg.EnableSandbox, DropCaps: cfg.EnableSandbox, Seccomp: cfg.EnableSeccomp}
		if c.Root {
			// The DNS resolver reads the host's resolv.conf on each cache
			// miss: give the sandbox a copy.
			c.Files = map[string][]byte{}
			if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
				c.Files["etc/resolv.conf"] = b
			}
		}
		if err := sandbox.Confine(c); err != nil {
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

// serve runs until the exit fd hangs up or SIGINT, SIGTERM or SIGHUP
// arrives, then shuts down and returns 0; or until the audit log fails,
// then shuts down (the audit fails closed: the container's network stops)
// and returns 1 after one line naming the cause.
func (h *slirpHelper) serve() int {
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
	case <-h.s.Log().Failed():
	}
	return h.close(0)
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

// close stops everything that was started, in reverse order, and ends the
// audit log with an exit record. It returns code, or slirp.ExitFailure when
// the audit log failed.
func (h *slirpHelper) close(code int) int {
	if h.api != nil {
		h.api.Close()
	}
	if h.s != nil && h.s.Close(code) != code {
		code = slirp.ExitFailure // the audit log failed; Close said why
	}
	if h.tapFD >= 0 {
		unix.Close(h.tapFD)
		h.tapFD = -1
	}
	return code
}
