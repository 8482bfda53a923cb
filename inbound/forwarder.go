// Package inbound opens host-side listeners that forward inbound
// connections to the sandboxed worker through the gateway, and audits each
// one. Both ways of asking for a forward use it: `nsgate run --publish`
// and the add_hostfwd request on the API socket of `nsgate slirp4netns`
// (package slirp translates that request's JSON into a Rule).
//
// A Forwarder holds a set of forwards. Each is a TCP listener, or a UDP
// socket, on the host side; each accepted TCP connection, and each new UDP
// client address, gets its own connection to the worker from
// Options.Dial (the gateway's netstack.Gateway.DialGuest in nsgate), and
// bytes are relayed both ways. Nothing here decides policy: a forward
// exists because the operator asked for it, and every connection through
// it is recorded as an audit.Inbound record.
package inbound

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

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/relay"
)

// Dialer opens a connection to the worker at addr over proto ("tcp" or
// "udp") for the host-side client (the gateway decides which source
// address the worker sees: the client's own, or its own address for a
// client on the host's loopback). For "udp" the connection is connected:
// one Write is one datagram to addr, one Read one datagram from it. It
// must honour ctx and be safe for concurrent use. The Forwarder owns (and
// closes) every connection it returns.
type Dialer func(ctx context.Context, proto string, client, addr netip.AddrPort) (net.Conn, error)

// Rule asks for one forward: listen on HostAddr:HostPort for Proto, and
// relay each connection to GuestAddr:GuestPort. Only IPv4 is supported,
// as with slirp4netns.
type Rule struct {
	Proto     string     // "tcp" or "udp"
	HostAddr  netip.Addr // the listen address; the zero Addr means 0.0.0.0
	HostPort  uint16     // 1..65535
	GuestAddr netip.Addr // the worker's address; the zero Addr means Options.Guest, and no other is accepted
	GuestPort uint16     // 1..65535
}

// Listen is the host-side end, as the audit log writes it:
// "127.0.0.1:8080/tcp".
func (r Rule) Listen() string {
	return netip.AddrPortFrom(r.HostAddr, r.HostPort).String() + "/" + r.Proto
}

// Guest is the worker-side end.
func (r Rule) Guest() netip.AddrPort { return netip.AddrPortFrom(r.GuestAddr, r.GuestPort) }

// Forward is an active forward: its Rule as Add completed it (both
// addresses filled in, IPv4-mapped addresses unmapped) and its ID.
type Forward struct {
	ID int // from 1, in the order forwards were added, never reused
	Rule
}

// Event is one connection (TCP) or flow (UDP, per client address) that
// arrived on a forward.
type Event struct {
	Forward Forward
	Src     netip.AddrPort // the client on the host side
	// Err is nil when the worker was reached and the relay started;
	// otherwise why the connection was closed (or the datagram dropped),
	// for instance ErrTooManyConns.
	Err error
}

// Defaults of Options' tunables.
const (
	DefaultDialTimeout = 10 * time.Second
	DefaultUDPIdle     = 60 * time.Second
	DefaultMaxConns    = 1024
	DefaultMaxUDPFlows = 256
)

// ErrTooManyConns is Event.Err when a forward is at its connection or
// flow limit.
var ErrTooManyConns = errors.New("too many connections on this forward")

// ErrUnknownID is returned (wrapped) by Remove for an ID that names no
// forward.
var ErrUnknownID = errors.New("no such forward")

// Options configure a Forwarder. Zero tunables take their defaults.
type Options struct {
	// Guest is the worker's address for rules without GuestAddr.
	Guest netip.Addr
	// Dial reaches the worker. Without it every Add fails.
	Dial Dialer
	// Audit, if set, gets one audit.Inbound record per Event: action
	// "allow" when the worker was reached, "deny" otherwise. It is called
	// from the forwards' goroutines and must not block (audit.Logger's Log
	// only queues). A refused connection is recorded before the client's
	// connection is closed.
	Audit audit.Sink
	// OnInbound, if set, is called with each Event after Audit, from the
	// forwards' goroutines, possibly concurrently. It must not block: a
	// TCP forward accepts, and a UDP forward reads, nothing meanwhile.
	OnInbound func(Event)

	// DialTimeout bounds each Dial (default DefaultDialTimeout).
	DialTimeout time.Duration
	// TCPIdle ends a TCP relay after this long without traffic (0: never).
	TCPIdle time.Duration
	// UDPIdle ends a UDP flow after this long without a datagram from its
	// client (default DefaultUDPIdle). The worker's datagrams do not keep
	// a flow open: the client's address may be forged, and the worker
	// must not be able to send to it for as long as it likes.
	UDPIdle time.Duration
	// MaxConns bounds the TCP connections relayed at once over all
	// forwards (default DefaultMaxConns); more are closed at once.
	MaxConns int
	// MaxUDPFlows bounds the UDP client addresses per forward (default
	// DefaultMaxUDPFlows); datagrams from more are dropped.
	MaxUDPFlows int
}

