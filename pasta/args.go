package pasta

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nsgate/nsgate/inbound"
)

// ExitFailure is pasta's exit status for a bad command line and for any
// failure to start.
const ExitFailure = 1

// Defaults.
const (
	// DefaultMTU is pasta's MTU for the container's interface.
	DefaultMTU = 65520
	// MinMTU is the smallest MTU the kernel allows on an IPv4 link.
	MinMTU = 68
	// DefaultIfName names the container's interface when the host has no
	// interface to copy.
	DefaultIfName = "tap0"
	// DefaultDNS is the DNS address when no --dns-forward is given:
	// Podman 5.3's --dns-forward, so that the gateway always has one.
	DefaultDNS = "169.254.1.1"
)

// Config is a parsed pasta command line. It is plain data, safe to copy.
type Config struct {
	// Help and Version: print Help() or Version(...) and exit 0; no other
	// field is meaningful.
	Help, Version bool

	// Netns is the container's network namespace: --netns PATH, a PATH
	// operand, or /proc/PID/ns/net for a PID operand.
	Netns string
	// PID is the PID operand (0: none); its user namespace is joined
	// unless Userns is set.
	PID int
	// Userns is --userns PATH ("": the owner of the network namespace).
	Userns string
	// ConfigNet is --config-net: addresses and routes are set in the
	// namespace, not only the interface created.
	ConfigNet bool
	// TCP and UDP are the inbound forwards of -t and -u (host to
	// container), one rule per port; GuestAddr is left unset.
	TCP, UDP []inbound.Rule
	// DNSForward is --dns-forward's IPv4 address (DefaultDNS if not given).
	DNSForward netip.Addr
	// MapGuestAddr is --map-guest-addr's (or --map-host-loopback's) IPv4
	// address: the host as the container sees it. Zero: none.
	MapGuestAddr netip.Addr
	// Addr, Netmask and Gateway are -a, -n and -g: they replace what is
	// copied from the host.
	Addr    netip.Addr
	Netmask int // prefix length; -1: not given
	Gateway netip.Addr
	// IfName is -I (the container's interface name; "": the host's).
	IfName string
	// MTU is -m.
	MTU int
	// PIDFile is --pid: the background process writes its PID there.
	PIDFile string
	// NoDHCP is --no-dhcp: no DHCP server on the container's interface.
	NoDHCP bool
	// Foreground is -f: stay in the foreground (no background copy).
	Foreground bool
	// Quiet is -q/--quiet; Debug -d/--debug/--trace.
	Quiet, Debug bool
	// Notes are things accepted without effect, said under --debug.
	Notes []string
}

// usageError is a command-line error in getopt's words; the caller prints
// it after the program name ("pasta: unrecognized option '--x'").
type usageError string

func (e usageError) Error() string { return string(e) }

// option is one pasta option nsgate knows.
type option struct {
	long  string
	short byte // 0: none
	arg   bool
	set   func(c *Config, v string) error
}

// ignore accepts an option that changes nothing for nsgate (what it
// tunes does not exist in nsgate's gateway, or is its default already).
func ignore(what string) func(*Config, string) error {
	return func(c *Config, v string) error {
		c.Notes = append(c.Notes, what+" has no effect in nsgate")
		return nil
	}
}

// refuse refuses an option whose meaning nsgate does not provide.
func refuse(why string) func(*Config, string) error {
	return func(*Config, string) error { return fmt.Errorf("%s", why) }
}

