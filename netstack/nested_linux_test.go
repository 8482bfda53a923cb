package netstack

import (
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestUpstreamGatewayNames: behind another nsgate, a name's answers are
// that gateway's fake addresses (in the same pools as ours). An answer the
// resolver marked as an upstream gateway's name (dns.Answer.Gateway, only
// after the gateway handshake) is dialled, decided as the name; the same
// kind of answer from a resolver that is not a gateway is an address in a
// special range, refused and never dialled; and a mark on an address
// outside the pools changes nothing.
func TestUpstreamGatewayNames(t *testing.T) {
	names := &fakeNames{
		fake: map[netip.Addr]string{
			mustAddr("198.18.0.5"): "app.test",     // our fake addresses, as the worker sees them
			mustAddr("198.18.0.6"): "mixed.test",   //
			mustAddr("198.18.0.7"): "private.test", //
		},
		answers: map[string][]netip.Addr{
			"app.test":     {mustAddr("198.18.0.40")}, // the upstream gateway's name for app.test
			"mixed.test":   {mustAddr("198.18.0.41")}, // a plain resolver's answer in the benchmarking range
			"private.test": {mustAddr("10.1.2.3")},
		},
		gateway: map[string][]netip.Addr{
			"app.test":     {mustAddr("198.18.0.40")},
			"private.test": {mustAddr("10.1.2.3")}, // not in the pools: no name of a gateway
		},
	}
	h := newHarness(t, withNames(names))
	srv := tcpServer(t, "outer\n")
	for _, a := range []string{"198.18.0.40:80", "198.18.0.41:80", "10.1.2.3:80"} {
		h.dialer.route("tcp", a, srv)
	}

	c, err := h.dialTCP("198.18.0.5:80")
	if err != nil {
		t.Fatalf("the name through the upstream gateway: %v", err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "outer\n" {
		t.Fatalf("read %q %v", buf, err)
	}
	c.Close()
	f, _ := h.sink.flow(t, "198.18.0.5:80")
	if f.Action != "allow" || f.Host != "app.test" || f.Upstream != "198.18.0.40:80" || f.Rule != "allow[3]" ||
		!strings.Contains(f.Reason, "198.18.0.40 is the upstream nsgate gateway's address for the name") {
		t.Fatalf("record %+v, want the name allowed and the gateway's address dialled", f)
	}

	if _, err := h.dialTCP("198.18.0.6:80"); err == nil {
		t.Fatal("connected through a benchmarking-range answer of a resolver that is no gateway")
	}
	f, _ = h.sink.flow(t, "198.18.0.6:80")
	if f.Action != "deny" || f.Rule != "builtin:special-range" || !slices.Equal(f.Refused, []string{"198.18.0.41"}) ||
		!strings.Contains(f.Reason, "did not answer as an nsgate gateway") {
		t.Fatalf("record %+v, want a special-range denial saying the resolver is no gateway", f)
	}

	if _, err := h.dialTCP("198.18.0.7:80"); err == nil {
		t.Fatal("connected to a private answer marked as a gateway's")
	}
	f, _ = h.sink.flow(t, "198.18.0.7:80")
	if f.Action != "deny" || f.Rule != "builtin:special-range" {
		t.Fatalf("record %+v, want a special-range denial", f)
	}

	dials := h.dialer.list()
	if !slices.Contains(dials, "tcp 198.18.0.40:80") || slices.Contains(dials, "tcp 198.18.0.41:80") || slices.Contains(dials, "tcp 10.1.2.3:80") {
		t.Fatalf("dials %v: want the gateway's address only", dials)
	}
}
