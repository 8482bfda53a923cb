package slirp

import (
	"regexp"
	"strings"
	"testing"
)

func TestHelpListsEveryFlagPodmanGreps(t *testing.T) {
	h := Help()
	tests := []struct {
		why  string
		flag string
	}{
		{"Podman passes --disable-host-loopback only if --help shows it", "--disable-host-loopback"},
		{"Podman passes --mtu=65520 only if --help shows --mtu", "--mtu"},
		{"Podman passes --enable-sandbox (and CLONE_NEWNS) only if shown", "--enable-sandbox"},
		{"Podman passes --enable-seccomp only if shown", "--enable-seccomp"},
		{"Podman fails with 'cidr not supported' unless shown", "--cidr"},
		{"Podman fails with 'enable_ipv6 not supported' (on by default since 4.4) unless shown", "--enable-ipv6"},
		{"Podman fails with 'outbound_addr not supported' unless shown", "--outbound-addr"},
		{"Podman's outbound_addr6 needs it (newer Podman greps for it)", "--outbound-addr6"},
		{"Podman always passes --netns-type=path", "--netns-type"},
		{"rootless netns users pass --userns-path", "--userns-path"},
		{"port_handler=slirp4netns passes --api-socket", "--api-socket"},
		{"Podman passes -e (--exit-fd)", "--exit-fd"},
		{"Podman passes -r (--ready-fd)", "--ready-fd"},
		{"docs/podman.md names --disable-dns", "--disable-dns"},
		{"docs/podman.md names --macaddress", "--macaddress"},
		{"-c", "--configure"},
		{"-h", "--help"},
		{"-v", "--version"},
		{"--target-type is accepted (netns)", "--target-type"},
	}
	for _, tt := range tests {
		if !strings.Contains(h, tt.flag) {
			t.Errorf("%s: Help() lacks %q", tt.why, tt.flag)
		}
	}
	// Every option ParseArgs knows, except the deprecated aliases, is listed.
	for _, o := range options {
		if o.id == optNoHostLoopback || o.id == optCreateSandbox {
			continue
		}
		if !strings.Contains(h, "--"+o.long) {
			t.Errorf("Help() lacks --%s", o.long)
		}
		if o.short != 0 && !strings.Contains(h, "-"+string(o.short)+", --"+o.long) {
			t.Errorf("Help() lacks -%c, --%s", o.short, o.long)
		}
	}
	if !strings.Contains(h, "nsgate") {
		t.Error("Help() does not say it is nsgate")
	}
	if !strings.HasPrefix(h, "Usage: ") || !strings.HasSuffix(h, "\n") {
		t.Errorf("Help() layout: %q", h)
	}
}

func TestVersion(t *testing.T) {
	v := Version("nsgate v1.2.3 (go1.26.3, gvisor v0.0.0, linux/amd64)")
	lines := strings.Split(strings.TrimSuffix(v, "\n"), "\n")
	// runc-style first line, as slirp4netns prints it; "+nsgate" is semver
	// build metadata, so a version parser still reads 1.2.0.
	if !regexp.MustCompile(`^slirp4netns version \d+\.\d+\.\d+\+nsgate$`).MatchString(lines[0]) {
		t.Errorf("first line %q", lines[0])
	}
	if lines[0] != "slirp4netns version "+CompatVersion+"+nsgate" {
		t.Errorf("first line %q", lines[0])
	}
	if len(lines) < 3 || lines[1] != "nsgate v1.2.3 (go1.26.3, gvisor v0.0.0, linux/amd64)" {
		t.Errorf("nsgate's version line missing: %q", v)
	}
	if !strings.Contains(v, "\nSLIRP_CONFIG_VERSION_MAX: 4\n") {
		t.Errorf("no SLIRP_CONFIG_VERSION_MAX line (scripts gate --disable-dns on it): %q", v)
	}
	if got := Version(""); !strings.Contains(got, "\nnsgate\n") {
		t.Errorf("Version(\"\") = %q", got)
	}
}

// TestHelpAddresses: the help text shows the default plan's addresses
// where slirp4netns shows its own, and no placeholder is left.
func TestHelpAddresses(t *testing.T) {
	h := Help()
	for _, tt := range []struct{ why, want string }{
		{"--enable-ipv6 names the IPv6 network", "-6, --enable-ipv6        enable IPv6 (fd00::/64)\n"},
		{"--cidr names its default", "--cidr=CIDR              specify network address CIDR (default=10.0.2.0/24)\n"},
		{"--disable-dns names the DNS address", "--disable-dns            disables 10.0.2.3 (or configured internal ip) to host dns redirect\n"},
	} {
		if !strings.Contains(h, tt.want) {
			t.Errorf("%s: Help() lacks %q", tt.why, tt.want)
		}
	}
	if strings.ContainsAny(h, "{}") {
		t.Errorf("Help() has a placeholder left: %q", h)
	}
}
