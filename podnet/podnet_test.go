package podnet

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/policy"
)

func TestPolicyPath(t *testing.T) {
	for _, tc := range []struct {
		why    string
		env    map[string]string
		exists []string
		want   string
	}{
		{"$NSGATE_POLICY wins, even if it does not exist (then loading fails loudly)",
			map[string]string{"NSGATE_POLICY": "/p/explicit.yaml", "XDG_CONFIG_HOME": "/cfg"},
			[]string{"/cfg/nsgate/policy.yaml", SystemPolicy}, "/p/explicit.yaml"},
		{"then the user's XDG config",
			map[string]string{"XDG_CONFIG_HOME": "/cfg", "HOME": "/home/u"},
			[]string{"/cfg/nsgate/policy.yaml", SystemPolicy}, "/cfg/nsgate/policy.yaml"},
		{"XDG_CONFIG_HOME unset means $HOME/.config",
			map[string]string{"HOME": "/home/u"},
			[]string{"/home/u/.config/nsgate/policy.yaml"}, "/home/u/.config/nsgate/policy.yaml"},
		{"a missing user policy falls through to the system one",
			map[string]string{"XDG_CONFIG_HOME": "/cfg"},
			[]string{SystemPolicy}, SystemPolicy},
		{"nothing anywhere: deny-all",
			map[string]string{"XDG_CONFIG_HOME": "/cfg"}, nil, ""},
		{"no HOME and no XDG_CONFIG_HOME: only the system policy",
			map[string]string{}, []string{"/.config/nsgate/policy.yaml"}, ""},
	} {
		getenv := func(k string) string { return tc.env[k] }
		exists := func(p string) bool {
			for _, e := range tc.exists {
				if e == p {
					return true
				}
			}
			return false
		}
		if got := PolicyPath(getenv, exists); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.why, got, tc.want)
		}
	}
}

func TestGatewayMAC(t *testing.T) {
	// libslirp's scheme: 52:55 and the IPv4 address.
	if got := GatewayMAC(netip.MustParseAddr("10.0.2.2")).String(); got != "52:55:0a:00:02:02" {
		t.Errorf("gateway MAC %s, want 52:55:0a:00:02:02", got)
	}
}

func TestNotInForce(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		why, yaml string
		want      []string // substrings; none: ""
	}{
		{"network rules only", "version: 1\nallow:\n  - host: app.test\n    ports: [443]\n", nil},
		{"exec.allow", "version: 1\nexec:\n  allow: [/usr/bin/]\n", []string{"exec"}},
		{"filesystem.hide", "version: 1\nfilesystem:\n  hide: [" + dir + "]\n", []string{"filesystem"}},
		{"filesystem.write and exec", "version: 1\nexec:\n  allow: [/usr/bin/]\nfilesystem:\n  write: [" + dir + "]\n", []string{"exec", "filesystem"}},
	} {
		p, err := policy.Parse("p.yaml", []byte(tc.yaml))
		if err != nil {
			t.Fatalf("%s: %v", tc.why, err)
		}
		got := NotInForce(p)
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: NotInForce %q, want \"\"", tc.why, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: NotInForce %q, want it to name %s", tc.why, got, w)
			}
		}
	}
	if got := NotInForce(nil); got != "" {
		t.Errorf("deny-all (nil policy): %q, want \"\"", got)
	}
}