var options = []option{
	{"config-net", 0, false, func(c *Config, _ string) error { c.ConfigNet = true; return nil }},
	{"netns", 0, true, func(c *Config, v string) error { c.Netns = v; return nil }},
	{"userns", 0, true, func(c *Config, v string) error { c.Userns = v; return nil }},
	{"tcp-ports", 't', true, func(c *Config, v string) error { return c.addPorts("tcp", "-t", v) }},
	{"udp-ports", 'u', true, func(c *Config, v string) error { return c.addPorts("udp", "-u", v) }},
	{"tcp-ns", 'T', true, nsPorts("-T")},
	{"udp-ns", 'U', true, nsPorts("-U")},
	{"dns-forward", 0, true, func(c *Config, v string) error { return setAddr(&c.DNSForward, "--dns-forward", v) }},
	{"dns", 'D', true, func(c *Config, v string) error {
		if v != "none" {
			c.Notes = append(c.Notes, "--dns "+v+": the container's DNS is nsgate's, on the --dns-forward address")
		}
		return nil
	}},
	{"map-guest-addr", 0, true, func(c *Config, v string) error { return setAddr(&c.MapGuestAddr, "--map-guest-addr", v) }},
	{"map-host-loopback", 0, true, func(c *Config, v string) error {
		if v == "none" {
			return nil
		}
		return setAddr(&c.MapGuestAddr, "--map-host-loopback", v)
	}},
	{"no-map-gw", 0, false, ignore("--no-map-gw (the gateway's address is never the host in nsgate)")},
	{"address", 'a', true, func(c *Config, v string) error { return setAddr(&c.Addr, "-a", v) }},
	{"netmask", 'n', true, func(c *Config, v string) error { return c.setNetmask(v) }},
	{"gateway", 'g', true, func(c *Config, v string) error { return setAddr(&c.Gateway, "-g", v) }},
	{"ns-ifname", 'I', true, func(c *Config, v string) error {
		if v == "" || len(v) > 15 || strings.ContainsAny(v, "/ \t\n:") {
			return fmt.Errorf("Invalid interface name: %s", v)
		}
		c.IfName = v
		return nil
	}},
	{"mtu", 'm', true, func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < MinMTU || n > DefaultMTU {
			return fmt.Errorf("Invalid MTU: %s (want %d to %d)", v, MinMTU, DefaultMTU)
		}
		c.MTU = n
		return nil
	}},
	{"pid", 'P', true, func(c *Config, v string) error { c.PIDFile = v; return nil }},
	{"foreground", 'f', false, func(c *Config, _ string) error { c.Foreground = true; return nil }},
	{"quiet", 'q', false, func(c *Config, _ string) error { c.Quiet = true; return nil }},
	{"debug", 'd', false, func(c *Config, _ string) error { c.Debug = true; return nil }},
	{"trace", 0, false, func(c *Config, _ string) error { c.Debug = true; return nil }},
	{"ipv4-only", '4', false, func(*Config, string) error { return nil }}, // nsgate pasta is IPv4 only
	{"ipv6-only", '6', false, refuse("-6/--ipv6-only: nsgate pasta serves IPv4 only")},
	{"no-dhcp", 0, false, func(c *Config, _ string) error { c.NoDHCP = true; return nil }},
	{"no-dhcpv6", 0, false, ignore("--no-dhcpv6")},
	{"no-ndp", 0, false, ignore("--no-ndp")},
	{"no-ra", 0, false, ignore("--no-ra")},
	{"no-icmp", 0, false, ignore("--no-icmp")},
	{"no-tcp", 0, false, refuse("--no-tcp: nsgate pasta always serves TCP (the policy decides each flow)")},
	{"no-udp", 0, false, refuse("--no-udp: nsgate pasta always serves UDP (the policy decides each flow)")},
	{"outbound", 'o', true, refuse("-o/--outbound: not supported by nsgate pasta")},
	{"outbound-if4", 0, true, refuse("--outbound-if4: not supported by nsgate pasta")},
	{"interface", 'i', true, refuse("-i/--interface: nsgate pasta copies the interface of the host's default route")},
	{"log-file", 'l', true, ignore("-l/--log-file (the audit log is NSGATE_AUDIT_DIR's)")},
	{"help", 'h', false, func(c *Config, _ string) error { c.Help = true; return nil }},
	{"version", 0, false, func(c *Config, _ string) error { c.Version = true; return nil }},
}

// nsPorts handles -T/-U: forwards from the container to the host's ports.
// Only "none" (what Podman passes) is accepted: such a forward would reach
// the host's loopback around the policy.
func nsPorts(flag string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "none" {
			return nil
		}
		return fmt.Errorf("%s %s: forwarding from the container to the host's ports is not supported by nsgate pasta (it would bypass the policy; allow the host's address in the policy instead)", flag, v)
	}
}

