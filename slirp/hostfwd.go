package slirp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/relay"
)

// DialGuest opens a connection to the guest at addr over proto ("tcp" or
// "udp"). For "udp" the connection is connected: one Write is one
// datagram to addr, one Read one datagram from it. It must honour ctx.
// In nsgate it dials through the gVisor stack, out of the TAP device.
type DialGuest func(ctx context.Context, proto string, addr netip.AddrPort) (net.Conn, error)

// Inbound describes one connection (TCP) or flow (UDP, per client address)
// that arrived on a forward, for auditing.
type Inbound struct {
	Forward HostFwd
	Src     netip.AddrPort // the client on the host side
	// Err is nil when the guest was reached and the relay started;
	// otherwise why the connection was closed (or the datagram dropped).
	Err error
}

// Defaults of HostFwds' tunables.
const (
	DefaultDialTimeout = 10 * time.Second
	DefaultUDPIdle     = 60 * time.Second
	DefaultMaxConns    = 1024
	DefaultMaxUDPFlows = 256
)

// ErrTooManyConns is Inbound.Err when a forward is at its connection or
// flow limit.
var ErrTooManyConns = errors.New("too many connections on this forward")

// HostFwds is a Handler that implements each forward with a listening
// socket on the host side: a TCP listener, or a UDP socket, on
// HostAddr:HostPort (IPv4 only, like slirp4netns). Each accepted TCP
// connection, and each new UDP client address, gets its own connection to
// the guest from Dial, and bytes are relayed both ways. RemoveHostFwd
// closes the listener (and ends the forward's UDP flows); TCP connections
// already accepted run until they end, as with slirp4netns. Close ends
// everything.
//
// Set the exported fields, if at all, before the first AddHostFwd and
// never after. Its methods are safe for concurrent use.
type HostFwds struct {
	// DialTimeout bounds Dial (default DefaultDialTimeout).
	DialTimeout time.Duration
	// TCPIdle ends a TCP relay after this long without traffic (0: never).
	TCPIdle time.Duration
	// UDPIdle ends a UDP flow after this long without traffic (default
	// DefaultUDPIdle).
	UDPIdle time.Duration
	// MaxConns bounds the TCP connections relayed at once over all
	// forwards (default DefaultMaxConns); more are closed at once.
	MaxConns int
	// MaxUDPFlows bounds the UDP client addresses per forward (default
	// DefaultMaxUDPFlows); datagrams from more are dropped.
	MaxUDPFlows int
	// OnInbound, if set, is called for each TCP connection and each new
	// UDP flow, from the forward's goroutines. It must not block.
	OnInbound func(Inbound)

	guest  netip.Addr
	dial   DialGuest
	ctx    context.Context // cancelled by Close: ends every relay
	cancel context.CancelFunc
	conns  atomic.Int64 // TCP relays running
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	nextID int
	fwds   []*forward // in ID order
	closed bool
}

// forward is one active forward and its listening socket.
type forward struct {
	HostFwd
	ln net.Listener // TCP
	pc *net.UDPConn // UDP
	h  *HostFwds
	wg sync.WaitGroup // the forward's own goroutines
}

// NewHostFwds returns an empty set of forwards whose default guest address
// (for requests without guest_addr) is guest, reaching the guest through
// dial.
func NewHostFwds(guest netip.Addr, dial DialGuest) *HostFwds {
	ctx, cancel := context.WithCancel(context.Background())
	return &HostFwds{guest: guest, dial: dial, ctx: ctx, cancel: cancel, nextID: 1}
}

