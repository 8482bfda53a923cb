package slirp

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/nsgate/nsgate/netplan"
)

// NetnsType says what the PID|PATH|FD operand names (--netns-type).
type NetnsType string

// The values of --netns-type.
const (
	// NetnsPID: the operand is a PID; the helper joins /proc/PID/ns/net
	// (and /proc/PID/ns/user unless --userns-path is given). The default.
	NetnsPID NetnsType = "pid"
	// NetnsPath: the operand is the path of a network namespace (Podman
	// passes a bind-mounted nsfs file under $XDG_RUNTIME_DIR/netns/).
	NetnsPath NetnsType = "path"
	// NetnsTapFD: the operand is an already open TAP file descriptor
	// (slirp4netns ≥ 1.3.0); there is no TAPNAME and nothing to configure.
	NetnsTapFD NetnsType = "tapfd"
)

// ExitFailure is slirp4netns's exit status for a bad command line, as for
// any other failure.
const ExitFailure = 1

// Defaults of slirp4netns 1.x.
const (
	DefaultMTU     = 1500
	DefaultTapName = "tap0"
	// MaxMTU is slirp4netns's (and libslirp's) largest MTU.
	MaxMTU = 65521
	// MinMTU is the smallest MTU the kernel lets a TAP device have (the
	// IPv4 minimum). slirp4netns accepts 1..67 and then fails at -c.
	MinMTU = 68
	// MinMTU6 is the IPv6 minimum link MTU; below it the kernel turns IPv6
	// off on the device.
	MinMTU6 = 1280
	// maxSunPath is sizeof(sockaddr_un.sun_path) on Linux.
	maxSunPath = 108
)

// Config is a parsed slirp4netns command line. ParseArgs fills every
// field; the zero value is not meaningful. It is plain data, safe to copy.
type Config struct {
	// Help and Version report -h/--help and -v/--version. As with
	// getopt, the first of them ends parsing: when either is set, no
	// other field is meaningful and the caller prints Help() or
	// Version(...) on stdout and exits 0.
	Help, Version bool

	Configure bool // -c: bring up lo and the TAP, address and route it
	ExitFD    int  // -e: exit 0 when this fd reports hang-up; -1: none
	ReadyFD   int  // -r: write "1" and close once ready; -1: none
	MTU       int  // -m: MinMTU..MaxMTU, default 1500
	IPv6      bool // -6: fd00::/64 (off if MTU < MinMTU6, with a warning)
	APISocket string

	// CIDR is the guest network (--cidr), a network address with a
	// prefix length of 1..25. Default: the IPv4 prefix of nsgate's
	// default address plan, 10.0.2.0/24 (netplan.Default). Plan gives
	// the whole plan.
	CIDR netip.Prefix

	DisableHostLoopback bool // --disable-host-loopback / --no-host-loopback

	NetnsType NetnsType
	// Target is the PID|PATH|FD operand as given.
	Target string
	// PID is Target as a number when NetnsType is NetnsPID, else 0.
	PID int
	// TapFD is Target as a number when NetnsType is NetnsTapFD, else -1.
	TapFD int
	// TapName is the TAP device's name (default tap0; empty with tapfd).
	TapName string

	UsernsPath    string // --userns-path: user namespace to join
	EnableSandbox bool   // --enable-sandbox (alias --create-sandbox)
	EnableSeccomp bool   // --enable-seccomp
	DisableDNS    bool   // --disable-dns: no DNS server on the DNS address

	// MAC is the TAP's hardware address (--macaddress, only with -c) in
	// lower-case xx:xx:xx:xx:xx:xx form; empty: the kernel's choice.
	MAC string

	// OutboundAddr and OutboundAddr6 are --outbound-addr(6): an address
	// literal of the right family or an interface name, to bind upstream
	// connections to. Empty: not set.
	OutboundAddr, OutboundAddr6 string

	// Warnings are non-fatal remarks in slirp4netns's style ("WARNING:
	// ..."), for the caller to print on stdout before starting.
	Warnings []string
}

