package pasta

import "strings"

// Help returns `nsgate pasta --help`: the options nsgate pasta accepts.
func Help() string {
	return strings.TrimLeft(`
Usage: pasta [OPTION]... --netns PATH
       pasta [OPTION]... PATH|PID

nsgate's drop-in for pasta, the network helper of rootless Podman 5 and 6:
it configures the container's network namespace as pasta does (the host's
address and default gateway copied) and sends every flow through nsgate's
policy, DNS and audit (NSGATE_POLICY, NSGATE_AUDIT_DIR, NSGATE_AUDIT_KEY).
It returns once the namespace is ready and stays in the background until
the namespace is gone.

  --netns PATH            the container's network namespace
  --userns PATH           user namespace to join (default: the owner's)
  --config-net            configure addresses and routes, not only the device
  -t, --tcp-ports SPEC    forward host TCP ports to the container:
                          none, or [ADDR/]PORT[-PORT][:PORT[-PORT]][,...]
  -u, --udp-ports SPEC    the same for UDP
  -T, --tcp-ns none       (only none: no container-to-host forwards)
  -U, --udp-ns none       (only none)
  --dns-forward ADDR      answer DNS at ADDR (default 169.254.1.1)
  -D, --dns none          accepted; the container's DNS is nsgate's
  --map-guest-addr ADDR   ADDR is the host: flows there are flows to the
                          host's 127.0.0.1, decided by the policy
  --map-host-loopback ADDR  the same
  --no-map-gw             accepted (the gateway is never the host)
  -a, --address ADDR      the container's address (default: the host's)
  -n, --netmask MASK      its prefix length or netmask
  -g, --gateway ADDR      its default gateway (default: the host's)
  -I, --ns-ifname NAME    its interface name (default: the host's)
  -m, --mtu MTU           default 65520
  -P, --pid FILE          write the background process's PID to FILE
  -f, --foreground        stay in the foreground
  -4, --ipv4-only         accepted (nsgate pasta serves IPv4 only)
  -q, --quiet             say nothing unless something fails
  -d, --debug, --trace    say what was accepted without effect
  --no-dhcp               no DHCP server for the container
  --no-dhcpv6, --no-ndp, --no-ra, --no-icmp, -l FILE  accepted
  -h, --help              this text
  --version               version

Refused with a message: -6, -T/-U other than none, -t/-u auto or all,
excluded ports (~PORT), ADDR%IFACE, -i, -o, --no-tcp, --no-udp, a command
to run.
`, "\n")
}

// Version returns `nsgate pasta --version`, whose first line names pasta
// as Podman's `podman info` shows it.
func Version(nsgateVersion string) string {
	return "pasta (" + nsgateVersion + ")\nnsgate's drop-in for pasta: every flow goes through nsgate's policy.\n"
}
