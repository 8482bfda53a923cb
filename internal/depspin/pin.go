// Package depspin keeps the module's planned dependencies in go.mod while the
// packages that use them are being written. Delete it once each is imported
// for real.
package depspin

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/elastic/go-seccomp-bpf"
	_ "github.com/landlock-lsm/go-landlock/landlock"
	_ "github.com/vishvananda/netlink"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/net/dns/dnsmessage"
	_ "golang.org/x/net/idna"
	_ "golang.org/x/sys/unix"
	_ "gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	_ "gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	_ "gvisor.dev/gvisor/pkg/tcpip/link/sniffer"
	_ "gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	_ "gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	_ "gvisor.dev/gvisor/pkg/tcpip/stack"
	_ "gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	_ "gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	_ "gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)