// Plan returns the address plan: --cidr as the IPv4 prefix (the default
// when CIDR is not an IPv4 prefix, as in the zero Config) and the default
// IPv6 prefix, which slirp4netns has no flag for. The methods below read
// their addresses from it; the gateway and the DNS server take it whole.
func (c Config) Plan() netplan.Plan {
	p := netplan.Plan{}
	if c.CIDR.IsValid() && c.CIDR.Addr().Is4() {
		p.Prefix4 = c.CIDR
	}
	return p.WithDefaults()
}

// Guest returns the recommended guest address: the network address + 100
// (10.0.2.100 by default). It is the address -c assigns and the default
// guest_addr of add_hostfwd.
func (c Config) Guest() netip.Addr { return c.Plan().Guest4() }

// Gateway returns the gateway: network + 2 (10.0.2.2 by default).
func (c Config) Gateway() netip.Addr { return c.Plan().Gateway4() }

// DNS returns the DNS server address: network + 3 (10.0.2.3 by default).
func (c Config) DNS() netip.Addr { return c.Plan().DNS4() }

// GuestPrefix returns the guest address with the --cidr prefix length
// (10.0.2.100/24 by default): what -c puts on the TAP.
func (c Config) GuestPrefix() netip.Prefix { return c.Plan().GuestPrefix4() }

// Prefix6 returns the IPv6 network (fd00::/64).
func (c Config) Prefix6() netip.Prefix { return c.Plan().Prefix6 }

// Guest6 returns the guest's IPv6 address (fd00::100).
func (c Config) Guest6() netip.Addr { return c.Plan().Guest6() }

// Gateway6 returns the IPv6 gateway (fd00::2).
func (c Config) Gateway6() netip.Addr { return c.Plan().Gateway6() }

// DNS6 returns the IPv6 DNS server (fd00::3).
func (c Config) DNS6() netip.Addr { return c.Plan().DNS6() }

// NetnsName names the target network namespace for file names such as
// the helpers' audit log $NSGATE_AUDIT_DIR/<netns name>.jsonl: the base name
// of the path for --netns-type=path (Podman's "netns-<uuid>"), "pid-PID"
// for a PID or a /proc/PID/ns/net path, and "tapfd-FD" for a TAP
// descriptor. It never contains '/'
// and is never "", "." or "..".
func (c Config) NetnsName() string {
	var name string
	switch c.NetnsType {
	case NetnsPath:
		name = c.Target
		for len(name) > 1 && strings.HasSuffix(name, "/") {
			name = strings.TrimSuffix(name, "/")
		}
		if pid, ok := procNetnsPID(name); ok {
			return "pid-" + pid
		}
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
	case NetnsTapFD:
		name = fmt.Sprintf("tapfd-%d", c.TapFD)
	default:
		name = fmt.Sprintf("pid-%d", c.PID)
	}
	if name == "" || name == "." || name == ".." {
		return "netns"
	}
	return name
}

// procNetnsPID returns PID for a path /proc/PID/ns/net (PID all digits):
// its base name, "net", would name every such namespace alike.
func procNetnsPID(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return "", false
	}
	pid, ok := strings.CutSuffix(rest, "/ns/net")
	if !ok || pid == "" || strings.Trim(pid, "0123456789") != "" {
		return "", false
	}
	return pid, true
}

// option identifiers.
type optID int

const (
	optConfigure optID = iota
	optExitFD
	optReadyFD
	optMTU
	optIPv6
	optAPISocket
	optHelp
	optVersion
	optCIDR
	optDisableHostLoopback
	optNoHostLoopback // deprecated alias
	optNetnsType
	optUsernsPath
	optEnableSandbox
	optCreateSandbox // deprecated alias
	optEnableSeccomp
	optOutboundAddr
	optOutboundAddr6
	optDisableDNS
	optMACAddress
	optTargetType
)

