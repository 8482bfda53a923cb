package netstack

import "gvisor.dev/gvisor/pkg/tcpip"

// The buffer budget of the worker's TCP endpoints. A flow whose worker
// never reads (its window closed) or whose upstream never reads keeps its
// data in the gateway's stack, up to the endpoint's buffers (left alone,
// gVisor grows a send buffer up to tcpSendBufMax and a receive buffer up
// to tcpRecvBufMax). Only bufferedFlows flows at a time get large buffers:
// a send buffer of bufferedSendBuf and a receive buffer that grows with the
// flow's rate from smallFlowBuf (the forwarder's initial window) up to
// tcpRecvBufMax. The others keep smallFlowBuf each way, which still moves
// 15-35 MB/s on a local link. So a worker holding many stalled flows makes
// nsgate hold at most bufferedFlows × (bufferedSendBuf + tcpRecvBufMax) plus
// 2 × smallFlowBuf per further flow (16 × 8 MiB + 16,368 × 32 KiB, about
// 640 MiB, at the default --max-flows), not up to 14 MiB per flow.
//
// The gateway's other TCP endpoints (inbound connections, DNS over TCP)
// keep the stack's defaults: buffers of smallFlowBuf that grow only with
// the flow's rate, so a stalled inbound connection holds about 100 KiB
// (TestStalledInboundBoundsHeldBytes; 1 MiB or more before), within
// inbound's own bound on connections.
//
// Every flow starts with a receive window of smallFlowBuf, so that one
// given small buffers later was never offered a larger window: a window
// taken back (gVisor never moves its right edge back) made the worker send
// into a buffer with no room, and wait for retransmissions.
//
// bufferedSendBuf is a large flow's send buffer, toward the worker: with
// 1 MiB a single download moved about 15% less than with the stack's
// growing buffer (9.5 against 11.3 Gbit/s in one bench run); 2 MiB moved
// as much (11.1), and it caps what a stalled download holds.
const (
	bufferedFlows   = 16
	bufferedSendBuf = 2 << 20
	smallFlowBuf    = 16 << 10
)

// sizeBuffers sets a new worker endpoint's buffers: large ones if fewer
// than bufferedFlows flows hold them (it reports true; the caller gives
// the slot back when the flow ends), small ones otherwise. An explicit
// size also turns off gVisor's growing of that buffer.
func (g *Gateway) sizeBuffers(ep tcpip.Endpoint) bool {
	o := ep.SocketOptions()
	if tryAcquire(&g.bufferedFlows, bufferedFlows) {
		o.SetSendBufferSize(bufferedSendBuf, true)
		return true
	}
	o.SetSendBufferSize(smallFlowBuf, true)
	// The size it already has; setting it stops it growing.
	o.SetReceiveBufferSize(smallFlowBuf, true)
	return false
}
