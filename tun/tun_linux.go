package tun

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// EndpointOptions configure NewEndpoint.
type EndpointOptions struct {
	// MTU is the link MTU the gateway's stack is told (the device's own
	// MTU is set on the worker's side, by Configure).
	MTU uint32
	// TAP says the descriptor is a TAP device: Ethernet frames, with ARP
	// and neighbour discovery. False: a TUN device (IP packets).
	TAP bool
	// MAC is the gateway's own hardware address on a TAP device (frames
	// to another unicast address are dropped); ignored for a TUN.
	MAC net.HardwareAddr
}

// NewEndpoint wraps a TUN (or TAP, see EndpointOptions.TAP) descriptor in
// nsgate's gVisor link endpoint (see Endpoint). The endpoint does not take
// ownership of fd: it works on a duplicate, and the caller closes fd once
// the stack using the endpoint has been closed.
//
// When fd's device carries virtio-net headers (IFF_VNET_HDR, which Open
// sets), NewEndpoint turns on the device's checksum and segmentation
// offloads (TUNSETOFFLOAD). The environment variable NSGATE_TUN_OFFLOAD
// overrides that for measurements: "off" leaves every offload off, "csum"
// enables checksum offload only, "tso" leaves UDP segmentation off. And
// NSGATE_TUN_TXQUEUE=0 makes writes synchronous (no transmit queue).
func NewEndpoint(fd int, opts EndpointOptions) (stack.LinkEndpoint, error) {
	o := endpointConfig{mtu: opts.MTU, ethernet: opts.TAP, syncWrite: os.Getenv("NSGATE_TUN_TXQUEUE") == "0"}
	if opts.TAP && len(opts.MAC) == 6 {
		o.mac = tcpipLinkAddress(opts.MAC)
	}
	if flags, err := deviceFlags(fd); err == nil && flags&unix.IFF_VNET_HDR != 0 {
		o.vnet = true
		tso, err := enableOffloads(fd, os.Getenv("NSGATE_TUN_OFFLOAD"))
		if err != nil {
			return nil, fmt.Errorf("tun endpoint: %w", err)
		}
		o.offload = tso
	}
	return newEndpoint(fd, o)
}

// CloseDead closes fd, the gateway's last descriptor of the worker's TUN
// device, once nothing lives in the worker's network namespace any more
// (its init has exited). Closed as it is, the last descriptor of a device
// unregisters it there and then, and that waits for an RCU barrier: 15
// to 25 ms of every `nsgate run`'s exit (docs/performance.md, "Start-up").
// Made persistent first, the device outlives the descriptor for as long as
// its namespace does, and the namespace, which only the descriptor kept,
// is torn down by the kernel's own cleanup worker, device and all, without
// this process waiting for it. Nothing can attach to the device in
// between: no process is left in that namespace, and no name reaches it.
func CloseDead(fd int) error {
	unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1) // best effort: else a slower close
	return unix.Close(fd)
}