type optSpec struct {
	long  string
	short byte // 0: long only
	arg   bool // takes a required argument
	id    optID
}

// options is slirp4netns 1.2.0's longopts table plus its short options
// ("ce:r:m:a:6hv").
var options = []optSpec{
	{"configure", 'c', false, optConfigure},
	{"exit-fd", 'e', true, optExitFD},
	{"ready-fd", 'r', true, optReadyFD},
	{"mtu", 'm', true, optMTU},
	{"cidr", 0, true, optCIDR},
	{"disable-host-loopback", 0, false, optDisableHostLoopback},
	{"no-host-loopback", 0, false, optNoHostLoopback},
	{"netns-type", 0, true, optNetnsType},
	{"userns-path", 0, true, optUsernsPath},
	{"api-socket", 'a', true, optAPISocket},
	{"enable-ipv6", '6', false, optIPv6},
	{"enable-sandbox", 0, false, optEnableSandbox},
	{"create-sandbox", 0, false, optCreateSandbox},
	{"enable-seccomp", 0, false, optEnableSeccomp},
	{"help", 'h', false, optHelp},
	{"version", 'v', false, optVersion},
	{"outbound-addr", 0, true, optOutboundAddr},
	{"outbound-addr6", 0, true, optOutboundAddr6},
	{"disable-dns", 0, false, optDisableDNS},
	{"macaddress", 0, true, optMACAddress},
	{"target-type", 0, true, optTargetType},
}