// Forwarder is a set of forwards. Remove closes a forward's listener and
// ends its UDP flows; TCP connections it already accepted run until they
// end, as with slirp4netns. Close ends everything.
//
// The Forwarder owns its listening sockets, the client connections they
// accept and the worker connections it dials, and closes them all by the
// time Close returns. The caller owns Options.Dial and Options.Audit and
// must keep them usable until Close returns. Its methods are safe for
// concurrent use.
type Forwarder struct {
	o      Options
	ctx    context.Context // cancelled by Close: ends every relay and dial
	cancel context.CancelFunc
	conns  atomic.Int64 // TCP relays running
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	nextID int
	fwds   []*listener // in ID order
	closed bool
}

// listener is one active forward and its socket.
type listener struct {
	Forward
	ln net.Listener // TCP
	pc *net.UDPConn // UDP
	f  *Forwarder
	wg sync.WaitGroup // the forward's own goroutines
}

// New returns a Forwarder with no forwards. It starts nothing.
func New(o Options) *Forwarder {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.UDPIdle <= 0 {
		o.UDPIdle = DefaultUDPIdle
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxUDPFlows <= 0 {
		o.MaxUDPFlows = DefaultMaxUDPFlows
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Forwarder{o: o, ctx: ctx, cancel: cancel, nextID: 1}
}

// Add binds the rule's host socket and starts serving it in the
// background; it does not wait for a connection. It returns the forward
// as completed, with its ID. On error nothing is left behind and no ID is
// used up. Either way the outcome is a "forward" audit record (add or
// deny) written before Add returns; once the audit log has failed
// (Options.Audit is an audit.Failer whose Failed is closed) Add refuses,
// since the forward could not be recorded: the audit fails closed.
func (f *Forwarder) Add(r Rule) (Forward, error) {
	fw, err := f.add(r)
	if err != nil {
		f.logForward(audit.Forward{Action: "deny", Listen: fw.Listen(), Dst: fw.Guest().String(), Error: err.Error()})
	}
	return fw, err
}

// add is Add without the refusal's record. On error it returns the rule
// as far as it was completed (for the record) and no ID.
func (f *Forwarder) add(r Rule) (Forward, error) {
	if r.Proto != "tcp" && r.Proto != "udp" {
		return Forward{}, fmt.Errorf("add forward: protocol %q is not tcp or udp", r.Proto)
	}
	if !r.HostAddr.IsValid() {
		r.HostAddr = netip.IPv4Unspecified()
	}
	if !r.GuestAddr.IsValid() {
		r.GuestAddr = f.o.Guest
	}
	r.HostAddr, r.GuestAddr = r.HostAddr.Unmap(), r.GuestAddr.Unmap()
	asked := Forward{Rule: r}
	if !r.HostAddr.Is4() || !r.GuestAddr.Is4() {
		return asked, errors.New("add forward: only IPv4 addresses are supported")
	}
	if r.HostPort == 0 || r.GuestPort == 0 {
		return asked, errors.New("add forward: port 0")
	}
	// Only the worker is ever a forward's target: under slirp4netns an
	// add_hostfwd to guest_addr 10.0.2.2 reaches the host's loopback.
	// The dialer refuses any other address too; refusing here leaves no
	// listener that could never reach the worker.
	if f.o.Guest.IsValid() && r.GuestAddr != f.o.Guest.Unmap() {
		return asked, fmt.Errorf("add forward: %s is not the worker's address (%s)", r.GuestAddr, f.o.Guest)
	}
	if f.o.Dial == nil {
		return asked, errors.New("add forward: no dialer for the worker")
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return asked, errors.New("add forward: closed")
	}
	if audit.IsFailed(audit.FailedOf(f.o.Audit)) {
		return asked, errors.New("add forward: the audit log has failed")
	}
	l := &listener{Forward: Forward{Rule: r}, f: f}
	bind := netip.AddrPortFrom(r.HostAddr, r.HostPort)
	var err error
	if r.Proto == "tcp" {
		l.ln, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(bind))
	} else {
		l.pc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(bind))
	}
	if err != nil {
		return asked, fmt.Errorf("add forward: %w", err)
	}
	l.ID = f.nextID
	f.nextID++
	f.fwds = append(f.fwds, l)
	f.logForward(forwardRecord("add", l.Forward))
	f.wg.Add(1)
	l.wg.Add(1)
	if r.Proto == "tcp" {
		go l.serveTCP()
	} else {
		go l.serveUDP()
	}
	return l.Forward, nil
}