// AddHostFwd implements Handler: it binds the host socket and starts
// serving it.
func (h *HostFwds) AddHostFwd(f HostFwd) (int, error) {
	if f.Proto != "tcp" && f.Proto != "udp" {
		return 0, fmt.Errorf("add forward: protocol %q is not tcp or udp", f.Proto)
	}
	if !f.HostAddr.IsValid() {
		f.HostAddr = netip.IPv4Unspecified()
	}
	if !f.GuestAddr.IsValid() {
		f.GuestAddr = h.guest
	}
	f.HostAddr, f.GuestAddr = f.HostAddr.Unmap(), f.GuestAddr.Unmap()
	if !f.HostAddr.Is4() || !f.GuestAddr.Is4() {
		return 0, errors.New("add forward: only IPv4 addresses are supported")
	}
	if f.HostPort == 0 || f.GuestPort == 0 {
		return 0, errors.New("add forward: port 0")
	}
	if h.dial == nil {
		return 0, errors.New("add forward: no guest dialer")
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, errors.New("add forward: closed")
	}
	fw := &forward{HostFwd: f, h: h}
	bind := netip.AddrPortFrom(f.HostAddr, f.HostPort)
	var err error
	if f.Proto == "tcp" {
		fw.ln, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(bind))
	} else {
		fw.pc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(bind))
	}
	if err != nil {
		return 0, fmt.Errorf("add forward: %w", err)
	}
	fw.ID = h.nextID
	h.nextID++
	h.fwds = append(h.fwds, fw)
	h.wg.Add(1)
	fw.wg.Add(1)
	if f.Proto == "tcp" {
		go fw.serveTCP()
	} else {
		go fw.serveUDP()
	}
	return fw.ID, nil
}

// ListHostFwd implements Handler.
func (h *HostFwds) ListHostFwd() []HostFwd {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HostFwd, len(h.fwds))
	for i, fw := range h.fwds {
		out[i] = fw.HostFwd
	}
	return out
}

// RemoveHostFwd implements Handler: it closes the forward's socket and
// waits until the forward stops accepting.
func (h *HostFwds) RemoveHostFwd(id int) error {
	h.mu.Lock()
	var fw *forward
	for i, f := range h.fwds {
		if f.ID == id {
			fw = f
			h.fwds = append(h.fwds[:i:i], h.fwds[i+1:]...)
			break
		}
	}
	h.mu.Unlock()
	if fw == nil {
		return fmt.Errorf("remove forward %d: %w", id, ErrUnknownID)
	}
	fw.close()
	fw.wg.Wait()
	return nil
}

// Close removes every forward, ends every relay and waits for all
// goroutines. Later AddHostFwd calls fail.
func (h *HostFwds) Close() error {
	h.mu.Lock()
	h.closed = true
	fwds := h.fwds
	h.fwds = nil
	h.mu.Unlock()
	for _, fw := range fwds {
		fw.close()
	}
	h.cancel()
	h.wg.Wait()
	return nil
}

func (h *HostFwds) dialTimeout() time.Duration {
	if h.DialTimeout > 0 {
		return h.DialTimeout
	}
	return DefaultDialTimeout
}

func (h *HostFwds) udpIdle() time.Duration {
	if h.UDPIdle > 0 {
		return h.UDPIdle
	}
	return DefaultUDPIdle
}

func (h *HostFwds) maxConns() int64 {
	if h.MaxConns > 0 {
		return int64(h.MaxConns)
	}
	return DefaultMaxConns
}

func (h *HostFwds) maxUDPFlows() int {
	if h.MaxUDPFlows > 0 {
		return h.MaxUDPFlows
	}
	return DefaultMaxUDPFlows
}

func (h *HostFwds) report(fw HostFwd, src netip.AddrPort, err error) {
	if h.OnInbound != nil {
		h.OnInbound(Inbound{Forward: fw, Src: src, Err: err})
	}
}

func (fw *forward) close() {
	if fw.ln != nil {
		fw.ln.Close()
	}
	if fw.pc != nil {
		fw.pc.Close()
	}
}

func (fw *forward) guestAddrPort() netip.AddrPort {
	return netip.AddrPortFrom(fw.GuestAddr, fw.GuestPort)
}