// ParseArgs parses a slirp4netns command line (without the program name):
//
//	[OPTION]... PID|PATH|FD [TAPNAME]
//
// with getopt_long's rules: short options may be clustered (-c6) and take
// their argument attached or as the next word (-e3, -e 3); long options
// may be abbreviated to a unique prefix and take "=ARG" or the next word;
// operands may come before, between or after options; "--" ends options.
// -h and -v end parsing at once (see Config.Help).
//
// It applies slirp4netns 1.2.0's checks with its messages (exit-fd and
// ready-fd non-negative integers, MTU range, --cidr a network address of
// prefix length 1-25, --macaddress only with -c, --target-type=bess
// conflicts, PID a positive integer), and these of nsgate's own, each a
// deliberate difference:
//   - MTU at least MinMTU (slirp4netns accepts 1..67, then -c fails);
//   - --netns-type is pid, path or tapfd (slirp4netns 1.2.0 takes any
//     other value as "path");
//   - --target-type=bess is refused: nsgate serves network namespaces only;
//   - TAPNAME must be a valid interface name, --macaddress exactly six
//     bytes of a unicast address, --outbound-addr(6) an address of the
//     right family or a valid interface name, the API socket path shorter
//     than 108 bytes, and --cidr outside nsgate's fake-IP range
//     198.18.0.0/15;
//   - nothing is looked up on the file system: a missing --userns-path or
//     netns path is reported when it is opened.
//
// The error is one line without a program-name prefix; slirp4netns exits
// with status 1 on it.
func ParseArgs(args []string) (Config, error) {
	c := Config{
		ExitFD:    -1,
		ReadyFD:   -1,
		MTU:       DefaultMTU,
		CIDR:      netplan.Default().Prefix4,
		NetnsType: NetnsPID,
		TapFD:     -1,
	}
	var (
		operands                                    []string
		cidr, netnsType, targetType, mac            string
		haveNetnsType, haveTarget, haveMAC, haveAPI bool
	)
	// apply handles one option, in command-line order; stop reports -h/-v.
	apply := func(o optSpec, val string) (stop bool, err error) {
		switch o.id {
		case optConfigure:
			c.Configure = true
		case optExitFD:
			n, ok := cLong(val)
			if !ok || n < 0 || n > math.MaxInt32 {
				return false, errors.New("exit-fd must be a non-negative integer")
			}
			c.ExitFD = int(n)
		case optReadyFD:
			n, ok := cLong(val)
			if !ok || n < 0 || n > math.MaxInt32 {
				return false, errors.New("ready-fd must be a non-negative integer")
			}
			c.ReadyFD = int(n)
		case optMTU:
			n, ok := cLong(val)
			if !ok || n <= 0 || n > MaxMTU {
				return false, fmt.Errorf("MTU must be a positive integer (< %d)", MaxMTU+1)
			}
			if n < MinMTU {
				return false, fmt.Errorf("MTU %d is too small: a TAP device needs at least %d", n, MinMTU)
			}
			c.MTU = int(n)
		case optIPv6:
			c.IPv6 = true
		case optAPISocket:
			c.APISocket, haveAPI = val, true
		case optHelp:
			c.Help = true
			return true, nil
		case optVersion:
			c.Version = true
			return true, nil
		case optCIDR:
			cidr = val
		case optNoHostLoopback:
			c.Warnings = append(c.Warnings, "WARNING: --no-host-loopback is deprecated, please use --disable-host-loopback instead.")
			c.DisableHostLoopback = true
		case optDisableHostLoopback:
			c.DisableHostLoopback = true
		case optNetnsType:
			netnsType, haveNetnsType = val, true
		case optUsernsPath:
			if val == "" {
				return false, errors.New("userns path doesn't exist: (empty)")
			}
			c.UsernsPath = val
		case optCreateSandbox:
			c.Warnings = append(c.Warnings, "WARNING: --create-sandbox is deprecated, please use --enable-sandbox instead.")
			c.EnableSandbox = true
		case optEnableSandbox:
			c.EnableSandbox = true
		case optEnableSeccomp:
			c.EnableSeccomp = true
		case optOutboundAddr:
			c.OutboundAddr = val
		case optOutboundAddr6:
			c.OutboundAddr6 = val
		case optDisableDNS:
			c.DisableDNS = true
		case optMACAddress:
			mac, haveMAC = val, true
		case optTargetType:
			targetType, haveTarget = val, true
		}
		return false, nil
	}

	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			operands = append(operands, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			o, val, hasVal, err := matchLong(a[2:])
			if err != nil {
				return Config{}, err
			}
			if o.arg && !hasVal {
				if i+1 >= len(args) {
					return Config{}, fmt.Errorf("option '--%s' requires an argument", o.long)
				}
				i++
				val = args[i]
			}
			if !o.arg && hasVal {
				return Config{}, fmt.Errorf("option '--%s' doesn't allow an argument", o.long)
			}
			stop, err := apply(o, val)
			if err != nil || stop {
				return c, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o, ok := matchShort(a[j])
				if !ok {
					return Config{}, fmt.Errorf("invalid option -- '%s'", printable(a[j]))
				}
				var val string
				if o.arg {
					switch {
					case j+1 < len(a):
						val = a[j+1:]
					case i+1 < len(args):
						i++
						val = args[i]
					default:
						return Config{}, fmt.Errorf("option requires an argument -- '%c'", o.short)
					}
					j = len(a)
				}
				stop, err := apply(o, val)
				if err != nil || stop {
					return c, err
				}
			}
		default:
			operands = append(operands, a)
		}
	}

	// Checks after the option loop, in slirp4netns's order.
	if haveMAC && !c.Configure {
		return Config{}, errors.New("--macaddr cannot be specified when --configure or -c is not specified")
	}
	if haveTarget {
		switch targetType {
		case "netns":
		case "bess":
			switch {
			case c.Configure:
				return Config{}, errors.New("--configure conflicts with --target-type=bess")
			case haveNetnsType:
				return Config{}, errors.New("--netns-type conflicts with --target-type=bess")
			case c.UsernsPath != "":
				return Config{}, errors.New("--userns-path conflicts with --target-type=bess")
			}
			return Config{}, errors.New("--target-type=bess is not supported by nsgate: it serves network namespaces only (--target-type=netns)")
		default:
			return Config{}, errors.New(`--target-type must be either "netns" or "bess"`)
		}
	}
	if haveNetnsType {
		switch NetnsType(netnsType) {
		case NetnsPID, NetnsPath, NetnsTapFD:
			c.NetnsType = NetnsType(netnsType)
		default:
			return Config{}, fmt.Errorf(`--netns-type must be "pid", "path" or "tapfd", not %q`, netnsType)
		}
	}

	if err := c.setTarget(operands); err != nil {
		return Config{}, err
	}
	if cidr != "" {
		p, err := netplan.ParseCIDR(cidr)
		if err != nil {
			return Config{}, err
		}
		c.CIDR = p.Prefix4
	}
	if c.OutboundAddr != "" {
		if err := checkOutbound(c.OutboundAddr, false); err != nil {
			return Config{}, err
		}
	}
	if c.OutboundAddr6 != "" {
		if err := checkOutbound(c.OutboundAddr6, true); err != nil {
			return Config{}, err
		}
	}
	if haveMAC {
		m, err := parseMAC(mac)
		if err != nil {
			return Config{}, err
		}
		c.MAC = m
	}
	if haveAPI {
		if err := checkSocketPath(c.APISocket); err != nil {
			return Config{}, err
		}
	}
	if c.IPv6 && c.MTU < MinMTU6 {
		c.IPv6 = false
		c.Warnings = append(c.Warnings, fmt.Sprintf("WARNING: IPv6 needs an MTU of at least %d; IPv6 is off with --mtu=%d", MinMTU6, c.MTU))
	}
	return c, nil
}

