package netstack

// The buffer budget of the worker's TCP endpoints. A flow whose worker
// never reads (its window closed) or whose upstream never reads keeps its
// data in the gateway's stack, up to the endpoint's send or receive
// buffer. Only bufferedFlows flows at a time get the large buffers
// (tcpBufDefault, the receive buffer growing with the flow's rate); the
// others get smallFlowBuf each way, so a worker holding many stalled
// flows makes nsgate hold about bufferedFlows MiB plus smallFlowBuf per
// flow each way, not a megabyte or more per flow.
const (
	bufferedFlows = 32
	smallFlowBuf  = 64 << 10
)
