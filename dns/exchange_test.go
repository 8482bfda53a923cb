package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/policy"
)

// loopbackDNS is a tiny DNS server on 127.0.0.1 (UDP and TCP on one port)
// for exercising the default Exchange. It answers every A query with
// 192.0.2.77 and every AAAA query with 2001:db8::77.
type loopbackDNS struct {
	addr string
	// mode changes the UDP behaviour: "" answers; "truncate" sets TC and
	// drops the answers (TCP then answers in full); "stale" first sends a
	// reply with a wrong ID; "silent" never answers.
	mode    string
	udpHits atomic.Int32
	tcpHits atomic.Int32
}

func startLoopbackDNS(t *testing.T, mode string) *loopbackDNS {
	t.Helper()
	var (
		pc net.PacketConn
		ln net.Listener
	)
	// The TCP listener must share the UDP port; retry if it is taken.
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen udp on loopback: %v", err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc, ln = nil, nil
	}
	if ln == nil {
		t.Fatal("no loopback port free for both udp and tcp")
	}
	s := &loopbackDNS{addr: pc.LocalAddr().String(), mode: mode}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go s.serveUDP(pc)
	go s.serveTCP(ln)
	return s
}

func (s *loopbackDNS) answer(msg []byte, truncate bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	if truncate {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Truncated: true})
		must(b.StartQuestions())
		must(b.Question(q))
		out, _ := b.Finish()
		return out
	}
	switch q.Type {
	case dnsmessage.TypeA:
		return buildReply(h.ID, q, dnsmessage.RCodeSuccess, rrA(q.Name.String(), 60, "192.0.2.77"))
	case dnsmessage.TypeAAAA:
		return buildReply(h.ID, q, dnsmessage.RCodeSuccess, rrAAAA(q.Name.String(), 60, "2001:db8::77"))
	}
	return buildReply(h.ID, q, dnsmessage.RCodeSuccess)
}

func (s *loopbackDNS) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		s.udpHits.Add(1)
		msg := buf[:n]
		switch s.mode {
		case "silent":
			continue
		case "stale":
			if r := s.answer(msg, false); r != nil {
				wrong := slices.Clone(r)
				binary.BigEndian.PutUint16(wrong, binary.BigEndian.Uint16(r)+1)
				pc.WriteTo(wrong, from)
				pc.WriteTo(r, from)
			}
			continue
		}
		if r := s.answer(msg, s.mode == "truncate"); r != nil {
			pc.WriteTo(r, from)
		}
	}
}

func (s *loopbackDNS) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			msg := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, msg); err != nil {
				return
			}
			s.tcpHits.Add(1)
			r := s.answer(msg, false)
			c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(r))))
			c.Write(r)
		}()
	}
}

func TestExchangeLoopback(t *testing.T) {
	for _, tc := range []struct {
		why      string
		mode     string
		udp, tcp int32
	}{
		{"a plain UDP round trip", "", 1, 0},
		{"a truncated UDP reply is retried over TCP", "truncate", 1, 1},
		{"a reply with another ID is skipped, the matching one used", "stale", 1, 0},
	} {
		t.Run(tc.why, func(t *testing.T) {
			srv := startLoopbackDNS(t, tc.mode)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			q := makeQuery(0x4242, question("api.app.test.", dnsmessage.TypeA))
			raw, err := Exchange(ctx, srv.addr, q)
			if err != nil {
				t.Fatalf("Exchange: %v", err)
			}
			got, _, err := parseReply(raw, 0x4242, "api.app.test", dnsmessage.TypeA)
			if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.77") {
				t.Fatalf("reply %v, %v", got, err)
			}
			if u, c := srv.udpHits.Load(), srv.tcpHits.Load(); u != tc.udp || c != tc.tcp {
				t.Errorf("server saw %d udp, %d tcp queries; want %d, %d", u, c, tc.udp, tc.tcp)
			}
		})
	}
}

func TestResolveDefaultExchange(t *testing.T) {
	srv := startLoopbackDNS(t, "")
	pol := mustPolicy(t, testPolicyYAML)
	s, err := New(Config{
		Policy:   func() *policy.Policy { return pol },
		Upstream: []string{srv.addr},
		IPv6:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := s.Resolve(ctx, "api.app.test")
	want := addrs("192.0.2.77", "2001:db8::77")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v, %v; want %v", got, err, want)
	}
	if n := srv.udpHits.Load(); n != 2 {
		t.Errorf("server saw %d queries, want 2 (A and AAAA)", n)
	}
}

func TestExchangeTimeout(t *testing.T) {
	srv := startLoopbackDNS(t, "silent")
	pol := mustPolicy(t, testPolicyYAML)
	s, err := New(Config{
		Policy:   func() *policy.Policy { return pol },
		Upstream: []string{srv.addr},
		Timeout:  100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.Resolve(context.Background(), "api.app.test")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Resolve against a silent server: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v; the per-attempt timeout is 100ms", d)
	}
}

func TestExchangeRefused(t *testing.T) {
	// A loopback port with nothing listening: the kernel's port-unreachable
	// makes the read fail at once rather than time out.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Exchange(ctx, addr, makeQuery(1, question("api.app.test.", dnsmessage.TypeA))); err == nil {
		t.Fatal("Exchange to a closed port succeeded")
	}
	if _, err := Exchange(ctx, addr, []byte{1, 2}); err == nil {
		t.Fatal("Exchange of a 2-byte query succeeded")
	}
}
