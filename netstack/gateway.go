// Package netstack is nsgate's data path: a gVisor TCP/IP stack on the
// worker's TUN (or TAP) link that forwards the flows the policy allows to
// the host and refuses everything else.
//
// The stack has one NIC, in promiscuous mode with spoofing on, so it
// accepts a connection to any destination and answers from that address.
// Every inbound packet first passes a filter (see filterLink): malformed
// packets are dropped and counted, ICMP other than echo to the gateway and
// IP protocols other than TCP and UDP get ICMP "administratively
// prohibited". TCP connections are decided, dialed upstream and only then
// completed (a RST otherwise); UDP flows are decided at their first
// datagram (an ICMP error otherwise). DNS to the gateway's DNS address is
// answered by Names. The package asks the policy; it never decides itself.
package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/sniffer"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/dns"
	"github.com/nsgate/nsgate/intercept"
	"github.com/nsgate/nsgate/policy"
)

// Names is the DNS side of the gateway (implemented by dns/). All methods
// must be safe for concurrent use.
type Names interface {
	// NameOf returns the name a fake address stands for, or false when a
	// is not a fake address currently allocated. It must not block.
	NameOf(a netip.Addr) (string, bool)
	// ResolveName resolves name on the host side (static hosts or
	// upstream DNS). It may block until ctx is done. The gateway puts
	// every answer through the policy and dials only an answer it
	// checked; an answer the Answer says is an upstream nsgate gateway's
	// name for the name (dns.Answer.Gateway) is checked as the name.
	ResolveName(ctx context.Context, name string) (dns.Answer, error)
	// ServeDNS answers one DNS message from the worker (tcp tells which
	// transport it came over, for truncation). msg is only valid during
	// the call; the gateway does not modify the returned slice. nil means
	// drop the query (over TCP the connection is closed).
	ServeDNS(msg []byte, tcp bool) []byte
}

// DefaultMaxFlows is the default bound on concurrent TCP flows. An idle
// flow costs the gateway about 15 KiB and one host descriptor, so the
// default bounds a worker that opens flows and holds them to a few hundred
// MiB (docs/performance.md).
const DefaultMaxFlows = 16384

// Limits bound what one worker can make the gateway hold. Zero fields take
// the defaults in parentheses.
type Limits struct {
	// MaxFlows bounds concurrent TCP flows, from the policy's allow to
	// the end of the relay (DefaultMaxFlows).
	MaxFlows int
	// MaxPendingDials bounds TCP and UDP flows that are resolving or
	// dialing upstream at the same time (256).
	MaxPendingDials int
	// MaxUDPFlows bounds concurrent UDP flows (1024).
	MaxUDPFlows int
	// TCPIdle ends a TCP flow with no traffic either way (30m).
	TCPIdle time.Duration
	// UDPIdle ends a UDP flow with no traffic either way (60s).
	UDPIdle time.Duration
	// DialTimeout bounds resolving plus dialing one flow's upstream (30s).
	DialTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxFlows <= 0 {
		l.MaxFlows = DefaultMaxFlows
	}
	if l.MaxPendingDials <= 0 {
		l.MaxPendingDials = 256
	}
	if l.MaxUDPFlows <= 0 {
		l.MaxUDPFlows = 1024
	}
	if l.TCPIdle <= 0 {
		l.TCPIdle = 30 * time.Minute
	}
	if l.UDPIdle <= 0 {
		l.UDPIdle = 60 * time.Second
	}
	if l.DialTimeout <= 0 {
		l.DialTimeout = 30 * time.Second
	}
	return l
}

// keptGoroutines bounds the idle goroutines the gateway keeps for
// per-flow work (a few MiB of grown stacks at most).
const keptGoroutines = 64

