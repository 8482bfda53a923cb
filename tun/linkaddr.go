package tun

import (
	"net"

	"gvisor.dev/gvisor/pkg/tcpip"
)

func tcpipLinkAddress(mac net.HardwareAddr) tcpip.LinkAddress {
	return tcpip.LinkAddress(string(mac))
}
