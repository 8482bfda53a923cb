package netstack

import (
	"net/netip"
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/policy"
)

// The default plan's prefixes and addresses as strings, for the tests.
// They are derived from netplan.Default, the one place the plan is
// written down; TestNetwork pins them to slirp4netns's values.
var (
	DefaultPrefix4 = netplan.Default().Prefix4.String()
	DefaultPrefix6 = netplan.Default().Prefix6.String()

	Guest4   = netplan.Default().Guest4().String()
	Gateway4 = netplan.Default().Gateway4().String()
	DNS4     = netplan.Default().DNS4().String()

	Guest6   = netplan.Default().Guest6().String()
	Gateway6 = netplan.Default().Gateway6().String()
	DNS6     = netplan.Default().DNS6().String()
)

// TestNewRefusesBadNetwork: New checks the plan (netplan.Plan.Check)
// before it builds anything.
func TestNewRefusesBadNetwork(t *testing.T) {
	tests := []struct {
		why  string
		net  Network
		want string
	}{
		{"a /26 has no host 100", Network{Prefix4: netip.MustParsePrefix("10.0.2.0/26")}, "want an IPv4 prefix of /25 or shorter"},
		{"an IPv6 prefix too long for ::100", Network{Prefix6: netip.MustParsePrefix("fd00::/120")}, "an IPv6 prefix of /112 or shorter"},
		{"a subnet inside the fake-IP pool would make workers look like names", Network{Prefix4: netip.MustParsePrefix("198.18.0.0/24")}, "overlaps nsgate's fake-IP range"},
	}
	for _, tt := range tests {
		g, err := New(Config{Link: channel.New(1, 1500, ""), Policy: policy.DenyAll, Network: tt.net})
		if err == nil {
			g.Close()
			t.Errorf("%s: New accepted %v", tt.why, tt.net)
			continue
		}
		if !strings.HasPrefix(err.Error(), "netstack: bad network") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error %q, want netstack: bad network ... %s", tt.why, err, tt.want)
		}
	}
}
