package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/podnet"
	"github.com/nsgate/nsgate/slirp"
)

func mustParse(t *testing.T, args ...string) slirp.Config {
	t.Helper()
	cfg, err := slirp.ParseArgs(args)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", args, err)
	}
	return cfg
}

func TestSlirpAuditPath(t *testing.T) {
	getenv := func(k string) string { return map[string]string{podnet.EnvAuditDir: "/var/log/nsgate"}[k] }
	for _, tc := range []struct {
		why  string
		args []string
		want string
	}{
		{"Podman's netns path names the file after the container's netns",
			[]string{"-c", "--netns-type=path", "/run/user/1000/netns/netns-1234", "tap0"}, "/var/log/nsgate/netns-1234.jsonl"},
		{"a PID target", []string{"4242", "tap0"}, "/var/log/nsgate/pid-4242.jsonl"},
	} {
		if got := podnet.AuditPath(getenv, mustParse(t, tc.args...).NetnsName()); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.why, got, tc.want)
		}
	}
	if got := podnet.AuditPath(func(string) string { return "" }, mustParse(t, "1", "tap0").NetnsName()); got != "" {
		t.Errorf("no NSGATE_AUDIT_DIR: got %q, want no file (human lines on stderr)", got)
	}
}

func TestSlirpTAPSpec(t *testing.T) {
	for _, tc := range []struct {
		why                string
		args               []string
		netns, userns      string
		addrs, gws         string
		mtu                uint32
		configure, hasIPv6 bool
		mac, tapName       string
	}{
		{"Podman 4.3's call: path target, no userns (the netns owner is joined)",
			[]string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6",
				"-c", "-e", "3", "-r", "4", "--netns-type=path", "/run/user/1000/netns/netns-x", "tap0"},
			"/run/user/1000/netns/netns-x", "", "10.0.2.100/24 fd00::100/64", "10.0.2.2 fd00::2", 65520, true, true, "", "tap0"},
		{"a PID joins the PID's user namespace, as slirp4netns does",
			[]string{"-c", "4242", "tap1"}, "/proc/4242/ns/net", "/proc/4242/ns/user", "10.0.2.100/24", "10.0.2.2", 1500, true, false, "", "tap1"},
		{"--userns-path wins over the PID's",
			[]string{"--userns-path=/run/userns", "4242", "tap0"}, "/proc/4242/ns/net", "/run/userns", "10.0.2.100/24", "10.0.2.2", 1500, false, false, "", "tap0"},
		{"--cidr moves guest and gateway; --macaddress sets the guest MAC",
			[]string{"-c", "--cidr=10.0.135.128/25", "--macaddress=02:11:22:33:44:55", "1", "tap0"},
			"/proc/1/ns/net", "/proc/1/ns/user", "10.0.135.228/25", "10.0.135.130", 1500, true, false, "02:11:22:33:44:55", "tap0"},
	} {
		spec := slirpTAPSpec(mustParse(t, tc.args...))
		var addrs, gws []string
		for _, a := range spec.Iface.Addrs {
			addrs = append(addrs, a.String())
		}
		for _, g := range spec.Iface.Gateways {
			gws = append(gws, g.String())
		}
		if spec.NetnsPath != tc.netns || spec.UsernsPath != tc.userns {
			t.Errorf("%s: netns %q userns %q, want %q %q", tc.why, spec.NetnsPath, spec.UsernsPath, tc.netns, tc.userns)
		}
		if strings.Join(addrs, " ") != tc.addrs || strings.Join(gws, " ") != tc.gws {
			t.Errorf("%s: addrs %v via %v, want %s via %s", tc.why, addrs, gws, tc.addrs, tc.gws)
		}
		if spec.Iface.MTU != tc.mtu || spec.Configure != tc.configure || !spec.Iface.TAP ||
			spec.Iface.MAC != tc.mac || spec.Iface.Name != tc.tapName {
			t.Errorf("%s: got %+v", tc.why, spec)
		}
	}
}

func TestSlirp4netnsCommand(t *testing.T) {
	for _, tc := range []struct {
		why      string
		args     []string
		code     int
		out, err string
	}{
		{"--help lists the flags Podman greps for", []string{"slirp4netns", "--help"}, 0, "--enable-seccomp", ""},
		{"--version has slirp4netns's first line", []string{"slirp4netns", "--version"}, 0, "slirp4netns version 1.2.0+nsgate\nnsgate ", ""},
		{"a bad command line is exit 1 and one line", []string{"slirp4netns", "--mtu=1", "1", "tap0"}, 1, "", "nsgate slirp4netns: "},
		{"a missing target too", []string{"slirp4netns", "-c"}, 1, "", "missing operand"},
	} {
		var out, errb bytes.Buffer
		code := Main(tc.args, strings.NewReader(""), &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%s: exit %d stdout %q stderr %q", tc.why, code, out.String(), errb.String())
		}
		if tc.code != 0 && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
			t.Errorf("%s: stderr is more than one line: %q", tc.why, errb.String())
		}
	}
}
