package netstack

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/relay"
)

// dnsMaxTCPConns bounds concurrent DNS-over-TCP connections.
const dnsMaxTCPConns = 64

// startDNS binds UDP and TCP port 53 on the DNS addresses and serves them
// with Names. Queries to those ports never reach the flow handlers.
func (g *Gateway) startDNS() error {
	type bind struct {
		a     netip.Addr
		proto tcpip.NetworkProtocolNumber
	}
	binds := []bind{{g.net.DNS4(), ipv4.ProtocolNumber}}
	if g.ipv6 {
		binds = append(binds, bind{g.net.DNS6(), ipv6.ProtocolNumber})
	}
	conns := new(atomic.Int64)
	for _, b := range binds {
		fa := tcpip.FullAddress{NIC: g.nic, Addr: tcpip.AddrFromSlice(b.a.AsSlice()), Port: 53}
		uc, err := gonet.DialUDP(g.stack, &fa, nil, b.proto)
		if err != nil {
			return fmt.Errorf("netstack: dns udp on %v: %w", b.a, err)
		}
		g.closers = append(g.closers, uc)
		ln, err := gonet.ListenTCP(g.stack, fa, b.proto)
		if err != nil {
			return fmt.Errorf("netstack: dns tcp on %v: %w", b.a, err)
		}
		g.closers = append(g.closers, ln)
		g.wg.Add(2)
		go g.serveDNSUDP(uc, netip.AddrPortFrom(b.a, 53))
		go g.serveDNSTCP(ln, conns)
	}
	return nil
}

// RuleDNSLimit is the rule of the deny flow record of a DNS message or
// DNS-over-TCP connection refused because a DNS bound was reached
// (dnsMaxInFlight, dnsMaxTCPConns).
const RuleDNSLimit = "builtin:dns-limit"

// dnsLimited records a DNS message or connection from src to dst refused
// by a DNS bound. The audit log folds repeats, so a flood costs a record
// per second and source, not one per message.
func (g *Gateway) dnsLimited(proto string, src net.Addr, dst string, what string, max int) {
	g.stats.dnsDropped.Add(1)
	s := ""
	if src != nil {
		s = src.String()
	}
	g.audit.Log(audit.Flow{
		Action: "deny", Proto: proto, Src: s, Dst: dst,
		Rule: RuleDNSLimit, Reason: limitReason(what, max),
	})
}

// serveDNSUDP reads queries from uc (bound at self) and answers each on a
// goroutine of its own, at most dnsMaxInFlight at once (more are dropped
// and recorded: the worker's resolver retries).
func (g *Gateway) serveDNSUDP(uc *gonet.UDPConn, self netip.AddrPort) {
	defer g.wg.Done()
	bp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bp)
	buf := *bp
	for {
		n, from, err := uc.ReadFrom(buf)
		if err != nil {
			// Closed by Close, or a transient error: back off
			// briefly so a persistent one cannot spin.
			select {
			case <-g.ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
			continue
		}
		select {
		case g.dnsSlots <- struct{}{}:
		default:
			g.dnsLimited("udp", from, self.String(), "DNS messages in flight", dnsMaxInFlight)
			continue
		}
		if !g.enter() {
			<-g.dnsSlots
			return
		}
		g.stats.dnsQueries.Add(1)
		msg := append([]byte(nil), buf[:n]...)
		go func() {
			defer g.wg.Done()
			defer func() { <-g.dnsSlots }()
			if resp := g.names.ServeDNS(msg, false); resp != nil {
				uc.WriteTo(resp, from)
			}
		}()
	}
}

// serveDNSTCP accepts DNS-over-TCP connections; conns counts them across
// the gateway's listeners.
func (g *Gateway) serveDNSTCP(ln *gonet.TCPListener, conns *atomic.Int64) {
	defer g.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !tryAcquire(conns, dnsMaxTCPConns) {
			g.dnsLimited("tcp", c.RemoteAddr(), c.LocalAddr().String(), "DNS-over-TCP connections", dnsMaxTCPConns)
			c.Close()
			continue
		}
		if !g.enter() {
			conns.Add(-1)
			c.Close()
			return
		}
		go func() {
			defer g.wg.Done()
			defer conns.Add(-1)
			g.serveDNSConn(c)
		}()
	}
}

// serveDNSConn answers length-prefixed queries (RFC 1035 4.2.2) on c until
// the worker closes it, it idles for dnsTCPIdle, a message is malformed or
// Names drops one.
func (g *Gateway) serveDNSConn(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(g.ctx, func() { c.Close() })
	defer stop()
	bp := relay.GetPacketBuffer()
	defer relay.PutPacketBuffer(bp)
	buf := *bp
	for {
		c.SetReadDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(buf[:2]))
		if n == 0 {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		g.stats.dnsQueries.Add(1)
		resp := g.names.ServeDNS(buf[:n], true)
		if resp == nil || len(resp) > maxDNSMessageLen {
			return
		}
		out := make([]byte, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp)))
		copy(out[2:], resp)
		c.SetWriteDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