// setTarget interprets the operands according to NetnsType.
func (c *Config) setTarget(operands []string) error {
	if c.NetnsType == NetnsTapFD {
		if c.Configure {
			return errors.New("--configure conflicts with --netns-type=tapfd: the TAP device is already open, nothing is configured")
		}
		if len(operands) < 1 {
			return errors.New("missing operand: FD (usage: slirp4netns --netns-type=tapfd [OPTION]... FD)")
		}
		if len(operands) > 1 {
			c.Warnings = append(c.Warnings, "WARNING: too many arguments")
		}
		c.Target = operands[0]
		n, ok := cLong(c.Target)
		if !ok || n < 0 || n > math.MaxInt32 {
			return errors.New("FD must be a non-negative integer")
		}
		c.TapFD = int(n)
		return nil
	}
	if len(operands) < 2 {
		return errors.New("missing operand: PID|PATH TAPNAME (usage: slirp4netns [OPTION]... PID|PATH TAPNAME)")
	}
	if len(operands) > 2 {
		c.Warnings = append(c.Warnings, "WARNING: too many arguments")
	}
	c.Target, c.TapName = operands[0], operands[1]
	switch c.NetnsType {
	case NetnsPID:
		n, ok := cLong(c.Target)
		if !ok || n <= 0 || n > math.MaxInt32 {
			return errors.New("PID must be a positive integer")
		}
		c.PID = int(n)
	case NetnsPath:
		if c.Target == "" {
			return errors.New("existing path expected when --netns-type=path")
		}
	}
	if err := checkIfName(c.TapName); err != nil {
		return fmt.Errorf("invalid TAPNAME %q: %w", c.TapName, err)
	}
	return nil
}

// matchLong finds the long option named by s (the text after "--", maybe
// with "=ARG"), allowing a unique prefix as getopt_long does.
func matchLong(s string) (o optSpec, val string, hasVal bool, err error) {
	name := s
	if k := strings.IndexByte(s, '='); k >= 0 {
		name, val, hasVal = s[:k], s[k+1:], true
	}
	var found []optSpec
	for _, opt := range options {
		if opt.long == name {
			return opt, val, hasVal, nil
		}
		if name != "" && strings.HasPrefix(opt.long, name) {
			found = append(found, opt)
		}
	}
	switch len(found) {
	case 0:
		return optSpec{}, "", false, fmt.Errorf("unrecognized option '--%s'", printableString(name))
	case 1:
		return found[0], val, hasVal, nil
	}
	names := make([]string, len(found))
	for i, f := range found {
		names[i] = "'--" + f.long + "'"
	}
	return optSpec{}, "", false, fmt.Errorf("option '--%s' is ambiguous; possibilities: %s", printableString(name), strings.Join(names, " "))
}

