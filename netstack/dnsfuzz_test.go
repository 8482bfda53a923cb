package netstack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/dns"
	"github.com/nsgate/nsgate/policy"
)

// streamConn is the worker's side of a DNS-over-TCP connection as
// serveDNSConn sees it: reads come from in, in pieces of at most chunk
// bytes (partial frames), then EOF; writes are kept.
type streamConn struct {
	net.Conn // nil: only the methods below are used
	in       *bytes.Reader
	chunk    int
	out      bytes.Buffer
}

func (c *streamConn) Read(b []byte) (int, error) {
	if len(b) > c.chunk {
		b = b[:c.chunk]
	}
	return c.in.Read(b)
}
func (c *streamConn) Write(b []byte) (int, error)      { return c.out.Write(b) }
func (c *streamConn) Close() error                     { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
func (c *streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *streamConn) SetDeadline(t time.Time) error    { return nil }

// dnsRecordSink keeps dns records.
type dnsRecordSink struct {
	mu  sync.Mutex
	dns []audit.DNS
}

func (s *dnsRecordSink) Log(e audit.Event) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := e.(audit.DNS); ok {
		s.dns = append(s.dns, d)
	}
	return 0
}

func (s *dnsRecordSink) take() []audit.DNS {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dns
	s.dns = nil
	return d
}

// dnsFrame prefixes msg with its length.
func dnsFrame(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
}

func fuzzQuery(id uint16, name string, t dnsmessage.Type, opcode dnsmessage.OpCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true, OpCode: opcode})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: t, Class: dnsmessage.ClassINET})
	m, err := b.Finish()
	if err != nil {
		panic(err)
	}
	return m
}

// FuzzDNSTCPStream feeds an arbitrary byte stream, read back in pieces of
// chunk bytes, to the DNS-over-TCP loop with the real DNS server behind
// it: pipelined queries, frames cut anywhere, zero and oversized lengths.
// Properties: the loop ends at the stream's end (no hang) without a
// panic; it answers exactly the complete frames before the first one the
// server drops (or a zero length), in order, each reply a response with
// its query's ID; every address answered maps back to a name; every
// message handed to the server leaves exactly one dns audit record; and
// nothing is ever sent upstream.
func FuzzDNSTCPStream(f *testing.F) {
	app := fuzzQuery(1, "app.test.", dnsmessage.TypeA, 0)
	bad := fuzzQuery(2, "unapproved.test.", dnsmessage.TypeA, 0)
	upd := fuzzQuery(3, "unapproved.test.", dnsmessage.TypeSOA, 5)
	ptr := fuzzQuery(4, "1.0.18.198.in-addr.arpa.", dnsmessage.TypePTR, 0)
	f.Add(dnsFrame(app), uint8(0))
	f.Add(append(append(dnsFrame(app), dnsFrame(bad)...), dnsFrame(upd)...), uint8(1))
	f.Add(append(dnsFrame(app), dnsFrame(ptr)...), uint8(3))
	f.Add(append(dnsFrame(app), 0xff, 0xff, 0, 1), uint8(7))                   // an oversized length, then EOF
	f.Add(append(dnsFrame(app), 0, 0, 0, 20), uint8(0))                        // a zero length ends it
	f.Add(append(dnsFrame([]byte{0, 9, 0x80, 0}), dnsFrame(app)...), uint8(2)) // a short message is dropped
	f.Add(dnsFrame(app)[:10], uint8(1))                                        // a frame cut short

	pol, err := policy.Parse("fuzz.yaml", []byte("version: 1\nallow:\n  - host: app.test\n    ports: [80]\n  - host: \"*.cdn.test\"\n"))
	if err != nil {
		f.Fatal(err)
	}
	var upstream atomic.Int64
	sink := &dnsRecordSink{}
	names, err := dns.New(dns.Config{
		Policy: func() *policy.Policy { return pol }, IPv6: true, MaxNames: 64, Audit: sink,
		Exchange: func(context.Context, string, []byte) ([]byte, error) {
			upstream.Add(1)
			return nil, errors.New("no upstream in a fuzz run")
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		sink.take()
		g := &Gateway{ctx: context.Background(), names: names}
		c := &streamConn{in: bytes.NewReader(stream), chunk: 1 + int(chunk)%64*37}
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.serveDNSConn(c)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the DNS-over-TCP loop did not end at the end of a %d-byte stream", len(stream))
		}
		if n := upstream.Load(); n != 0 {
			t.Fatalf("%d queries sent upstream", n)
		}

		// The frames the loop must have read, and which it answers.
		var ids []uint16
		handed := 0
		for rest := stream; len(rest) >= 2; {
			n := int(binary.BigEndian.Uint16(rest))
			if n == 0 || len(rest)-2 < n {
				break
			}
			msg := rest[2 : 2+n]
			rest = rest[2+n:]
			handed++
			if len(msg) < 12 || msg[2]&0x80 != 0 {
				break // dropped: the connection ends
			}
			ids = append(ids, binary.BigEndian.Uint16(msg))
		}
		if recs := sink.take(); len(recs) != handed {
			t.Fatalf("%d messages handed to the server, %d dns audit records: %+v", handed, len(recs), recs)
		}
		out := c.out.Bytes()
		for i, id := range ids {
			if len(out) < 2 {
				t.Fatalf("reply %d of %d missing", i, len(ids))
			}
			n := int(binary.BigEndian.Uint16(out))
			if len(out)-2 < n {
				t.Fatalf("reply %d cut short", i)
			}
			var m dnsmessage.Message
			if err := m.Unpack(out[2 : 2+n]); err != nil {
				t.Fatalf("reply %d does not parse: %v", i, err)
			}
			if !m.Response || m.ID != id {
				t.Fatalf("reply %d: header %+v, want a response with id %#x", i, m.Header, id)
			}
			for _, r := range m.Answers {
				var a netip.Addr
				switch b := r.Body.(type) {
				case *dnsmessage.AResource:
					a = netip.AddrFrom4(b.A)
				case *dnsmessage.AAAAResource:
					a = netip.AddrFrom16(b.AAAA)
				default:
					continue
				}
				if _, ok := names.NameOf(a); !ok {
					t.Fatalf("answered %v, which maps back to no name", a)
				}
			}
			out = out[2+n:]
		}
		if len(out) != 0 {
			t.Fatalf("%d bytes written after the %d replies", len(out), len(ids))
		}
	})
}