// List returns the active forwards in the order they were added.
func (f *Forwarder) List() []Forward {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Forward, len(f.fwds))
	for i, l := range f.fwds {
		out[i] = l.Forward
	}
	return out
}

// Remove closes the forward's socket and waits until it stops accepting
// (a UDP forward: until its flows have ended). Established TCP connections
// are left to run. It returns an error wrapping ErrUnknownID if no active
// forward has this ID.
func (f *Forwarder) Remove(id int) error {
	f.mu.Lock()
	var l *listener
	for i, x := range f.fwds {
		if x.ID == id {
			l = x
			f.fwds = append(f.fwds[:i:i], f.fwds[i+1:]...)
			break
		}
	}
	f.mu.Unlock()
	if l == nil {
		return fmt.Errorf("remove forward %d: %w", id, ErrUnknownID)
	}
	l.close()
	l.wg.Wait()
	f.logForward(forwardRecord("remove", l.Forward))
	return nil
}

// forwardRecord is the "forward" audit record of fw.
func forwardRecord(action string, fw Forward) audit.Forward {
	return audit.Forward{Action: action, ID: fw.ID, Listen: fw.Listen(), Dst: fw.Guest().String()}
}

func (f *Forwarder) logForward(r audit.Forward) {
	if f.o.Audit != nil {
		f.o.Audit.Log(r)
	}
}

// Close removes every forward, ends every relay and pending dial, and
// waits for all its goroutines. Later Add calls fail. It always returns
// nil.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	fwds := f.fwds
	f.fwds = nil
	f.mu.Unlock()
	for _, l := range fwds {
		l.close()
	}
	f.cancel()
	f.wg.Wait()
	return nil
}

// report audits one event, then hands it to OnInbound.
func (f *Forwarder) report(fw Forward, src netip.AddrPort, err error) {
	ev := Event{Forward: fw, Src: src, Err: err}
	if f.o.Audit != nil {
		f.o.Audit.Log(record(ev))
	}
	if f.o.OnInbound != nil {
		f.o.OnInbound(ev)
	}
}

// record is ev's audit record.
func record(ev Event) audit.Inbound {
	r := audit.Inbound{
		Action: "allow",
		Listen: ev.Forward.Listen(),
		Dst:    ev.Forward.Guest().String(),
		Src:    ev.Src.String(),
	}
	if ev.Err != nil {
		r.Action = "deny"
	}
	return r
}

func (l *listener) close() {
	if l.ln != nil {
		l.ln.Close()
	}
	if l.pc != nil {
		l.pc.Close()
	}
}

// serveTCP accepts until the listener is closed. Each connection is
// relayed by its own goroutine, counted in f.wg (not l.wg), so that
// removing the forward leaves established connections alone.
func (l *listener) serveTCP() {
	f := l.f
	defer f.wg.Done()
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond): // e.g. EMFILE: do not spin
			}
			continue
		}
		src := addrPortOf(c.RemoteAddr())
		if f.conns.Add(1) > int64(f.o.MaxConns) {
			f.conns.Add(-1)
			// Record first: the refusal is in the audit log by the time
			// the client sees its connection closed.
			f.report(l.Forward, src, ErrTooManyConns)
			c.Close()
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.conns.Add(-1)
			l.relayTCP(c, src)
		}()
	}
}

func (l *listener) relayTCP(c net.Conn, src netip.AddrPort) {
	f := l.f
	ctx, cancel := context.WithTimeout(f.ctx, f.o.DialTimeout)
	g, err := f.o.Dial(ctx, "tcp", src, l.Guest())
	cancel()
	f.report(l.Forward, src, err)
	if err != nil {
		c.Close()
		return
	}
	// The worker's side is the connection through the gateway (g); the
	// host client is the far end.
	start := time.Now()
	res := relay.Copy(f.ctx, g, c, f.o.TCPIdle)
	f.logEnd(l.Forward, src, res.ToUpstream, res.ToWorker, start, endError(res))
}

