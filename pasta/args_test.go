package pasta

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/inbound"
)

const nsPath = "/run/user/1001/netns/netns-0b4a2bd1-5d43-7d6c-3a19-1f4c3e2a9d10"

// TestPodmanArgs: every argument set Podman 5.0 to 6.x builds (containers/
// common createPastaArgs), with and without published ports, parses into
// the same helper.
func TestPodmanArgs(t *testing.T) {
	f := strings.Fields
	tests := []struct {
		why      string
		args     []string
		tcp      []string // Listen() -> guest port
		dns      string
		alias    string
		pidFile  string
		quiet    bool
		debugged bool
	}{
		{"5.3-5.8 and 6.x, -p 127.0.0.1:18080:80 (seen from Podman 5.4.2)",
			f("--config-net -t 127.0.0.1/18080-18080:80-80 --dns-forward 169.254.1.1 -u none -T none -U none --no-map-gw --quiet --netns " + nsPath + " --map-guest-addr 169.254.1.2"),
			[]string{"127.0.0.1:18080/tcp>80"}, "169.254.1.1", "169.254.1.2", "", true, false},
		{"5.3-5.8 and 6.x, no ports (seen from Podman 5.4.2)",
			f("--config-net --dns-forward 169.254.1.1 -t none -u none -T none -U none --no-map-gw --quiet --netns " + nsPath + " --map-guest-addr 169.254.1.2"),
			nil, "169.254.1.1", "169.254.1.2", "", true, false},
		{"5.3+, -p 8080:80 -p 9000-9001:9000-9001 (no host address: all of the host's)",
			f("--config-net -t 8080-8080:80-80 -t 9000-9001:9000-9001 --dns-forward 169.254.1.1 -u none -T none -U none --no-map-gw --quiet --netns " + nsPath + " --map-guest-addr 169.254.1.2"),
			[]string{"0.0.0.0:8080/tcp>80", "0.0.0.0:9000/tcp>9000", "0.0.0.0:9001/tcp>9001"}, "169.254.1.1", "169.254.1.2", "", true, false},
		{"5.3+ with --network pasta:--map-gw and podman --log-level=debug (no --no-map-gw, no --quiet)",
			f("--config-net --debug --dns-forward 169.254.1.1 -t none -u none -T none -U none --netns " + nsPath + " --map-guest-addr 169.254.1.2"),
			nil, "169.254.1.1", "169.254.1.2", "", false, true},
		{"5.3+ retried without --map-guest-addr (an old pasta refused it)",
			f("--config-net --dns-forward 169.254.1.1 -t none -u none -T none -U none --no-map-gw --quiet --netns " + nsPath),
			nil, "169.254.1.1", "", "", true, false},
		{"later common versions add --map-host-loopback",
			f("--config-net --dns-forward 169.254.1.1 -t none -u none -T none -U none --no-map-gw --quiet --netns " + nsPath + " --map-host-loopback 169.254.1.2"),
			nil, "169.254.1.1", "169.254.1.2", "", true, false},
		{"5.1-5.2: DNS on 169.254.0.1, no --map-guest-addr",
			f("--config-net -t 127.0.0.1/18080-18080:80-80 --dns-forward 169.254.0.1 -u none -T none -U none --no-map-gw --quiet --netns " + nsPath),
			[]string{"127.0.0.1:18080/tcp>80"}, "169.254.0.1", "", "", true, false},
		{"5.0.1-5.0.x: ports first, --quiet always",
			f("--config-net -t 127.0.0.1/18080-18080:80-80 -u none -T none -U none --no-map-gw --dns-forward 169.254.0.1 --quiet --netns " + nsPath),
			[]string{"127.0.0.1:18080/tcp>80"}, "169.254.0.1", "", "", true, false},
		{"5.0.0: --dns none instead of --dns-forward (DNS stays on the default address)",
			f("--config-net -t 127.0.0.1/18080-18080:80-80 -u none -T none -U none --no-map-gw --dns none --quiet --netns " + nsPath),
			[]string{"127.0.0.1:18080/tcp>80"}, DefaultDNS, "", "", true, false},
		{"5.0.0 without ports",
			f("--config-net -t none -u none -T none -U none --no-map-gw --dns none --quiet --netns " + nsPath),
			nil, DefaultDNS, "", "", true, false},
		{"rootless bridge networks: --pid, no ports",
			f("--config-net --pid /run/user/1001/containers/networks/rootless-netns/rootless-netns-conn.pid --dns-forward 169.254.1.1 -t none -u none -T none -U none --no-map-gw --quiet --netns /run/user/1001/containers/networks/rootless-netns/rootless-netns --map-guest-addr 169.254.1.2"),
			nil, "169.254.1.1", "169.254.1.2", "/run/user/1001/containers/networks/rootless-netns/rootless-netns-conn.pid", true, false},
		{"a user's pasta_options come first (-I, --mtu), = forms too",
			f("--config-net -I eth0 --mtu=1500 --dns-forward=169.254.1.1 -t none -u none -T none -U none --no-map-gw --quiet --netns=" + nsPath),
			nil, "169.254.1.1", "", "", true, false},
	}
	for _, tt := range tests {
		c, err := ParseArgs(tt.args)
		if err != nil {
			t.Errorf("%s: %v", tt.why, err)
			continue
		}
		var tcp []string
		for _, r := range c.TCP {
			tcp = append(tcp, r.Listen()+">"+itoa(r.GuestPort))
		}
		alias := ""
		if c.MapGuestAddr.IsValid() {
			alias = c.MapGuestAddr.String()
		}
		switch {
		case !strings.HasSuffix(c.Netns, "netns-0b4a2bd1-5d43-7d6c-3a19-1f4c3e2a9d10") && !strings.HasSuffix(c.Netns, "/rootless-netns"):
			t.Errorf("%s: netns %q", tt.why, c.Netns)
		case !c.ConfigNet || len(c.UDP) != 0 || c.Foreground:
			t.Errorf("%s: %+v", tt.why, c)
		case !slices.Equal(tcp, tt.tcp):
			t.Errorf("%s: tcp forwards %v, want %v", tt.why, tcp, tt.tcp)
		case c.DNSForward.String() != tt.dns || alias != tt.alias || c.PIDFile != tt.pidFile:
			t.Errorf("%s: dns %v alias %q pid %q", tt.why, c.DNSForward, alias, c.PIDFile)
		case c.Quiet != tt.quiet || c.Debug != tt.debugged:
			t.Errorf("%s: quiet %v debug %v", tt.why, c.Quiet, c.Debug)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestArgErrors: pasta's exit status 1 with getopt's words, which Podman
// reads (its retry looks for "unrecognized option '--map-guest-addr'").
func TestArgErrors(t *testing.T) {
	tests := []struct{ why, args, want string }{
		{"an unknown long option, in getopt's words", "--config-net --frobnicate --netns /x", "unrecognized option '--frobnicate'"},
		{"an unknown short option", "-Z --netns /x", "invalid option -- 'Z'"},
		{"a missing value at the end", "--config-net --netns", "option '--netns' requires an argument"},
		{"a missing short value", "--netns /x -t", "option requires an argument -- 't'"},
		{"a value given to a flag", "--quiet=yes --netns /x", "option '--quiet' doesn't allow an argument"},
		{"an ambiguous abbreviation", "--no-d --netns /x", "option '--no-d' is ambiguous"},
		{"no namespace", "--config-net --quiet", "no network namespace given"},
		{"a command to run", "--config-net sleep 1", "nsgate pasta runs no command"},
		{"a command with --netns", "--netns /x sleep", "nsgate pasta runs no command"},
		{"container-to-host forwards", "-T 8080 --netns /x", "-T 8080: forwarding from the container to the host's ports is not supported"},
		{"-U too", "-U 53 --netns /x", "-U 53: forwarding from the container"},
		{"automatic forwarding", "-t auto --netns /x", "-t auto: automatic forwarding is not supported"},
		{"IPv6 only", "-6 --netns /x", "nsgate pasta serves IPv4 only"},
		{"an IPv6 DNS forward", "--dns-forward fd00::1 --netns /x", "--dns-forward fd00::1: nsgate pasta serves IPv4 only"},
		{"a bad address", "--map-guest-addr 169.254.1 --netns /x", "Invalid address for --map-guest-addr: 169.254.1"},
		{"a bad MTU", "-m 70000 --netns /x", "Invalid MTU: 70000"},
		{"a bad netmask", "-n 255.0.255.0 --netns /x", "Invalid netmask: 255.0.255.0"},
		{"a bad interface name", "-I a/b --netns /x", "Invalid interface name: a/b"},
		{"a bad PID", "0", "Invalid PID: 0"},
		{"control bytes are escaped", "--bad\x1b[31m --netns /x", `unrecognized option '--bad\x1b[31m'`},
		{"--no-udp would silently change what the container can do", "--no-udp --netns /x", "--no-udp: nsgate pasta always serves UDP"},
	}
	for _, tt := range tests {
		_, err := ParseArgs(strings.Fields(tt.args))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ParseArgs(%q) = %v, want %q", tt.why, tt.args, err, tt.want)
		}
	}
}

func TestArgForms(t *testing.T) {
	c, err := ParseArgs([]string{"-qf4", "-t80", "-u", "127.0.0.1/5353:53", "-a", "192.0.2.10", "-n", "255.255.255.0", "-g", "192.0.2.1", "4242"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Quiet || !c.Foreground || c.PID != 4242 || c.Netns != "/proc/4242/ns/net" || c.NetnsName() != "pid-4242" {
		t.Errorf("clustered flags and a PID operand: %+v", c)
	}
	if len(c.TCP) != 1 || c.TCP[0] != (inbound.Rule{Proto: "tcp", HostAddr: netip.IPv4Unspecified(), HostPort: 80, GuestPort: 80}) {
		t.Errorf("-t80: %+v", c.TCP)
	}
	if len(c.UDP) != 1 || c.UDP[0].Listen() != "127.0.0.1:5353/udp" || c.UDP[0].GuestPort != 53 {
		t.Errorf("-u: %+v", c.UDP)
	}
	if c.Addr.String() != "192.0.2.10" || c.Netmask != 24 || c.Gateway.String() != "192.0.2.1" || c.MTU != DefaultMTU {
		t.Errorf("-a -n -g: %+v", c)
	}
	if c, err := ParseArgs([]string{"--netns", "/x", "--help", "--bogus"}); err != nil || !c.Help {
		t.Errorf("--help ends parsing: %+v %v", c, err)
	}
	if c, err := ParseArgs([]string{"--vers"}); err != nil || !c.Version {
		t.Errorf("--vers abbreviates --version: %+v %v", c, err)
	}
	if c, err := ParseArgs([]string{"--", "/run/netns/x"}); err != nil || c.Netns != "/run/netns/x" {
		t.Errorf("an operand after --: %+v %v", c, err)
	}
}

func TestParsePorts(t *testing.T) {
	tests := []struct {
		spec string
		want []string // Listen()>guest port, or the error
		ok   bool
	}{
		{"none", nil, true},
		{"80", []string{"0.0.0.0:80/tcp>80"}, true},
		{"127.0.0.1/18080-18080:80-80", []string{"127.0.0.1:18080/tcp>80"}, true},
		{"8000-8002:9000", []string{"0.0.0.0:8000/tcp>9000", "0.0.0.0:8001/tcp>9001", "0.0.0.0:8002/tcp>9002"}, true},
		{"22,80:8080", []string{"0.0.0.0:22/tcp>22", "0.0.0.0:80/tcp>8080"}, true},
		{"::1/8080:80", []string{"[::1]:8080/tcp>80"}, true},
		{"::ffff:127.0.0.1/8080:80", []string{"127.0.0.1:8080/tcp>80"}, true},
		{"8000-8001:9000-9002", []string{"differ in length"}, false},
		{"80-79", []string{"invalid port range 80-79"}, false},
		{"0", []string{`invalid port "0"`}, false},
		{"65536", []string{`invalid port "65536"`}, false},
		{"+80", []string{`invalid port "+80"`}, false},
		{"65535:65535-65536", []string{`invalid port "65536"`}, false},
		{"65000-65535:65500", []string{"target range past port 65535"}, false},
		{"~25", []string{"excluding ports"}, false},
		{"127.0.0.1%lo/80", []string{"binding to an interface"}, false},
		{"localhost/80", []string{`invalid address "localhost"`}, false},
		{"all", []string{"automatic forwarding"}, false},
		{"", []string{"empty port specification"}, false},
		{"1-65535", []string{"more than 1024 ports"}, false},
		{"80,", []string{`invalid port ""`}, false},
	}
	for _, tt := range tests {
		rules, err := ParsePorts("tcp", "-t", tt.spec)
		if !tt.ok {
			if err == nil || !strings.Contains(err.Error(), tt.want[0]) || !strings.HasPrefix(err.Error(), "-t ") {
				t.Errorf("ParsePorts(%q) = %v, want an error with %q", tt.spec, err, tt.want[0])
			}
			continue
		}
		var got []string
		for _, r := range rules {
			got = append(got, r.Listen()+">"+itoa(r.GuestPort))
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParsePorts(%q) = %v %v, want %v", tt.spec, got, err, tt.want)
		}
	}
	// Across options the total is bounded too.
	args := []string{"--netns", "/x"}
	for i := 0; i < 2; i++ {
		args = append(args, "-t", itoa(uint16(1000+i*600))+"-"+itoa(uint16(1599+i*600)))
	}
	if _, err := ParseArgs(args); err == nil || !strings.Contains(err.Error(), "more than 1024 ports in all") {
		t.Errorf("1200 ports over two -t: %v", err)
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("--config-net -t 127.0.0.1/18080-18080:80-80 --dns-forward 169.254.1.1 --netns /x --map-guest-addr 169.254.1.2")
	f.Add("-qt80,81:90-91 -u::1/53 4242")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseArgs(strings.Fields(s))
		if err == nil && !c.Help && !c.Version && c.Netns == "" {
			t.Fatalf("accepted without a namespace: %q", s)
		}
		if len(c.TCP)+len(c.UDP) > MaxForwards {
			t.Fatalf("%d forwards", len(c.TCP)+len(c.UDP))
		}
	})
}

// TestNoDHCP: --no-dhcp turns the helper's DHCP server off, as it does
// pasta's (Start passes it on as podnet.Config.NoDHCP); without it the
// container's TAP has one.
func TestNoDHCP(t *testing.T) {
	c, err := ParseArgs([]string{"--config-net", "--no-dhcp", "--netns", nsPath})
	if err != nil || !c.NoDHCP {
		t.Errorf("--no-dhcp: NoDHCP %v (%v), want true", c.NoDHCP, err)
	}
	for _, n := range c.Notes {
		if strings.Contains(n, "dhcp") {
			t.Errorf("--no-dhcp has an effect, but a note says %q", n)
		}
	}
	if c, err := ParseArgs([]string{"--config-net", "--netns", nsPath}); err != nil || c.NoDHCP {
		t.Errorf("no --no-dhcp: NoDHCP %v (%v), want false", c.NoDHCP, err)
	}
}

// TestNetnsNameProcPath: --netns /proc/PID/ns/net is named after the PID,
// as the PID operand is: base names alone would put every such helper in
// one "net.jsonl".
func TestNetnsNameProcPath(t *testing.T) {
	for _, tc := range []struct{ netns, want string }{
		{"/proc/4242/ns/net", "pid-4242"},
		{nsPath, "netns-0b4a2bd1-5d43-7d6c-3a19-1f4c3e2a9d10"},
		{"/proc/self/ns/net", "net"},
	} {
		c, err := ParseArgs([]string{"--netns", tc.netns})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.NetnsName(); got != tc.want {
			t.Errorf("--netns %s: NetnsName %q, want %q", tc.netns, got, tc.want)
		}
	}
}