func matchShort(b byte) (optSpec, bool) {
	for _, o := range options {
		if o.short != 0 && o.short == b {
			return o, true
		}
	}
	return optSpec{}, false
}

// cLong parses s as C's strtol(s, &end, 10) with *end == '\0' demanded:
// leading white space and a sign are allowed, at least one digit is
// required (strtol("") is 0, which slirp4netns would take; we do not),
// and values outside int64 fail like ERANGE.
func cLong(s string) (int64, bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	if i == len(s) {
		return 0, false
	}
	var v uint64
	for ; i < len(s); i++ {
		d := s[i]
		if d < '0' || d > '9' {
			return 0, false
		}
		if v > (1<<63)/10 {
			return 0, false
		}
		v = v*10 + uint64(d-'0')
		if v > 1<<63 {
			return 0, false
		}
	}
	if neg {
		return -int64(v), true // -1<<63 wraps to itself: still correct
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

func isCSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r'
}

// parseMAC accepts six hex bytes separated by ':' (one or two digits
// each, as slirp4netns's sscanf("%x") loop does) of a unicast, non-zero
// address, and returns it in canonical lower-case form.
func parseMAC(s string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%q is an invalid MAC address: %s", s, why)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return "", bad("it must have 6 bytes, each byte separated by a ':'")
	}
	var b [6]byte
	for i, p := range parts {
		if len(p) < 1 || len(p) > 2 || strings.Trim(p, "0123456789abcdefABCDEF") != "" {
			return "", bad("each byte must be one or two hex digits")
		}
		var v byte
		for _, ch := range []byte(p) {
			v = v<<4 | unhex(ch)
		}
		b[i] = v
	}
	if b[0]&1 != 0 {
		return "", bad("it is a multicast address; a TAP needs a unicast one")
	}
	if b == [6]byte{} {
		return "", bad("it is all zeros")
	}
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]), nil
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// checkOutbound accepts an address literal of the right family or an
// interface name (resolved by the caller when it binds).
func checkOutbound(s string, v6 bool) error {
	flag, fam := "--outbound-addr", "IPv4"
	if v6 {
		flag, fam = "--outbound-addr6", "IPv6"
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() != !v6 || a.Zone() != "" {
			return fmt.Errorf("%s %q: expected an %s address or an interface name", flag, s, fam)
		}
		return nil
	}
	if err := checkIfName(s); err != nil {
		return fmt.Errorf("%s %q: expected an %s address or an interface name", flag, s, fam)
	}
	return nil
}

// checkIfName applies the kernel's dev_valid_name rules.
func checkIfName(s string) error {
	switch {
	case s == "":
		return errors.New("empty interface name")
	case len(s) > 15:
		return errors.New("interface names have at most 15 bytes")
	case s == "." || s == "..":
		return errors.New("not a valid interface name")
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == ':' || isCSpace(s[i]) || s[i] < 0x20 || s[i] == 0x7f {
			return fmt.Errorf("interface names cannot contain %q", s[i])
		}
	}
	return nil
}

// checkSocketPath applies api_bindlisten's length check.
func checkSocketPath(path string) error {
	if path == "" {
		return errors.New("the API socket path is empty")
	}
	if len(path) >= maxSunPath {
		return fmt.Errorf("the specified API socket path is too long (>= %d)", maxSunPath)
	}
	return nil
}

// printable renders a byte for an error message.
func printable(b byte) string {
	if b < 0x20 || b >= 0x7f {
		return fmt.Sprintf("\\x%02x", b)
	}
	return string(b)
}

func printableString(s string) string {
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}
