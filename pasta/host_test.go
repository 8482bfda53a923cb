package pasta

import (
	"net/netip"
	"strings"
	"testing"
)

// TestPlan: the container gets the host's address and gateway (pasta's
// model), DNS on the forward address and the host alias; -a/-n/-g replace
// what is copied; a host with nothing to copy gets slirp4netns's
// addresses.
func TestPlan(t *testing.T) {
	home := HostNet{Iface: "enp1s0", Addr: netip.MustParsePrefix("192.168.1.50/24"), Gateway: netip.MustParseAddr("192.168.1.1")}
	cloud := HostNet{Iface: "ens4", Addr: netip.MustParsePrefix("10.128.0.5/32"), Gateway: netip.MustParseAddr("10.128.0.1")}
	podman := []string{"--config-net", "--dns-forward", "169.254.1.1", "--netns", "/x", "--map-guest-addr", "169.254.1.2"}
	tests := []struct {
		why   string
		host  HostNet
		extra []string
		// interface, guest prefix, gateway, DNS, alias, resolv.conf's nameserver
		want string
	}{
		{"a home network: its address and gateway copied", home, nil,
			"enp1s0 192.168.1.50/24 192.168.1.1 169.254.1.1 169.254.1.2"},
		{"a /32 behind an off-link gateway", cloud, nil,
			"ens4 10.128.0.5/32 10.128.0.1 169.254.1.1 169.254.1.2"},
		{"nothing to copy (no default route): slirp4netns's addresses", HostNet{}, nil,
			"tap0 10.0.2.100/24 10.0.2.2 169.254.1.1 169.254.1.2"},
		{"-a, -n, -g and -I replace the copy", home, []string{"-a", "192.0.2.10", "-n", "28", "-g", "192.0.2.1", "-I", "eth0"},
			"eth0 192.0.2.10/28 192.0.2.1 169.254.1.1 169.254.1.2"},
	}
	for _, tt := range tests {
		c, err := ParseArgs(append(append([]string{}, podman...), tt.extra...))
		if err != nil {
			t.Fatal(err)
		}
		p, name, err := c.Plan(tt.host)
		if err != nil {
			t.Errorf("%s: %v", tt.why, err)
			continue
		}
		got := strings.Join([]string{name, p.GuestPrefix4().String(), p.Gateway4().String(), p.DNS4().String(), p.HostAlias4.String()}, " ")
		if got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.why, got, tt.want)
		}
		spec := c.TAPSpec(p, name)
		if !spec.Configure || !spec.Iface.TAP || spec.Iface.Name != name || spec.NetnsPath != "/x" || spec.Iface.MTU != DefaultMTU ||
			len(spec.Iface.Addrs) != 1 || spec.Iface.Addrs[0] != p.GuestPrefix4() || spec.Iface.Gateways[0] != p.Gateway4() {
			t.Errorf("%s: TAP spec %+v", tt.why, spec)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	home := HostNet{Iface: "eth0", Addr: netip.MustParsePrefix("192.168.1.50/24"), Gateway: netip.MustParseAddr("192.168.1.1")}
	for _, tt := range []struct {
		why  string
		args []string
		host HostNet
		want string
	}{
		{"the DNS forward address is the host's gateway", []string{"--dns-forward", "192.168.1.1"}, home, "must differ"},
		{"the alias is inside the host's network", []string{"--map-guest-addr", "192.168.1.9"}, home, "bad host alias"},
		{"a host address in nsgate's fake-IP range", nil,
			HostNet{Iface: "eth0", Addr: netip.MustParsePrefix("198.18.3.4/24"), Gateway: netip.MustParseAddr("198.18.3.1")}, "fake-IP range"},
	} {
		c, err := ParseArgs(append([]string{"--netns", "/x"}, tt.args...))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Plan(tt.host); err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "the container's addresses") {
			t.Errorf("%s: %v, want %q", tt.why, err, tt.want)
		}
	}
	// A PID target joins the process's user namespace.
	c, _ := ParseArgs([]string{"77"})
	p, name, _ := c.Plan(home)
	if s := c.TAPSpec(p, name); s.UsernsPath != "/proc/77/ns/user" || s.NetnsPath != "/proc/77/ns/net" || s.Configure {
		t.Errorf("PID target: %+v", s)
	}
}

func TestHelpAndVersion(t *testing.T) {
	h := Help()
	for _, opt := range []string{"--config-net", "--netns", "--dns-forward", "--map-guest-addr", "--pid", "--tcp-ports", "--udp-ports", "--no-map-gw", "--quiet"} {
		if !strings.Contains(h, opt) {
			t.Errorf("--help does not mention %s", opt)
		}
	}
	if v := Version("nsgate 1.2.3"); !strings.HasPrefix(v, "pasta (nsgate 1.2.3)\n") {
		t.Errorf("version %q", v)
	}
}
