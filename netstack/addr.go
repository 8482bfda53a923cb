package netstack

import (
	"net/netip"

	"github.com/nsgate/nsgate/netplan"
)

// Network is the worker's address plan: one IPv4 and one IPv6 prefix, the
// gateway host 2, the DNS server host 3, the worker host 100 (IPv4) and
// ::100 (IPv6) of each. It is netplan.Plan, the one plan every mode shares;
// the zero value means DefaultNetwork.
type Network = netplan.Plan

// DefaultNetwork returns the default plan, netplan.Default.
func DefaultNetwork() Network { return netplan.Default() }

// FakePools returns the fake-IP pools where dns/ allocates the addresses
// that stand for names (netplan.Plan.FakePool4 and FakePool6).
func FakePools() (v4, v6 netip.Prefix) {
	d := netplan.Default()
	return d.FakePool4(), d.FakePool6()
}