// ParseArgs parses pasta's command line (without the program name), with
// getopt_long's rules: long options as --name VALUE or --name=VALUE, short
// ones clustered (-qf) or with the value attached (-t80), "--" ending the
// options, and operands anywhere. A usage error's text is getopt's
// ("unrecognized option '--x'"): print it after the program name. Other
// errors are pasta-style one-liners. Both mean exit status ExitFailure.
func ParseArgs(args []string) (Config, error) {
	c := Config{Netmask: -1}
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			operands = append(operands, a)
			continue
		}
		next := func() (string, bool) {
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := lookupLong(name)
			if err != nil {
				return Config{}, err
			}
			switch {
			case o.arg && !hasVal:
				v, ok := next()
				if !ok {
					return Config{}, usageError(fmt.Sprintf("option '--%s' requires an argument", o.long))
				}
				val = v
			case !o.arg && hasVal:
				return Config{}, usageError(fmt.Sprintf("option '--%s' doesn't allow an argument", o.long))
			}
			if err := o.set(&c, val); err != nil {
				return Config{}, err
			}
			if c.Help || c.Version {
				return c, nil
			}
			continue
		}
		for j := 1; j < len(a); j++ {
			o, ok := lookupShort(a[j])
			if !ok {
				return Config{}, usageError(fmt.Sprintf("invalid option -- '%s'", printable(a[j:j+1])))
			}
			val := ""
			if o.arg {
				if j+1 < len(a) {
					val = a[j+1:]
				} else if v, ok := next(); ok {
					val = v
				} else {
					return Config{}, usageError(fmt.Sprintf("option requires an argument -- '%c'", o.short))
				}
				j = len(a)
			}
			if err := o.set(&c, val); err != nil {
				return Config{}, err
			}
			if c.Help || c.Version {
				return c, nil
			}
		}
	}
	if err := c.target(operands); err != nil {
		return Config{}, err
	}
	if !c.DNSForward.IsValid() {
		c.DNSForward = netip.MustParseAddr(DefaultDNS)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	return c, nil
}

// lookupLong finds a long option by its name or an unambiguous prefix of
// it, as getopt_long does.
func lookupLong(name string) (option, error) {
	var found []option
	for _, o := range options {
		if o.long == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.long, name) {
			found = append(found, o)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return option{}, usageError(fmt.Sprintf("unrecognized option '--%s'", printable(name)))
	}
	return option{}, usageError(fmt.Sprintf("option '--%s' is ambiguous", printable(name)))
}

func lookupShort(b byte) (option, bool) {
	for _, o := range options {
		if o.short != 0 && o.short == b {
			return o, true
		}
	}
	return option{}, false
}

// target sets the namespace from --netns or the one operand (a PID or a
// path). pasta's other operand, a command to run in a new namespace, is
// not nsgate pasta's job.
func (c *Config) target(operands []string) error {
	if len(operands) > 1 || len(operands) == 1 && c.Netns != "" {
		return fmt.Errorf("nsgate pasta runs no command (got %q): give the container's namespace as --netns PATH; to run a program behind the gateway use nsgate run", strings.Join(operands, " "))
	}
	if len(operands) == 1 {
		op := operands[0]
		if pid, err := strconv.Atoi(op); err == nil {
			if pid <= 0 {
				return fmt.Errorf("Invalid PID: %s", op)
			}
			c.PID = pid
			c.Netns = "/proc/" + op + "/ns/net"
		} else if strings.HasPrefix(op, "/") || strings.HasPrefix(op, ".") {
			c.Netns = op
		} else {
			return fmt.Errorf("nsgate pasta runs no command (got %q): give the container's namespace as --netns PATH; to run a program behind the gateway use nsgate run", op)
		}
	}
	if c.Netns == "" {
		return fmt.Errorf("no network namespace given: nsgate pasta needs --netns PATH (or a PID), it does not create one")
	}
	return nil
}

// setAddr parses an IPv4 address option. IPv6 values are refused: nsgate
// pasta serves IPv4 only.
func setAddr(dst *netip.Addr, flag, v string) error {
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return fmt.Errorf("Invalid address for %s: %s", flag, v)
	}
	if !a.Is4() {
		return fmt.Errorf("%s %s: nsgate pasta serves IPv4 only", flag, v)
	}
	*dst = a
	return nil
}

// setNetmask parses -n: a prefix length or a dotted netmask.
func (c *Config) setNetmask(v string) error {
	if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 32 {
		c.Netmask = n
		return nil
	}
	if m, err := netip.ParseAddr(v); err == nil && m.Is4() {
		b := m.As4()
		bits := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		n := 0
		for bits&0x80000000 != 0 {
			n++
			bits <<= 1
		}
		if bits == 0 && n >= 1 {
			c.Netmask = n
			return nil
		}
	}
	return fmt.Errorf("Invalid netmask: %s", v)
}

// printable escapes control bytes for a message.
func printable(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