// serveTCP accepts until the listener is closed. Each connection is
// relayed by its own goroutine, counted in h.wg (not fw.wg), so that
// removing the forward leaves established connections alone.
func (fw *forward) serveTCP() {
	h := fw.h
	defer h.wg.Done()
	defer fw.wg.Done()
	for {
		c, err := fw.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-h.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond): // e.g. EMFILE: do not spin
			}
			continue
		}
		src := addrPortOf(c.RemoteAddr())
		if h.conns.Add(1) > h.maxConns() {
			h.conns.Add(-1)
			// Record first: the refusal is in the audit log by the time
			// the client sees its connection closed.
			h.report(fw.HostFwd, src, ErrTooManyConns)
			c.Close()
			continue
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer h.conns.Add(-1)
			fw.relayTCP(c, src)
		}()
	}
}

func (fw *forward) relayTCP(c net.Conn, src netip.AddrPort) {
	h := fw.h
	ctx, cancel := context.WithTimeout(h.ctx, h.dialTimeout())
	g, err := h.dial(ctx, "tcp", fw.guestAddrPort())
	cancel()
	h.report(fw.HostFwd, src, err)
	if err != nil {
		c.Close()
		return
	}
	relay.Copy(h.ctx, c, g, h.TCPIdle)
}

// udpFlow is one client address's connection to the guest.
type udpFlow struct {
	guest net.Conn
	last  atomic.Int64 // unix nanoseconds of the latest datagram either way
}

// serveUDP reads datagrams from the host socket and sends each through
// its client's flow, opening flows on demand. It ends, with every flow,
// when the socket is closed.
func (fw *forward) serveUDP() {
	h := fw.h
	defer h.wg.Done()
	defer fw.wg.Done()

	var (
		mu    sync.Mutex // guards flows
		flows = map[netip.AddrPort]*udpFlow{}
		fwg   sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		for _, fl := range flows {
			fl.guest.Close()
		}
		mu.Unlock()
		fwg.Wait()
	}()
	stop := context.AfterFunc(h.ctx, func() { fw.pc.Close() })
	defer stop()

	bufp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bufp)
	buf := *bufp
	for {
		n, src, err := fw.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || h.ctx.Err() != nil {
				return
			}
			continue // e.g. ECONNREFUSED from an earlier send: not fatal
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		mu.Lock()
		fl := flows[src]
		full := fl == nil && len(flows) >= h.maxUDPFlows()
		mu.Unlock()
		if full {
			h.report(fw.HostFwd, src, ErrTooManyConns)
			continue
		}
		if fl == nil {
			ctx, cancel := context.WithTimeout(h.ctx, h.dialTimeout())
			g, err := h.dial(ctx, "udp", fw.guestAddrPort())
			cancel()
			h.report(fw.HostFwd, src, err)
			if err != nil {
				continue
			}
			fl = &udpFlow{guest: g}
			fl.last.Store(time.Now().UnixNano())
			mu.Lock()
			flows[src] = fl
			mu.Unlock()
			fwg.Add(1)
			go func() {
				defer fwg.Done()
				fw.udpBack(fl, src)
				mu.Lock()
				if flows[src] == fl {
					delete(flows, src)
				}
				mu.Unlock()
				fl.guest.Close()
			}()
		}
		fl.last.Store(time.Now().UnixNano())
		fl.guest.Write(buf[:n]) // a lost datagram is UDP's normal failure
	}
}

// udpBack relays the guest's datagrams to the client until the flow has
// been idle for UDPIdle in both directions or fails.
func (fw *forward) udpBack(fl *udpFlow, src netip.AddrPort) {
	idle := fw.h.udpIdle()
	bufp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bufp)
	buf := *bufp
	for {
		last := time.Unix(0, fl.last.Load())
		if time.Since(last) >= idle {
			return
		}
		fl.guest.SetReadDeadline(last.Add(idle))
		n, err := fl.guest.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // re-check: the client may have sent meanwhile
			}
			if isTransientUDP(err) {
				continue
			}
			return
		}
		fl.last.Store(time.Now().UnixNano())
		if _, err := fw.pc.WriteToUDPAddrPort(buf[:n], src); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// isTransientUDP reports errors a connected UDP socket returns after an
// ICMP error, which do not end a flow.
func isTransientUDP(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