// logEnd writes the inbound_end record of a connection or flow that
// reached the worker: out bytes from the worker to the client, in the
// other way.
func (f *Forwarder) logEnd(fw Forward, src netip.AddrPort, out, in int64, start time.Time, why string) {
	if f.o.Audit == nil {
		return
	}
	f.o.Audit.Log(audit.InboundEnd{
		Listen:     fw.Listen(),
		Dst:        fw.Guest().String(),
		Src:        src.String(),
		BytesOut:   out,
		BytesIn:    in,
		DurationMS: time.Since(start).Milliseconds(),
		Error:      why,
	})
}

// endError says why a TCP relay ended, for its inbound_end record: ""
// when both sides closed.
func endError(res relay.Result) string {
	switch {
	case res.Err == nil:
		return ""
	case errors.Is(res.Err, relay.ErrIdle):
		return "idle timeout"
	case errors.Is(res.Err, context.Canceled):
		return "forwarder closed"
	}
	side := ""
	switch res.Failed {
	case relay.SideWorker:
		side = "worker: "
	case relay.SideUpstream:
		side = "client: "
	}
	// Without the addresses (a net.OpError names both ends), so that the
	// ends of one client's connections fold into one record.
	var errno syscall.Errno
	var op *net.OpError
	switch {
	case errors.As(res.Err, &errno):
		return side + errno.Error()
	case errors.As(res.Err, &op) && op.Err != nil:
		return side + op.Err.Error()
	}
	return side + res.Err.Error()
}

// udpFlow is one client address's connection to the worker.
type udpFlow struct {
	guest   net.Conn
	last    atomic.Int64 // unix nanoseconds of the client's latest datagram
	start   time.Time
	in, out atomic.Int64 // bytes from the client, and from the worker
	idle    atomic.Bool  // ended by UDPIdle
}

// serveUDP reads datagrams from the host socket and sends each through
// its client's flow, opening flows on demand. It ends, with every flow,
// when the socket is closed.
func (l *listener) serveUDP() {
	f := l.f
	defer f.wg.Done()
	defer l.wg.Done()

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
	stop := context.AfterFunc(f.ctx, func() { l.pc.Close() })
	defer stop()

	bufp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bufp)
	buf := *bufp
	for {
		n, src, err := l.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || f.ctx.Err() != nil {
				return
			}
			continue // e.g. ECONNREFUSED from an earlier send: not fatal
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		mu.Lock()
		fl := flows[src]
		full := fl == nil && len(flows) >= f.o.MaxUDPFlows
		mu.Unlock()
		if full {
			f.report(l.Forward, src, ErrTooManyConns)
			continue
		}
		if fl == nil {
			ctx, cancel := context.WithTimeout(f.ctx, f.o.DialTimeout)
			g, err := f.o.Dial(ctx, "udp", src, l.Guest())
			cancel()
			f.report(l.Forward, src, err)
			if err != nil {
				continue
			}
			fl = &udpFlow{guest: g, start: time.Now()}
			fl.last.Store(fl.start.UnixNano())
			mu.Lock()
			flows[src] = fl
			mu.Unlock()
			fwg.Add(1)
			go func() {
				defer fwg.Done()
				l.udpBack(fl, src)
				mu.Lock()
				if flows[src] == fl {
					delete(flows, src)
				}
				mu.Unlock()
				fl.guest.Close()
				why := ""
				switch {
				case fl.idle.Load():
					why = "idle timeout"
				case f.ctx.Err() != nil:
					why = "forwarder closed"
				}
				f.logEnd(l.Forward, src, fl.out.Load(), fl.in.Load(), fl.start, why)
			}()
		}
		fl.last.Store(time.Now().UnixNano())
		if _, err := fl.guest.Write(buf[:n]); err == nil { // a lost datagram is UDP's normal failure
			fl.in.Add(int64(n))
		}
	}
}

// udpBack relays the worker's datagrams to the client until the client
// has sent nothing for UDPIdle, or the flow fails. Only the client's
// datagrams count as activity (see Options.UDPIdle).
func (l *listener) udpBack(fl *udpFlow, src netip.AddrPort) {
	idle := l.f.o.UDPIdle
	bufp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bufp)
	buf := *bufp
	for {
		last := time.Unix(0, fl.last.Load())
		if time.Since(last) >= idle {
			fl.idle.Store(true)
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
		if _, err := l.pc.WriteToUDPAddrPort(buf[:n], src); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
		} else {
			fl.out.Add(int64(n))
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
