package slirp

import (
	"strings"

	"github.com/nsgate/nsgate/netplan"
)

// CompatVersion is the slirp4netns release whose command line and API this
// package reproduces (Debian 12's, which Podman 4.3 runs there).
const CompatVersion = "1.2.0"

// configVersionMax is what slirp4netns -v reports as
// SLIRP_CONFIG_VERSION_MAX: the libslirp feature level, which scripts read
// to know whether --outbound-addr (2) and --disable-dns (3) exist. nsgate
// has all of them.
const configVersionMax = "4"

// Help returns the --help text, in slirp4netns's layout. Podman runs the
// helper with --help and passes a flag only if the output contains it, so
// every flag string it looks for appears here: --disable-host-loopback,
// --mtu, --enable-sandbox, --enable-seccomp, --cidr, --enable-ipv6,
// --outbound-addr, --outbound-addr6 (and --netns-type, --userns-path,
// --api-socket, --exit-fd, --ready-fd). The addresses in it are those of
// the default plan (netplan.Default), as slirp4netns prints its own.
func Help() string {
	d := netplan.Default()
	return strings.NewReplacer("{PREFIX6}", d.Prefix6.String(), "{CIDR}", d.Prefix4.String(), "{DNS}", d.DNS4().String()).Replace(helpText)
}

// helpText is Help's text with the default plan's addresses left out.
const helpText = `Usage: nsgate slirp4netns [OPTION]... PID|PATH|FD [TAPNAME]
User-mode networking for unprivileged network namespaces, by nsgate: a
drop-in for slirp4netns whose every connection passes nsgate's egress policy.

-c, --configure          bring up the interface
-e, --exit-fd=FD         specify the FD for terminating slirp4netns
-r, --ready-fd=FD        specify the FD to write to when the network is configured
-m, --mtu=MTU            specify MTU (default=1500, max=65521)
-6, --enable-ipv6        enable IPv6 ({PREFIX6})
-a, --api-socket=PATH    specify API socket path
--cidr=CIDR              specify network address CIDR (default={CIDR})
--disable-host-loopback  prohibit connecting to 127.0.0.1:* on the host namespace
--netns-type=TYPE        specify network namespace type ([path|pid|tapfd], default=pid)
--userns-path=PATH       specify user namespace path
--enable-sandbox         create a new mount namespace (and drop all caps except CAP_NET_BIND_SERVICE if running as the root)
--enable-seccomp         enable seccomp to limit syscalls
--outbound-addr=IPv4     sets outbound ipv4 address to bound to
--outbound-addr6=IPv6    sets outbound ipv6 address to bound to
--disable-dns            disables {DNS} (or configured internal ip) to host dns redirect
--macaddress=MAC         specify the MAC address of the TAP (only valid with -c)
--target-type=TYPE       specify the target type ([netns], default=netns; bess is not supported)
-h, --help               show this help and exit
-v, --version            show version and exit

Policy: $NSGATE_POLICY, else $XDG_CONFIG_HOME/nsgate/policy.yaml, else
/etc/nsgate/policy.yaml, else deny-all. Audit: $NSGATE_AUDIT_DIR/<netns
name>.jsonl when NSGATE_AUDIT_DIR is set.
`

// Version returns the --version text. Its first line has slirp4netns's
// machine-parsable form, "slirp4netns version X", with CompatVersion and
// "+nsgate" as semver build metadata; the next line carries nsgate's own
// version line (the argument, e.g. "nsgate v0.3.0 (go1.26.3, ...)").
// Podman shows the whole text in `podman info` and parses none of it.
func Version(nsgate string) string {
	var b strings.Builder
	b.WriteString("slirp4netns version " + CompatVersion + "+nsgate\n")
	if nsgate = strings.TrimSpace(nsgate); nsgate == "" {
		nsgate = "nsgate"
	}
	b.WriteString(nsgate + "\n")
	b.WriteString("SLIRP_CONFIG_VERSION_MAX: " + configVersionMax + "\n")
	return b.String()
}