// Config configures a Gateway.
type Config struct {
	// Link is the worker's link: a tun.Endpoint on the TUN or TAP fd (built
	// by tun/), or a test's endpoint. The Gateway attaches to it and
	// detaches in Close; the caller closes the underlying fd after Close.
	// A link with stack.CapabilityResolutionRequired (a TAP) gets ARP and
	// IPv6 neighbour discovery.
	Link stack.LinkEndpoint
	// MTU, when non-zero, is set on Link.
	MTU uint32
	// Network is the address plan; zero means DefaultNetwork.
	Network Network
	// Policy returns the current policy, typically an atomic.Pointer's
	// Load. It is called once per new flow, and that one policy decides
	// the flow, checks its resolved addresses and its first bytes (L7),
	// and is the one its records come from: a reload while a flow is set
	// up applies from the next flow on. A nil result denies. The gateway
	// decides with the policy's WithLocal copy guarding Network.Local
	// (its two prefixes and the fake-IP pools), made once per policy
	// returned: whatever the policy allows, nothing there is dialled.
	Policy func() *policy.Policy
	// HostAddrs returns the host's own addresses, which the gateway's
	// copy of the policy guards too (policy.Policy.WithHostAddrs): a
	// flow to one is refused unless a rule names exactly that address
	// or dns.hosts answers it. It is called once per new flow and must
	// not block. nil: the gateway reads them itself from the network
	// namespace it dials from (ReadHostAddrs, when New runs and again
	// after the kernel announces an address change); New fails when it
	// cannot.
	HostAddrs func() *policy.HostAddrs
	// Audit receives every decision; nil discards them. Each TCP or UDP
	// flow gets one flow record: "allow" once its upstream is dialed
	// (Upstream names the address), followed by a flow_end when the relay
	// ends; or "deny", whose Rule is the deciding rule and whose Reason
	// says why (the policy's reason, or "limit: ...", "resolve: ...",
	// "dial: ..." for an allowed flow that could not be served). Packets
	// the filter refuses (ICMP, other IP protocols, spoofed sources,
	// malformed input) get packet records. Log must not block. When the
	// sink can fail (audit.Failer) and has failed, no new flow is admitted
	// (auditgate.go).
	Audit audit.Sink
	// Names serves DNS at the DNS addresses and maps fake addresses back
	// to names. nil: no DNS service, and DNS packets are flows like any
	// other (so the policy refuses them).
	Names Names
	// Dial dials upstream for allowed flows ("tcp" or "udp", "ip:port" of
	// an address the policy allowed). nil: a net.Dialer without TCP keep-alive.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Limits bound concurrent flows, dials and idle times.
	Limits Limits
	// Pcap, when non-nil, receives a pcap capture (LINKTYPE_RAW) of every
	// packet on Link, buffered by the gateway and written out by Close at
	// the latest (give it the file itself). Write errors stop the capture
	// (the gateway keeps running; see Stats.PcapDropped and PcapErr).
	Pcap io.Writer
	// Intercept, when set, terminates the TLS flows of tls: terminate
	// rules (package intercept) and refuses credential placeholders in
	// the first bytes of other flows; nil passes every flow through.
	Intercept *intercept.Engine
	// PcapMax, when positive, bounds the capture in bytes: it stops in
	// whole packets, and those past the bound count in Stats.PcapDropped
	// (PcapReached).
	PcapMax int64
	// IPv6 serves IPv6 too; when false every IPv6 packet is dropped.
	IPv6 bool
	// DHCP answers DHCPv4 on an L2 link (a TAP), as slirp4netns does:
	// the lease is the worker's address, with the gateway and the DNS
	// address (dhcp.go). Ignored on an L3 link.
	DHCP bool
	// BlockPage serves the block page (blockpage.go) on a TCP flow to a
	// name the policy refused, whatever the policy's dns.block_page
	// says; Names must answer such names (dns.Config.BlockPage).
	BlockPage bool
}

