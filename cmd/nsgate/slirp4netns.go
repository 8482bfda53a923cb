package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/podnet"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
	"github.com/nsgate/nsgate/slirp"
	"github.com/nsgate/nsgate/tun/tundev"
)

// `nsgate slirp4netns ...`: a drop-in for the slirp4netns 1.x
// network helper of rootless Podman. Podman runs it (through a link named
// slirp4netns, or network_cmd_path) as uid 0 of its rootless user
// namespace, in the host's network namespace; the container's network
// namespace is the target. nsgate opens a TAP device there (a short-lived
// child, sandbox.OpenTAP), serves the container's traffic with the same
// gateway, policy, DNS and audit as `nsgate run`, answers the API socket,
// signals readiness on the ready fd and exits when the exit fd hangs up.
// See docs/podman.md.

// envOwnMountNS marks the copy of the helper that sandbox.RunInOwnMountNS
// started in a fresh mount namespace.
const envOwnMountNS = "NSGATE_SLIRP4NETNS_MOUNTNS"

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
		// Without CAP_SYS_ADMIN (an unprivileged user outside any user
		// namespace, as RootlessKit runs it) the copy joins the target's
		// user namespace first, as slirp4netns does.
		// The process the caller holds only waits for the confined copy
		// and forwards signals: it drops its capabilities (and takes the
		// seccomp filter when asked) too.
		fds := []int{cfg.ExitFD, cfg.ReadyFD, cfg.TapFD}
		parent := &sandbox.Confinement{DropCaps: true, Seccomp: cfg.EnableSeccomp}
		var code int
		if spec := slirpTAPSpec(cfg); os.Geteuid() != 0 && cfg.NetnsType != slirp.NetnsTapFD {
			code, err = sandbox.RunInOwnMountNSOf(fds, envOwnMountNS, spec.UsernsPath, spec.NetnsPath, parent)
		} else {
			code, err = sandbox.RunInOwnMountNS(fds, envOwnMountNS, parent)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "nsgate slirp4netns: %v\n", err)
		}
		return code
	}
	os.Unsetenv(envOwnMountNS)
	// Whoever read the helper's standard error may have stopped (Podman,
	// a shell pipe that ended): a denial's line written then would kill
	// the helper with SIGPIPE, and the container's network with it. With
	// SIGPIPE asked for, the write fails with EPIPE instead, which the
	// human lines ignore (and an audit log on standard error fails
	// closed, as on any write error).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	for _, w := range cfg.Warnings {
		fmt.Fprintln(e.stdout, w)
	}
	dial, err := session.BoundDialer(cfg.OutboundAddr, cfg.OutboundAddr6)
	if err != nil {
		fmt.Fprintf(e.stderr, "nsgate slirp4netns: %v\n", err)
		return slirp.ExitFailure
	}
	pc := slirpConfig(e, cfg, os.Getenv)
	pc.Session.Dial = dial
	h, err := podnet.Start(pc)
	if err != nil {
		if !h.AuditFailed() { // else the session said the cause
			fmt.Fprintf(e.stderr, "nsgate slirp4netns: %v\n", err)
		}
		return slirp.ExitFailure
	}
	return h.Serve(nil)
}

// slirpConfig turns slirp4netns's command line into the helper's Config.
func slirpConfig(e env, cfg slirp.Config, getenv func(string) string) podnet.Config {
	pc := podnet.Config{
		Session: session.Config{
			PolicyPath: podnet.PolicyPath(getenv, podnet.FileExists),
			// SIGHUP ends the helper, as it ends slirp4netns; a new
			// policy applies to the next container.
			Reload:    session.NoReload,
			AuditPath: podnet.AuditPath(getenv, cfg.NetnsName()),
			AuditKey:  getenv(podnet.EnvAuditKey),
			Stderr:    e.stderr,
			Stopped:   "the container's network was stopped",
			Start:     audit.Start{Version: versionString(), Argv: os.Args, PID: os.Getpid()},
			Plan:      cfg.Plan(),
			IPv6:      cfg.IPv6,
			MTU:       uint32(cfg.MTU),
			NoDNS:     cfg.DisableDNS,
		},
		TAP:         slirpTAPSpec(cfg),
		TapFD:       -1,
		MAC:         podnet.GatewayMAC(cfg.Gateway()),
		ReadyFD:     cfg.ReadyFD,
		ExitFD:      cfg.ExitFD,
		ExitFailure: slirp.ExitFailure,
	}
	if pc.Session.AuditPath == "" {
		pc.Session.Human = e.stderr
	}
	if cfg.NetnsType == slirp.NetnsTapFD {
		pc.TapFD = cfg.TapFD
	}
	if cfg.APISocket != "" {
		pc.API = func(f *inbound.Forwarder) (io.Closer, error) {
			return slirp.ListenAPI(cfg.APISocket, slirp.NewHandler(f))
		}
	}
	if cfg.EnableSandbox || cfg.EnableSeccomp {
		pc.Confine = &sandbox.Confinement{Root: cfg.EnableSandbox, DropCaps: cfg.EnableSandbox, Seccomp: cfg.EnableSeccomp}
	}
	return pc
}

// slirpIface is the TAP device -c configures: slirp4netns's addresses,
// plus fd00::100/64 and a default route via fd00::2 with -6 (slirp4netns
// leaves IPv6 to router advertisements, which nsgate does not send).
func slirpIface(cfg slirp.Config) tundev.Iface {
	ifc := tundev.Iface{
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
	spec := sandbox.TAPSpec{Iface: slirpIface(cfg), Configure: cfg.Configure, UsernsPath: cfg.UsernsPath, NetnsPath: cfg.Target}
	if cfg.NetnsType == slirp.NetnsPID {
		spec.NetnsPath, spec.UsernsPath = podnet.NetnsOfPID(cfg.PID, cfg.UsernsPath)
	}
	return spec
}
