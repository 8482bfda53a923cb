package netstack

import "github.com/nsgate/nsgate/netplan"

// Network is the worker's address plan: one IPv4 and one IPv6 prefix, the
// gateway host 2, the DNS server host 3, the worker host 100 (IPv4) and
// ::100 (IPv6) of each. It is netplan.Plan, the one plan every mode shares;
// the zero value means netplan.Default().
type Network = netplan.Plan