// Stats are the gateway's counters. Flow byte counts include finished
// flows only.
type Stats struct {
	TCPAllowed, TCPDenied uint64
	UDPAllowed, UDPDenied uint64
	// LimitRefused counts flows refused by Limits; DialFailed counts
	// allowed flows whose resolution or dial failed. Both are also in
	// TCPDenied/UDPDenied.
	LimitRefused, DialFailed uint64
	// ActiveTCP and ActiveUDP are flows currently pending or relaying.
	ActiveTCP, ActiveUDP int64
	// BytesOut (worker to upstream) and BytesIn (upstream to worker).
	BytesOut, BytesIn uint64

	// PacketsIn counts packets read from the link.
	PacketsIn uint64
	// Malformed counts inbound packets dropped as malformed.
	Malformed uint64
	// PacketsRefused counts non-flow packets refused (ICMP, other IP
	// protocols, multicast, spoofed sources).
	PacketsRefused uint64
	// Dropped counts packets dropped without a record (IPv6 when off,
	// neighbour discovery on an L3 link, UDP datagrams that arrive while
	// their flow is being dialed, fragments of refused datagrams).
	Dropped uint64
	// ICMPSent counts "administratively prohibited" errors sent;
	// ICMPRateLimited those suppressed by the ICMP rate limit.
	ICMPSent, ICMPRateLimited uint64

	// DNSQueries counts DNS messages handed to Names; DNSDropped those
	// dropped because too many were in flight.
	DNSQueries, DNSDropped uint64

	// PcapDropped counts packets not captured after a pcap write error.
	PcapDropped uint64

	// DHCPReplies counts DHCP answers sent (Config.DHCP).
	DHCPReplies uint64
	// L7Refused counts flows the policy allowed (so also in TCPAllowed or
	// UDPAllowed) that the L7 check then refused: their first bytes (TLS
	// SNI, HTTP Host, QUIC SNI) or a later HTTP request.
	L7Refused uint64
}

// counters is the live form of Stats.
type counters struct {
	tcpAllowed, tcpDenied, udpAllowed, udpDenied atomic.Uint64
	limitRefused, dialFailed                     atomic.Uint64
	bytesOut, bytesIn                            atomic.Uint64
	packetsIn, malformed, packetsRefused         atomic.Uint64
	dropped                                      atomic.Uint64
	icmpSent, icmpRateLimited, icmpErrors        atomic.Uint64
	dnsQueries, dnsDropped                       atomic.Uint64
	dhcpReplies                                  atomic.Uint64
	l7Refused                                    atomic.Uint64
}

// Gateway is a running gVisor stack serving one worker. Its methods are
// safe for concurrent use.
type Gateway struct {
	stack  *stack.Stack
	nic    tcpip.NICID
	link   *filterLink
	net    Network
	lim    Limits
	ipv6   bool
	policy func() *policy.Policy
	audit  audit.Sink
	names  Names
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	pcap   *pcapWriter
	icpt   *intercept.Engine

	// own are the gateway's own addresses (its two prefixes and the
	// fake-IP pools); guarded caches the current policy with them
	// guarded (see guardedPolicy).
	own     []netip.Prefix
	guarded atomic.Pointer[guardedPolicy]
	// hostAddrs returns the host's own addresses (Config.HostAddrs);
	// hostWatch, when the gateway reads them itself, is stopped by Close.
	hostAddrs func() *policy.HostAddrs
	hostWatch *hostWatch
	// gw4 and gw6 are the gateway's addresses in the stack's form.
	gw4, gw6 tcpip.Address

	// ctx is cancelled by Close; every flow and dial runs under it.
	ctx    context.Context
	cancel context.CancelFunc

	// Live flow and dial counts, checked against lim.
	tcpFlows, udpFlows, pendingDials atomic.Int64
	// blockPage is Config.BlockPage;
	// blockConns counts the block page's connections (maxBlockConns).
	blockPage  bool
	blockConns atomic.Int64
	// bufferedFlows counts the TCP flows holding large buffers
	// (sizeBuffers).
	bufferedFlows atomic.Int64

	// openMu guards open, the admitted flows whose relay runs
	// (revoke.go).
	openMu sync.Mutex
	open   map[*admission]struct{}
	// revokes counts the calls of Revoke (changed under openMu).
	revokes atomic.Uint64

	// udpMu guards udpPending: the UDP flows between their first
	// datagram and the creation of their endpoint. Datagrams that arrive
	// for them meanwhile are dropped, except for a flow whose QUIC
	// Initial is checked: those are queued (bounded) for its gate.
	udpMu      sync.Mutex
	udpPending map[stack.TransportEndpointID]*pendingUDP

	// closing is set when Close starts: flows ending from then on were
	// ended by the shutdown.
	closing atomic.Bool

	// auditFailed is closed when the audit log has failed (auditgate.go).
	auditFailed <-chan struct{}
	// auditFull is closed when the audit log is full (auditgate.go).
	auditFull <-chan struct{}

	// pool runs per-flow work on kept goroutines (goroutinepool.go).
	pool *goroutinePool

	// dnsSlots bounds DNS messages in flight (UDP and TCP connections).
	dnsSlots chan struct{}
	// closers are the DNS listeners, closed by Close.
	closers []io.Closer

	// mu guards closed and makes wg.Add safe against Close's wg.Wait.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	stats counters
}

