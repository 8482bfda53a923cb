package slirp

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// base returns ParseArgs' defaults with the given operands' effect.
func base(target, tap string, pid int) Config {
	return Config{
		ExitFD:    -1,
		ReadyFD:   -1,
		MTU:       DefaultMTU,
		CIDR:      netip.MustParsePrefix("10.0.2.0/24"), // slirp4netns's default --cidr
		NetnsType: NetnsPID,
		Target:    target,
		PID:       pid,
		TapFD:     -1,
		TapName:   tap,
	}
}

func pathBase(path string) Config {
	c := base(path, "tap0", 0)
	c.NetnsType = NetnsPath
	return c
}

const podmanNetns = "/run/user/1001/netns/netns-726967b5-3a49-ad08-8816-e64cde446de2"

func TestParseArgs(t *testing.T) {
	tests := []struct {
		why  string
		args []string
		want func() Config
	}{
		{
			why: "Podman 4.3 (Debian 12), as recorded: basic flags, -c -e 3 -r 4, netns by path",
			args: []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp",
				"--enable-ipv6", "-c", "-e", "3", "-r", "4", "--netns-type=path", podmanNetns, "tap0"},
			want: func() Config {
				c := pathBase(podmanNetns)
				c.DisableHostLoopback, c.MTU, c.EnableSandbox, c.EnableSeccomp, c.IPv6 = true, 65520, true, true, true
				c.Configure, c.ExitFD, c.ReadyFD = true, 3, 4
				return c
			},
		},
		{
			why: "Podman 4.6+ and 5 swap the fds: -r 3 -e 4",
			args: []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp",
				"--enable-ipv6", "-c", "-r", "3", "-e", "4", "--netns-type=path", podmanNetns, "tap0"},
			want: func() Config {
				c := pathBase(podmanNetns)
				c.DisableHostLoopback, c.MTU, c.EnableSandbox, c.EnableSeccomp, c.IPv6 = true, 65520, true, true, true
				c.Configure, c.ExitFD, c.ReadyFD = true, 4, 3
				return c
			},
		},
		{
			why: "Podman with port_handler=slirp4netns adds --api-socket PATH as two words",
			args: []string{"--disable-host-loopback", "--mtu=65520", "-c", "-e", "3", "-r", "4",
				"--api-socket", "/run/user/1001/libpod/tmp/0e0e.net", "--netns-type=path", podmanNetns, "tap0"},
			want: func() Config {
				c := pathBase(podmanNetns)
				c.DisableHostLoopback, c.MTU, c.Configure, c.ExitFD, c.ReadyFD = true, 65520, true, 3, 4
				c.APISocket = "/run/user/1001/libpod/tmp/0e0e.net"
				return c
			},
		},
		{
			why:  "Podman 4.x with PostConfigureNetNS passes the container's PID instead of a path",
			args: []string{"--mtu=65520", "-c", "-e", "3", "-r", "4", "4242", "tap0"},
			want: func() Config {
				c := base("4242", "tap0", 4242)
				c.MTU, c.Configure, c.ExitFD, c.ReadyFD = 65520, true, 3, 4
				return c
			},
		},
		{
			why:  "Podman's rootless netns (user-defined networks): no exit fd",
			args: []string{"-c", "-r", "3", "--netns-type=path", podmanNetns, "tap0"},
			want: func() Config {
				c := pathBase(podmanNetns)
				c.Configure, c.ReadyFD = true, 3
				return c
			},
		},
		{
			why: "Podman with network_cmd_options mtu=1500, cidr, enable_ipv6=false, allow_host_loopback=true, as recorded",
			args: []string{"--mtu=1500", "--enable-sandbox", "--enable-seccomp", "--cidr=10.9.0.0/24",
				"-c", "-e", "3", "-r", "4", "--netns-type=path", podmanNetns, "tap0"},
			want: func() Config {
				c := pathBase(podmanNetns)
				c.EnableSandbox, c.EnableSeccomp, c.Configure, c.ExitFD, c.ReadyFD = true, true, true, 3, 4
				c.CIDR = netip.MustParsePrefix("10.9.0.0/24")
				return c
			},
		},
		{
			why:  "outbound_addr and outbound_addr6 from Podman: an address or an interface name",
			args: []string{"--outbound-addr=192.0.2.1", "--outbound-addr6=eth0", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.OutboundAddr, c.OutboundAddr6 = "192.0.2.1", "eth0"
				return c
			},
		},
		{
			why:  "defaults: PID and TAPNAME only",
			args: []string{"1234", "tap0"},
			want: func() Config { return base("1234", "tap0", 1234) },
		},
		{
			why:  "getopt permutes: options after operands (slirp4netns's own cidr test does this)",
			args: []string{"-c", "77", "--cidr", "10.0.135.128/25", "tap11"},
			want: func() Config {
				c := base("77", "tap11", 77)
				c.Configure, c.CIDR = true, netip.MustParsePrefix("10.0.135.128/25")
				return c
			},
		},
		{
			why:  "clustered short options, the last one taking the rest of the word as its argument",
			args: []string{"-c6e3", "-r4", "-m", "9000", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.Configure, c.IPv6, c.ExitFD, c.ReadyFD, c.MTU = true, true, 3, 4, 9000
				return c
			},
		},
		{
			why:  "long options with the argument as the next word, and unique abbreviations",
			args: []string{"--exit-fd", "3", "--ready=4", "--conf", "--disable-h", "--no-h", "--api", "/tmp/a.sock", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.ExitFD, c.ReadyFD, c.Configure, c.DisableHostLoopback, c.APISocket = 3, 4, true, true, "/tmp/a.sock"
				c.Warnings = []string{"WARNING: --no-host-loopback is deprecated, please use --disable-host-loopback instead."}
				return c
			},
		},
		{
			why:  "an exact long name wins over a longer one it prefixes (--outbound-addr vs --outbound-addr6)",
			args: []string{"--outbound-addr", "eth0", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.OutboundAddr = "eth0"
				return c
			},
		},
		{
			why:  "-- ends the options; what follows are operands",
			args: []string{"-c", "--", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.Configure = true
				return c
			},
		},
		{
			why:  "strtol accepts leading white space and a sign",
			args: []string{"-e", " 3", "-r", "+4", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.ExitFD, c.ReadyFD = 3, 4
				return c
			},
		},
		{
			why:  "a required argument may start with '-' (getopt takes the next word regardless)",
			args: []string{"--userns-path", "-weird", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.UsernsPath = "-weird"
				return c
			},
		},
		{
			why:  "-h ends parsing: later garbage is never seen",
			args: []string{"-h", "--no-such-flag", "x"},
			want: func() Config { c := base("", "", 0); c.Help = true; return c },
		},
		{
			why:  "-v ends parsing before -h",
			args: []string{"-v", "-h"},
			want: func() Config { c := base("", "", 0); c.Version = true; return c },
		},
		{
			why:  "--help after options and operands",
			args: []string{"-c", "1", "tap0", "--help"},
			want: func() Config { c := base("", "", 0); c.Configure, c.Help = true, true; return c },
		},
		{
			why:  "tapfd (slirp4netns 1.3): one FD operand, no TAPNAME",
			args: []string{"--netns-type=tapfd", "--enable-ipv6", "--disable-dns", "7"},
			want: func() Config {
				c := base("7", "", 0)
				c.NetnsType, c.TapFD, c.IPv6, c.DisableDNS = NetnsTapFD, 7, true, true
				return c
			},
		},
		{
			why:  "--macaddress with -c, normalized to lower case",
			args: []string{"-c", "--macaddress", "0A:0:27:00:0b:FF", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.Configure, c.MAC = true, "0a:00:27:00:0b:ff"
				return c
			},
		},
		{
			why:  "extra operands are a warning, as in slirp4netns 1.2.0",
			args: []string{"1", "tap0", "extra"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.Warnings = []string{"WARNING: too many arguments"}
				return c
			},
		},
		{
			why:  "IPv6 with an MTU below 1280 is turned off, with a warning",
			args: []string{"-6", "-m", "1000", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.MTU = 1000
				c.Warnings = []string{"WARNING: IPv6 needs an MTU of at least 1280; IPv6 is off with --mtu=1000"}
				return c
			},
		},
		{
			why:  "MTU bounds: 68 and 65521 are accepted",
			args: []string{"-m", "68", "-m", "65521", "1", "tap0"},
			want: func() Config { c := base("1", "tap0", 1); c.MTU = 65521; return c },
		},
		{
			why:  "the deprecated --create-sandbox, --target-type=netns and --userns-path",
			args: []string{"--create-sandbox", "--target-type=netns", "--userns-path=/proc/1/ns/user", "--netns-type=path", "/proc/1/ns/net", "tap0"},
			want: func() Config {
				c := pathBase("/proc/1/ns/net")
				c.EnableSandbox, c.UsernsPath = true, "/proc/1/ns/user"
				c.Warnings = []string{"WARNING: --create-sandbox is deprecated, please use --enable-sandbox instead."}
				return c
			},
		},
		{
			why:  "the widest CIDR: /1",
			args: []string{"--cidr=0.0.0.0/1", "1", "tap0"},
			want: func() Config {
				c := base("1", "tap0", 1)
				c.CIDR = netip.MustParsePrefix("0.0.0.0/1")
				return c
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tt.args, err)
			}
			want := tt.want()
			if got.Help || got.Version {
				// Only the flags matter once -h/-v ended parsing.
				if got.Help != want.Help || got.Version != want.Version {
					t.Fatalf("Help/Version = %v/%v, want %v/%v", got.Help, got.Version, want.Help, want.Version)
				}
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("ParseArgs(%q)\n got %+v\nwant %+v", tt.args, got, want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	long := "/tmp/" + strings.Repeat("a", 110) + ".sock"
	tests := []struct {
		why  string
		args []string
		want string
	}{
		{"no operands", nil, "missing operand: PID|PATH TAPNAME (usage: slirp4netns [OPTION]... PID|PATH TAPNAME)"},
		{"no TAPNAME (slirp4netns 1.x needs both)", []string{"1"}, "missing operand: PID|PATH TAPNAME (usage: slirp4netns [OPTION]... PID|PATH TAPNAME)"},
		{"-m consumed the PID, leaving one operand", []string{"--mtu", "1500", "tap0"}, "missing operand: PID|PATH TAPNAME (usage: slirp4netns [OPTION]... PID|PATH TAPNAME)"},
		{"PID zero", []string{"0", "tap0"}, "PID must be a positive integer"},
		{"PID not a number", []string{"abc", "tap0"}, "PID must be a positive integer"},
		{"negative PID after --", []string{"--", "-5", "tap0"}, "PID must be a positive integer"},
		{"PID with trailing garbage", []string{"12x", "tap0"}, "PID must be a positive integer"},
		{"empty path", []string{"--netns-type=path", "", "tap0"}, "existing path expected when --netns-type=path"},
		{"exit fd negative", []string{"-e", "-1", "1", "tap0"}, "exit-fd must be a non-negative integer"},
		{"exit fd not a number", []string{"--exit-fd=abc", "1", "tap0"}, "exit-fd must be a non-negative integer"},
		{"exit fd empty (strtol would give 0 = stdin)", []string{"--exit-fd=", "1", "tap0"}, "exit-fd must be a non-negative integer"},
		{"exit fd beyond int", []string{"-e", "99999999999", "1", "tap0"}, "exit-fd must be a non-negative integer"},
		{"exit fd beyond int64", []string{"-e", "99999999999999999999999", "1", "tap0"}, "exit-fd must be a non-negative integer"},
		{"ready fd with trailing garbage", []string{"-r", "4x", "1", "tap0"}, "ready-fd must be a non-negative integer"},
		{"ready fd negative", []string{"-r-4", "1", "tap0"}, "ready-fd must be a non-negative integer"},
		{"MTU zero", []string{"-m", "0", "1", "tap0"}, "MTU must be a positive integer (< 65522)"},
		{"MTU above libslirp's maximum", []string{"--mtu=65522", "1", "tap0"}, "MTU must be a positive integer (< 65522)"},
		{"MTU in hex (strtol base 10 stops at x)", []string{"-m", "0x10", "1", "tap0"}, "MTU must be a positive integer (< 65522)"},
		{"MTU below the kernel's minimum (nsgate refuses early)", []string{"-m", "67", "1", "tap0"}, "MTU 67 is too small: a TAP device needs at least 68"},
		{"option errors come in order, before a later -h", []string{"-m", "0", "-h"}, "MTU must be a positive integer (< 65522)"},
		{"CIDR without a prefix", []string{"--cidr", "10.0.2.0", "1", "tap0"}, "invalid CIDR: 10.0.2.0"},
		{"CIDR with a 3-digit prefix", []string{"--cidr", "10.0.2.0/024", "1", "tap0"}, "invalid CIDR: 10.0.2.0/024"},
		{"CIDR that is IPv6", []string{"--cidr", "fd00::/64", "1", "tap0"}, "invalid CIDR: fd00::/64"},
		{"CIDR with a bad octet", []string{"--cidr", "300.0.2.0/24", "1", "tap0"}, "invalid network address: 300.0.2.0"},
		{"CIDR with a leading zero (inet_pton refuses it)", []string{"--cidr", "10.0.02.0/24", "1", "tap0"}, "invalid network address: 10.0.02.0"},
		{"CIDR prefix too long for host 100", []string{"--cidr", "10.0.2.0/26", "1", "tap0"}, "prefix length needs to be 1-25"},
		{"CIDR prefix 0", []string{"--cidr", "0.0.0.0/0", "1", "tap0"}, "prefix length needs to be 1-25"},
		{"CIDR with host bits", []string{"--cidr", "10.0.2.100/24", "1", "tap0"}, "CIDR needs to be a network address like 10.0.2.0/24, not like 10.0.2.100/24"},
		{"CIDR inside nsgate's fake-IP range", []string{"--cidr", "198.18.5.0/24", "1", "tap0"}, "--cidr 198.18.5.0/24 overlaps nsgate's fake-IP range 198.18.0.0/15: choose another network"},
		{"CIDR containing the fake-IP range", []string{"--cidr", "128.0.0.0/1", "1", "tap0"}, "--cidr 128.0.0.0/1 overlaps nsgate's fake-IP range 198.18.0.0/15: choose another network"},
		{"--macaddress without -c", []string{"--macaddress", "02:00:00:00:00:01", "1", "tap0"}, "--macaddr cannot be specified when --configure or -c is not specified"},
		{"--macaddress not hex", []string{"-c", "--macaddress", "zz", "1", "tap0"}, `"zz" is an invalid MAC address: it must have 6 bytes, each byte separated by a ':'`},
		{"--macaddress with five bytes", []string{"-c", "--macaddress", "02:00:00:00:01", "1", "tap0"}, `"02:00:00:00:01" is an invalid MAC address: it must have 6 bytes, each byte separated by a ':'`},
		{"--macaddress with seven bytes", []string{"-c", "--macaddress", "02:00:00:00:00:01:02", "1", "tap0"}, `"02:00:00:00:00:01:02" is an invalid MAC address: it must have 6 bytes, each byte separated by a ':'`},
		{"--macaddress byte above 255", []string{"-c", "--macaddress", "100:1:2:3:4:5", "1", "tap0"}, `"100:1:2:3:4:5" is an invalid MAC address: each byte must be one or two hex digits`},
		{"--macaddress multicast", []string{"-c", "--macaddress", "01:00:5e:00:00:01", "1", "tap0"}, `"01:00:5e:00:00:01" is an invalid MAC address: it is a multicast address; a TAP needs a unicast one`},
		{"--macaddress all zeros", []string{"-c", "--macaddress", "0:0:0:0:0:0", "1", "tap0"}, `"0:0:0:0:0:0" is an invalid MAC address: it is all zeros`},
		{"unknown target type", []string{"--target-type=foo", "1", "tap0"}, `--target-type must be either "netns" or "bess"`},
		{"bess conflicts with -c", []string{"--target-type=bess", "-c", "/tmp/bess.sock"}, "--configure conflicts with --target-type=bess"},
		{"bess conflicts with --netns-type", []string{"--target-type=bess", "--netns-type=path", "/tmp/bess.sock"}, "--netns-type conflicts with --target-type=bess"},
		{"bess conflicts with --userns-path", []string{"--target-type=bess", "--userns-path=/proc/1/ns/user", "/tmp/bess.sock"}, "--userns-path conflicts with --target-type=bess"},
		{"bess itself is not served", []string{"--target-type=bess", "/tmp/bess.sock"}, "--target-type=bess is not supported by nsgate: it serves network namespaces only (--target-type=netns)"},
		{"unknown netns type (1.2.0 would take it as path)", []string{"--netns-type=foo", "1", "tap0"}, `--netns-type must be "pid", "path" or "tapfd", not "foo"`},
		{"tapfd cannot be configured", []string{"--netns-type=tapfd", "-c", "5"}, "--configure conflicts with --netns-type=tapfd: the TAP device is already open, nothing is configured"},
		{"tapfd without its FD", []string{"--netns-type=tapfd"}, "missing operand: FD (usage: slirp4netns --netns-type=tapfd [OPTION]... FD)"},
		{"tapfd FD not a number", []string{"--netns-type=tapfd", "tap0"}, "FD must be a non-negative integer"},
		{"unknown long option", []string{"--foo", "1", "tap0"}, "unrecognized option '--foo'"},
		{"unknown short option", []string{"-x", "1", "tap0"}, "invalid option -- 'x'"},
		{"unknown short option inside a cluster", []string{"-cz", "1", "tap0"}, "invalid option -- 'z'"},
		{"ambiguous abbreviation", []string{"--dis", "1", "tap0"}, "option '--dis' is ambiguous; possibilities: '--disable-host-loopback' '--disable-dns'"},
		{"ambiguous abbreviation of three", []string{"--en", "1", "tap0"}, "option '--en' is ambiguous; possibilities: '--enable-ipv6' '--enable-sandbox' '--enable-seccomp'"},
		{"long option missing its argument at the end", []string{"1", "tap0", "--mtu"}, "option '--mtu' requires an argument"},
		{"abbreviated long option missing its argument: the full name is reported", []string{"1", "tap0", "--api"}, "option '--api-socket' requires an argument"},
		{"short option missing its argument at the end", []string{"1", "tap0", "-e"}, "option requires an argument -- 'e'"},
		{"argument given to a flag", []string{"--help=1"}, "option '--help' doesn't allow an argument"},
		{"argument given to an abbreviated flag", []string{"--conf=yes", "1", "tap0"}, "option '--configure' doesn't allow an argument"},
		{"API socket path too long for sun_path", []string{"-a", long, "1", "tap0"}, "the specified API socket path is too long (>= 108)"},
		{"API socket path empty", []string{"--api-socket=", "1", "tap0"}, "the API socket path is empty"},
		{"TAPNAME too long for IFNAMSIZ", []string{"1", "tap0123456789abcd"}, `invalid TAPNAME "tap0123456789abcd": interface names have at most 15 bytes`},
		{"TAPNAME with a slash", []string{"1", "tap/0"}, `invalid TAPNAME "tap/0": interface names cannot contain '/'`},
		{"TAPNAME empty", []string{"1", ""}, `invalid TAPNAME "": empty interface name`},
		{"IPv6 address given to --outbound-addr", []string{"--outbound-addr=2001:db8::1", "1", "tap0"}, `--outbound-addr "2001:db8::1": expected an IPv4 address or an interface name`},
		{"IPv4 address given to --outbound-addr6", []string{"--outbound-addr6=192.0.2.1", "1", "tap0"}, `--outbound-addr6 "192.0.2.1": expected an IPv6 address or an interface name`},
		{"bad interface name for --outbound-addr", []string{"--outbound-addr=not an if", "1", "tap0"}, `--outbound-addr "not an if": expected an IPv4 address or an interface name`},
		{"empty --userns-path", []string{"--userns-path=", "1", "tap0"}, "userns path doesn't exist: (empty)"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			c, err := ParseArgs(tt.args)
			if err == nil {
				t.Fatalf("ParseArgs(%q) = %+v, want error %q", tt.args, c, tt.want)
			}
			if err.Error() != tt.want {
				t.Fatalf("ParseArgs(%q) error\n got %q\nwant %q", tt.args, err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestConfigAddresses(t *testing.T) {
	tests := []struct {
		why                 string
		args                []string
		guest, gateway, dns string
		guestPrefix         string
	}{
		{"slirp4netns's defaults", []string{"1", "tap0"}, "10.0.2.100", "10.0.2.2", "10.0.2.3", "10.0.2.100/24"},
		{"slirp4netns's cidr test: 10.0.135.128/25 gives guest .228", []string{"--cidr=10.0.135.128/25", "1", "tap0"}, "10.0.135.228", "10.0.135.130", "10.0.135.131", "10.0.135.228/25"},
		{"Podman's cidr option", []string{"--cidr=10.9.0.0/24", "1", "tap0"}, "10.9.0.100", "10.9.0.2", "10.9.0.3", "10.9.0.100/24"},
		{"a /16", []string{"--cidr=172.20.0.0/16", "1", "tap0"}, "172.20.0.100", "172.20.0.2", "172.20.0.3", "172.20.0.100/16"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			c, err := ParseArgs(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Guest().String(); got != tt.guest {
				t.Errorf("Guest = %s, want %s", got, tt.guest)
			}
			if got := c.Gateway().String(); got != tt.gateway {
				t.Errorf("Gateway = %s, want %s", got, tt.gateway)
			}
			if got := c.DNS().String(); got != tt.dns {
				t.Errorf("DNS = %s, want %s", got, tt.dns)
			}
			if got := c.GuestPrefix().String(); got != tt.guestPrefix {
				t.Errorf("GuestPrefix = %s, want %s", got, tt.guestPrefix)
			}
			if c.Prefix6().String() != "fd00::/64" || c.Guest6().String() != "fd00::100" ||
				c.Gateway6().String() != "fd00::2" || c.DNS6().String() != "fd00::3" {
				t.Errorf("IPv6 plan = %s %s %s %s", c.Prefix6(), c.Guest6(), c.Gateway6(), c.DNS6())
			}
		})
	}
	// The zero Config falls back to the default plan rather than panicking.
	var z Config
	if z.Guest().String() != "10.0.2.100" {
		t.Errorf("zero Config Guest = %s", z.Guest())
	}
}

func TestNetnsName(t *testing.T) {
	tests := []struct {
		why  string
		args []string
		want string
	}{
		{"Podman's netns path", []string{"--netns-type=path", podmanNetns, "tap0"}, "netns-726967b5-3a49-ad08-8816-e64cde446de2"},
		{"a trailing slash", []string{"--netns-type=path", "/run/netns/x/", "tap0"}, "x"},
		{"a relative path", []string{"--netns-type=path", "ns1", "tap0"}, "ns1"},
		{"the root", []string{"--netns-type=path", "/", "tap0"}, "netns"},
		{"dot-dot", []string{"--netns-type=path", "/run/..", "tap0"}, "netns"},
		{"a PID", []string{"4242", "tap0"}, "pid-4242"},
		// Every /proc/PID/ns/net path ends in "net": named by its PID, so
		// that two such helpers do not share one log.
		{"a process's namespace by path", []string{"--netns-type=path", "/proc/4242/ns/net", "tap0"}, "pid-4242"},
		{"a TAP fd", []string{"--netns-type=tapfd", "5"}, "tapfd-5"},
	}
	for _, tt := range tests {
		c, err := ParseArgs(tt.args)
		if err != nil {
			t.Fatalf("%s: %v", tt.why, err)
		}
		if got := c.NetnsName(); got != tt.want {
			t.Errorf("%s: NetnsName() = %q, want %q", tt.why, got, tt.want)
		}
	}
}

func TestCLong(t *testing.T) {
	tests := []struct {
		why string
		in  string
		n   int64
		ok  bool
	}{
		{"plain", "42", 42, true},
		{"leading spaces and tab", " \t42", 42, true},
		{"plus sign", "+7", 7, true},
		{"minus sign", "-7", -7, true},
		{"empty", "", 0, false},
		{"sign only", "-", 0, false},
		{"trailing space is garbage", "42 ", 0, false},
		{"int64 max", "9223372036854775807", 9223372036854775807, true},
		{"int64 min", "-9223372036854775808", -9223372036854775808, true},
		{"int64 max + 1", "9223372036854775808", 0, false},
		{"very long", "123456789012345678901234567890", 0, false},
	}
	for _, tt := range tests {
		n, ok := cLong(tt.in)
		if n != tt.n || ok != tt.ok {
			t.Errorf("%s: cLong(%q) = %d, %v; want %d, %v", tt.why, tt.in, n, ok, tt.n, tt.ok)
		}
	}
}

// FuzzParseArgs checks that any command line either parses into a
// consistent Config or fails with one line, and never panics.
func FuzzParseArgs(f *testing.F) {
	f.Add("--disable-host-loopback\x00--mtu=65520\x00-c\x00-e\x003\x00-r\x004\x00--netns-type=path\x00/x\x00tap0")
	f.Add("-c6e3\x00--cidr\x0010.0.135.128/25\x001\x00tap0")
	f.Add("--netns-type=tapfd\x005")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		c, err := ParseArgs(args)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if c.Help || c.Version {
			return
		}
		if c.MTU < MinMTU || c.MTU > MaxMTU {
			t.Fatalf("MTU %d out of range", c.MTU)
		}
		if !c.CIDR.IsValid() || c.CIDR.Bits() < 1 || c.CIDR.Bits() > 25 || c.CIDR.Masked() != c.CIDR {
			t.Fatalf("bad CIDR %s", c.CIDR)
		}
		if !c.CIDR.Contains(c.Guest()) || !c.CIDR.Contains(c.Gateway()) || !c.CIDR.Contains(c.DNS()) {
			t.Fatalf("plan outside %s", c.CIDR)
		}
		switch c.NetnsType {
		case NetnsPID:
			if c.PID <= 0 || c.TapName == "" {
				t.Fatalf("pid target %+v", c)
			}
		case NetnsPath:
			if c.Target == "" || c.TapName == "" {
				t.Fatalf("path target %+v", c)
			}
		case NetnsTapFD:
			if c.TapFD < 0 || c.Configure {
				t.Fatalf("tapfd target %+v", c)
			}
		default:
			t.Fatalf("netns type %q", c.NetnsType)
		}
		if c.MAC != "" && !c.Configure {
			t.Fatal("MAC without -c")
		}
		if n := c.NetnsName(); n == "" || n == "." || n == ".." || strings.Contains(n, "/") {
			t.Fatalf("NetnsName %q", n)
		}
	})
}
