package netstack

import (
	"encoding/binary"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// holdingNames is fakeNames whose ServeDNS blocks on the query "hold"
// until release is closed, so a test can fill the DNS limits.
type holdingNames struct {
	*fakeNames
	held    atomic.Int64
	release chan struct{}
}

func (n *holdingNames) ServeDNS(msg []byte, tcp bool) []byte {
	if string(msg) == "hold" {
		n.held.Add(1)
		<-n.release
	}
	return n.fakeNames.ServeDNS(msg, tcp)
}

// dnsLimitFlow waits for the deny record of a DNS message or connection
// refused by a DNS limit.
func dnsLimitFlow(t *testing.T, h *harness, proto, dst string) audit.Flow {
	t.Helper()
	ev, _ := h.sink.waitEvent(t, proto+" dns limit refusal to "+dst, func(ev audit.Event) bool {
		f, ok := ev.(audit.Flow)
		return ok && f.Proto == proto && f.Dst == dst && f.Action == "deny" && strings.HasPrefix(f.Reason, "limit: ")
	})
	return ev.(audit.Flow)
}

// TestDNSLimitRefusalsAudited fills the DNS server's bounds from the
// worker: 64 UDP messages in flight, then 64 DNS-over-TCP connections.
// The message and the connection past each bound are refused, and each
// refusal is in the audit log, as every other refusal is.
func TestDNSLimitRefusalsAudited(t *testing.T) {
	names := &holdingNames{fakeNames: &fakeNames{}, release: make(chan struct{})}
	h := newHarness(t, func(c *Config) { c.Names = names })
	t.Cleanup(func() { close(names.release) })

	u := h.dialUDP(t, "10.0.2.3:53")
	for range dnsMaxInFlight {
		u.Write([]byte("hold"))
	}
	for names.held.Load() < dnsMaxInFlight {
		time.Sleep(5 * time.Millisecond)
	}
	u.Write([]byte("one too many"))
	f := dnsLimitFlow(t, h, "udp", "10.0.2.3:53")
	if f.Rule != "builtin:dns-limit" || !strings.Contains(f.Reason, "64") {
		t.Errorf("udp refusal %+v", f)
	}

	// TCP: 64 connections, each proven served by an answered query.
	frame := func(s string) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...) }
	for i := range dnsMaxTCPConns {
		c, err := h.dialTCP("10.0.2.3:53")
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		c.Write(frame("q"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 2+len("re:tcp:q"))); err != nil {
			t.Fatalf("connection %d not served: %v", i, err)
		}
	}
	c, err := h.dialTCP("10.0.2.3:53")
	if err != nil {
		t.Fatal(err) // the stack completes the handshake; nsgate then closes it
	}
	defer c.Close()
	c.Write(frame("q"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Fatalf("connection past the bound answered %d bytes", n)
	}
	f = dnsLimitFlow(t, h, "tcp", "10.0.2.3:53")
	if f.Rule != "builtin:dns-limit" || !strings.Contains(f.Reason, "64") {
		t.Errorf("tcp refusal %+v", f)
	}
}