// nicID is the gateway's only NIC.
const nicID tcpip.NICID = 1

// Stack tuning: the link is local, so buffers may grow large. Every
// endpoint's buffers start at smallFlowBuf and grow with the flow's rate
// (up to tcpSendBufMax and tcpRecvBufMax), so a stalled flow holds little
// (buffers.go); a forwarded flow's are then set by sizeBuffers. Starting
// small also means no flow was ever offered a window larger than its
// buffer may stay.
const (
	tcpSendBufMax    = 8 << 20
	tcpRecvBufMax    = 6 << 20
	dnsMaxInFlight   = 64
	dnsTCPIdle       = 10 * time.Second
	maxDNSMessageLen = 65535
)

// New builds the stack on cfg.Link and starts serving. On error nothing is
// left running.
func New(cfg Config) (*Gateway, error) {
	if cfg.Link == nil {
		return nil, errors.New("netstack: no link endpoint")
	}
	if cfg.Policy == nil {
		return nil, errors.New("netstack: no policy source")
	}
	n := cfg.Network.WithDefaults()
	if err := n.Check(); err != nil {
		return nil, fmt.Errorf("netstack: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{
		nic:        nicID,
		net:        n,
		lim:        cfg.Limits.withDefaults(),
		ipv6:       cfg.IPv6,
		policy:     cfg.Policy,
		audit:      cfg.Audit,
		names:      cfg.Names,
		icpt:       cfg.Intercept,
		dial:       cfg.Dial,
		ctx:        ctx,
		cancel:     cancel,
		udpPending: make(map[stack.TransportEndpointID]*pendingUDP),
		pool:       newGoroutinePool(keptGoroutines),
		dnsSlots:   make(chan struct{}, dnsMaxInFlight),
		blockPage:  cfg.BlockPage,
	}
	g.own = n.Local()
	g.hostAddrs = cfg.HostAddrs
	if g.hostAddrs == nil {
		w, err := watchHostAddrs()
		if err != nil {
			cancel()
			return nil, fmt.Errorf("netstack: %w", err)
		}
		g.hostWatch, g.hostAddrs = w, w.load
	}
	g.gw4, g.gw6 = tcpip.AddrFrom4(n.Gateway4().As4()), tcpip.AddrFrom16(n.Gateway6().As16())
	if g.audit == nil {
		g.audit = discard{}
	}
	if g.dial == nil {
		// No TCP keep-alive upstream: Go's default turns it on with
		// four setsockopt calls per connection, and a relayed flow's
		// liveness is the relay's idle timeout (Limits.TCPIdle), not
		// the kernel's probes.
		g.dial = (&net.Dialer{KeepAlive: -1}).DialContext
	}
	g.auditFailed = audit.FailedOf(cfg.Audit)
	g.auditFull = audit.FullOf(cfg.Audit)
	if err := g.build(cfg); err != nil {
		cancel()
		if g.hostWatch != nil {
			g.hostWatch.close()
		}
		g.closeListeners()
		g.wg.Wait()
		if g.stack != nil {
			g.stack.Destroy()
		}
		return nil, err
	}
	return g, nil
}

func (g *Gateway) build(cfg Config) error {
	link := cfg.Link
	if cfg.MTU != 0 {
		link.SetMTU(cfg.MTU)
	}
	l2 := link.Capabilities()&stack.CapabilityResolutionRequired != 0
	if cfg.Pcap != nil {
		// gVisor's sniffer also logs every packet to stderr unless
		// this process-wide switch is off; nsgate never wants that.
		sniffer.LogPackets.Store(0)
		g.pcap = &pcapWriter{w: cfg.Pcap, max: cfg.PcapMax}
		sn, err := sniffer.NewWithWriter(link, g.pcap, pcapSnapLen)
		if err != nil {
			return fmt.Errorf("netstack: pcap: %w", err)
		}
		if err := g.pcap.Err(); err != nil {
			return fmt.Errorf("netstack: pcap: %w", err)
		}
		link = sn
	}
	g.link = newFilterLink(link, g, newInspector(g.net, g.ipv6, l2))
	g.link.dhcp = cfg.DHCP && l2

	netProtos := []stack.NetworkProtocolFactory{ipv4.NewProtocol}
	if g.ipv6 {
		netProtos = append(netProtos, ipv6.NewProtocolWithOptions(ipv6.Options{
			// No DAD, router solicitations, SLAAC or MLD: the
			// addresses are ours by construction.
			DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0},
		}))
	}
	if l2 {
		netProtos = append(netProtos, arp.NewProtocol)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   netProtos,
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	g.stack = s

	opts := []tcpip.SettableTransportProtocolOption{
		func() *tcpip.TCPSACKEnabled { v := tcpip.TCPSACKEnabled(true); return &v }(),
		&tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: smallFlowBuf, Max: tcpSendBufMax},
		&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: smallFlowBuf, Max: tcpRecvBufMax},
		func() *tcpip.TCPModerateReceiveBufferOption {
			v := tcpip.TCPModerateReceiveBufferOption(true)
			return &v
		}(),
		// No TIME-WAIT on the worker's side. gVisor hands a SYN for a
		// 4-tuple still in TIME-WAIT only to a listening endpoint, which the
		// forwarder is not, so the SYN was dropped until TIME-WAIT ended:
		// after a few thousand short connections (the worker reuses source
		// ports) every new one stalled for seconds. The link is a local
		// TUN, so there are no delayed duplicates for TIME-WAIT to absorb.
		func() *tcpip.TCPTimeWaitTimeoutOption { v := tcpip.TCPTimeWaitTimeoutOption(0); return &v }(),
	}
	for _, o := range opts {
		if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
			return fmt.Errorf("netstack: tcp option %T: %w", o, tcpipError(err))
		}
	}

	if err := s.CreateNICWithOptions(g.nic, g.link, stack.NICOptions{Name: "worker", Disabled: true}); err != nil {
		return fmt.Errorf("netstack: create nic: %w", tcpipError(err))
	}
	if err := s.SetPromiscuousMode(g.nic, true); err != nil {
		return fmt.Errorf("netstack: promiscuous mode: %w", tcpipError(err))
	}
	if err := s.SetSpoofing(g.nic, true); err != nil {
		return fmt.Errorf("netstack: spoofing: %w", tcpipError(err))
	}
	own := []netip.Addr{g.net.Gateway4(), g.net.DNS4()}
	routes := []tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: g.nic}}
	if g.ipv6 {
		own = append(own, g.net.Gateway6(), g.net.DNS6())
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: g.nic})
	}
	for _, a := range own {
		pfx, proto := g.net.Prefix4, ipv4.ProtocolNumber
		if a.Is6() {
			pfx, proto = g.net.Prefix6, ipv6.ProtocolNumber
		}
		bits := pfx.Bits()
		if !pfx.Contains(a) {
			// An address outside the worker's network (pasta's DNS
			// forward address): the gateway holds it alone.
			bits = a.BitLen()
		}
		pa := tcpip.ProtocolAddress{
			Protocol:          proto,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFromSlice(a.AsSlice()), PrefixLen: bits},
		}
		if err := s.AddProtocolAddress(g.nic, pa, stack.AddressProperties{}); err != nil {
			return fmt.Errorf("netstack: add address %v: %w", a, tcpipError(err))
		}
	}
	s.SetRouteTable(routes)

	// gVisor calls the handler on a new goroutine per SYN; the work
	// moves at once to a kept goroutine whose stack has already grown.
	fwd := tcp.NewForwarder(s, smallFlowBuf, 2*g.lim.MaxPendingDials+64, func(r *tcp.ForwarderRequest) {
		g.pool.Go(func() { g.handleTCP(r) })
	})
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, g.handleUDP)

	if g.names != nil {
		if err := g.startDNS(); err != nil {
			return err
		}
	}
	if err := s.EnableNIC(g.nic); err != nil {
		return fmt.Errorf("netstack: enable nic: %w", tcpipError(err))
	}
	return nil
}

