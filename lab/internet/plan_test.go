package internet

import "testing"

// TestGatewayPlan: the worker-side addresses the lab attacks are those of
// `nsgate run` (the default address plan), which the catalogue's texts
// spell out.
func TestGatewayPlan(t *testing.T) {
	tests := []struct {
		why, got, want string
	}{
		{"the worker's own address (the browser relay listens there)", GuestV4, "10.0.2.100"},
		{"the gateway, slirp's path to host loopback", GatewayV4, "10.0.2.2"},
		{"the gateway's DNS server", DNSV4, "10.0.2.3"},
		{"the gateway over IPv6", GatewayV6, "fd00::2"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %s, want %s", tt.why, tt.got, tt.want)
		}
	}
}