// Close stops the gateway: it refuses new flows, cancels pending dials,
// ends every relay (closing both sides), stops the DNS service, detaches
// from the link and waits for all of its goroutines. The link's fd stays
// open (the caller owns it). Close is idempotent.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()

	// Abort every endpoint first, in this goroutine, then cancel the
	// flows: cancelling first started one goroutine per live flow, all
	// closing their endpoints at once and queueing on the stack's lock
	// while Close held it, each with a grown stack (10,000 flows: over
	// 100 MiB of stacks for a moment).
	g.closing.Store(true)
	g.closeListeners()
	g.stack.Close()
	g.cancel()
	g.wg.Wait()
	g.pool.Close()
	g.stack.Wait() // removes the NIC: detaches the link and waits for it
	if g.hostWatch != nil {
		g.hostWatch.close()
	}
	if g.pcap != nil {
		g.pcap.Flush() // its error: PcapErr; what it lost: Stats
	}
	return nil
}

// PcapReached reports whether the pcap capture stopped at Config.PcapMax:
// it then lacks Stats().PcapDropped packets.
func (g *Gateway) PcapReached() bool {
	return g.pcap != nil && g.pcap.Reached()
}

// PcapErr returns the error that stopped the pcap capture, if any: the
// capture then lacks Stats().PcapDropped writes.
func (g *Gateway) PcapErr() error {
	if g.pcap == nil {
		return nil
	}
	return g.pcap.Err()
}

// enter registers a goroutine with Close's wait group; false once closed.
func (g *Gateway) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *Gateway) closeListeners() {
	g.mu.Lock()
	cs := g.closers
	g.closers = nil
	g.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Stats returns a snapshot of the counters.
func (g *Gateway) Stats() Stats {
	c := &g.stats
	st := Stats{
		TCPAllowed:      c.tcpAllowed.Load(),
		TCPDenied:       c.tcpDenied.Load(),
		UDPAllowed:      c.udpAllowed.Load(),
		UDPDenied:       c.udpDenied.Load(),
		LimitRefused:    c.limitRefused.Load(),
		DialFailed:      c.dialFailed.Load(),
		ActiveTCP:       g.tcpFlows.Load(),
		ActiveUDP:       g.udpFlows.Load(),
		BytesOut:        c.bytesOut.Load(),
		BytesIn:         c.bytesIn.Load(),
		PacketsIn:       c.packetsIn.Load(),
		Malformed:       c.malformed.Load(),
		PacketsRefused:  c.packetsRefused.Load(),
		Dropped:         c.dropped.Load(),
		ICMPSent:        c.icmpSent.Load(),
		ICMPRateLimited: c.icmpRateLimited.Load(),
		DNSQueries:      c.dnsQueries.Load(),
		DNSDropped:      c.dnsDropped.Load(),
		DHCPReplies:     c.dhcpReplies.Load(),
		L7Refused:       c.l7Refused.Load(),
	}
	if g.pcap != nil {
		st.PcapDropped = g.pcap.failed.Load()
	}
	return st
}

// tryAcquire increments n unless it has reached max.
func tryAcquire(n *atomic.Int64, max int) bool {
	for {
		v := n.Load()
		if v >= int64(max) {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// discard is the Sink used when Config.Audit is nil.
type discard struct{}

func (discard) Log(audit.Event) uint64 { return 0 }
