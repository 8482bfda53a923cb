package netstack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
)

func TestTCPAllowed(t *testing.T) {
	for _, dst := range []string{"203.0.113.10:8080", "[2001:db8::10]:8080"} {
		t.Run(dst, func(t *testing.T) {
			h := newHarness(t)
			h.dialer.route("tcp", dst, tcpServer(t, "hello from upstream\n"))

			c, err := h.dialTCP(dst)
			if err != nil {
				t.Fatalf("worker dial %s: %v", dst, err)
			}
			greeting := make([]byte, 20)
			if _, err := io.ReadFull(c, greeting); err != nil || string(greeting) != "hello from upstream\n" {
				t.Fatalf("greeting %q, %v", greeting, err)
			}
			// A larger payload echoes back intact.
			payload := bytes.Repeat([]byte("nsgate"), 40000)
			go func() { c.Write(payload); c.CloseWrite() }()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("echo: %d bytes, %v; want %d", len(got), err, len(payload))
			}
			c.Close()

			f, seq := h.sink.flow(t, dst)
			if f.Action != "allow" || f.Rule == "" || f.Upstream != dst || f.Proto != "tcp" || !strings.HasPrefix(f.Src, Guest4) && !strings.Contains(f.Src, Guest6) {
				t.Fatalf("flow record %+v", f)
			}
			end := h.sink.flowEnd(t, seq)
			if end.BytesOut != int64(len(payload)) || end.BytesIn != int64(len(payload)+20) {
				t.Fatalf("flow_end %+v; want %d out, %d in", end, len(payload), len(payload)+20)
			}
			if st := h.g.Stats(); st.TCPAllowed != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestTCPDenied(t *testing.T) {
	tests := []struct {
		dst  string
		rule string
		why  string
	}{
		{"198.51.100.7:80", "default", "no rule allows it"},
		{"203.0.113.10:22", "default", "the cidr is allowed on other ports only"},
		{"203.0.113.66:8080", "deny[0]", "a deny rule beats the allow cidr"},
		{"169.254.169.254:80", "builtin:metadata", "the metadata address is never reachable"},
		{"169.254.169.254:9999", "builtin:metadata", "not even through an allow-all cidr"},
		{"10.0.2.2:80", "builtin:special-range", "the gateway's own address goes through the guard"},
		{"10.0.2.3:80", "builtin:special-range", "the DNS address, other than port 53, too"},
		{"127.0.0.1:9999", "", "loopback is a martian destination, dropped before the stack"},
		{"[fd00::2]:80", "builtin:special-range", "the IPv6 gateway"},
		{"[fd00:ec2::254]:80", "builtin:metadata", "IPv6 metadata"},
	}
	h := newHarness(t)
	for _, tc := range tests {
		t.Run(tc.dst, func(t *testing.T) {
			start := time.Now()
			c, err := h.dialTCP(tc.dst)
			if err == nil {
				c.Close()
				t.Fatalf("%s: worker connected to %s", tc.why, tc.dst)
			}
			if tc.rule == "" {
				// Martian: the filter denies the SYN without an answer.
				h.sink.packet(t, ap(tc.dst).Addr().String(), "martian")
				return
			}
			if !errors.Is(err, syscall.ECONNREFUSED) && !strings.Contains(err.Error(), "refused") {
				t.Fatalf("%s: worker error %v, want connection refused (RST)", tc.why, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("%s: refusal took %v", tc.why, d)
			}
			f, _ := h.sink.flow(t, tc.dst)
			if f.Action != "deny" || f.Rule != tc.rule || f.Reason == "" {
				t.Fatalf("%s: record %+v, want deny rule=%s", tc.why, f, tc.rule)
			}
		})
	}
	if d := h.dialer.list(); len(d) != 0 {
		t.Fatalf("denied flows were dialed: %v", d)
	}
	if st := h.g.Stats(); st.TCPAllowed != 0 || st.TCPDenied == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMappedMetadataRaw sends TCP and UDP in IPv6 packets to
// ::ffff:169.254.169.254 (a worker's own stack would send IPv4 instead;
// gVisor drops such packets unseen): they must be refused and recorded as
// metadata flows, never dialed.
func TestMappedMetadataRaw(t *testing.T) {
	h := newHarness(t)
	dst := ap("[::ffff:169.254.169.254]:80")
	h.inject(t, tcpSyn(ap("[fd00::100]:40001"), dst))
	rst := h.rec.wait(2*time.Second, func(b []byte) bool {
		fl, ok := tcpFlags(b)
		return ok && fl&0x04 != 0 && binary.BigEndian.Uint16(b[42:44]) == 40001
	})
	if rst == nil {
		t.Fatal("no RST for the refused SYN")
	}
	f, _ := h.sink.flow(t, dst.String())
	if f.Action != "deny" || f.Rule != "builtin:metadata" || f.Proto != "tcp" {
		t.Fatalf("record %+v", f)
	}

	udst := ap("[::ffff:169.254.169.254]:53")
	h.inject(t, udpPacket(ap("[fd00::100]:40002"), udst, []byte("q")))
	if h.rec.wait(2*time.Second, func(b []byte) bool {
		typ, code, ok := icmpInfo(b)
		return ok && typ == 1 && code == 1
	}) == nil {
		t.Fatal("no ICMPv6 administratively prohibited for the UDP datagram")
	}
	f, _ = h.sink.flow(t, udst.String())
	if f.Action != "deny" || f.Rule != "builtin:metadata" || f.Proto != "udp" {
		t.Fatalf("record %+v", f)
	}
	// Even an allowed IPv4 destination cannot be reached this way.
	adst := ap("[::ffff:203.0.113.10]:8080")
	h.inject(t, tcpSyn(ap("[fd00::100]:40003"), adst))
	f, _ = h.sink.flow(t, adst.String())
	if f.Action != "deny" || f.Rule != "allow[0]" || !strings.Contains(f.Reason, "ipv4-mapped") {
		t.Fatalf("record %+v", f)
	}
	if d := h.dialer.list(); len(d) != 0 {
		t.Fatalf("dialed %v", d)
	}
}

func TestDialFailure(t *testing.T) {
	h := newHarness(t)
	// 203.0.113.20:8080 is allowed but not routed by the test dialer.
	_, err := h.dialTCP("203.0.113.20:8080")
	if err == nil {
		t.Fatal("connected although the dial failed")
	}
	f, _ := h.sink.flow(t, "203.0.113.20:8080")
	if f.Action != "fail" || f.Rule != "allow[0]" || !strings.HasPrefix(f.Reason, "dial: ") {
		t.Fatalf("record %+v, want fail (allowed, then the dial failed) with the allowing rule and a dial: reason", f)
	}
	if st := h.g.Stats(); st.DialFailed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFlowLimit(t *testing.T) {
	h := newHarness(t, withLimits(Limits{MaxFlows: 1, DialTimeout: 3 * time.Second}))
	h.dialer.route("tcp", "203.0.113.10:8080", tcpServer(t, "hi"))
	h.dialer.route("tcp", "203.0.113.11:8080", tcpServer(t, "hi"))
	first, err := h.dialTCP("203.0.113.10:8080")
	if err != nil {
		t.Fatalf("first flow: %v", err)
	}
	defer first.Close()
	if _, err := io.ReadFull(first, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.dialTCP("203.0.113.11:8080"); err == nil {
		t.Fatal("second flow connected beyond MaxFlows=1")
	}
	f, _ := h.sink.flow(t, "203.0.113.11:8080")
	if f.Action != "deny" || !strings.HasPrefix(f.Reason, "limit: ") {
		t.Fatalf("record %+v, want a limit denial", f)
	}
	if d := h.dialer.list(); slices.Contains(d, "tcp 203.0.113.11:8080") {
		t.Fatalf("the refused flow was dialed: %v", d)
	}
	if st := h.g.Stats(); st.LimitRefused != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestUDPAllowed(t *testing.T) {
	for _, dst := range []string{"203.0.113.10:7", "[2001:db8::10]:7"} {
		t.Run(dst, func(t *testing.T) {
			h := newHarness(t, withLimits(Limits{UDPIdle: 300 * time.Millisecond}))
			h.dialer.route("udp", dst, udpEcho(t))
			c := h.dialUDP(t, dst)
			buf := make([]byte, 2000)
			for i, msg := range []string{"one", "two", strings.Repeat("x", 1400)} {
				if _, err := c.Write([]byte(msg)); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				n, err := c.Read(buf)
				if err != nil || string(buf[:n]) != msg {
					t.Fatalf("datagram %d: got %q, %v", i, buf[:n], err)
				}
			}
			f, seq := h.sink.flow(t, dst)
			if f.Action != "allow" || f.Proto != "udp" {
				t.Fatalf("record %+v", f)
			}
			end := h.sink.flowEnd(t, seq) // after UDPIdle
			if end.Error != "idle timeout" || end.BytesOut != 1406 || end.BytesIn != 1406 {
				t.Fatalf("flow_end %+v", end)
			}
			if d := h.dialer.list(); len(d) != 1 {
				t.Fatalf("one flow, dials %v", d)
			}
		})
	}
}

func TestUDPDenied(t *testing.T) {
	tests := []struct {
		dst       string
		typ, code uint8
		rule      string
		why       string
	}{
		{"198.51.100.7:9", 3, 13, "default", "no udp rule covers it"},
		{"203.0.113.10:8080", 3, 13, "default", "the tcp-only rule does not allow udp"},
		{"169.254.169.254:53", 3, 13, "builtin:metadata", "metadata over udp"},
		{"10.0.2.3:53", 3, 13, "builtin:special-range", "without Names, DNS to 10.0.2.3 is a flow like any other"},
		{"[2001:db8::10]:9", 1, 1, "default", "IPv6 gets ICMPv6 type 1 code 1"},
	}
	h := newHarness(t)
	for _, tc := range tests {
		t.Run(tc.dst, func(t *testing.T) {
			c := h.dialUDP(t, tc.dst)
			if _, err := c.Write([]byte("hello?")); err != nil {
				t.Fatal(err)
			}
			dst := ap(tc.dst)
			icmp := h.rec.wait(2*time.Second, func(b []byte) bool {
				typ, code, ok := icmpInfo(b)
				if !ok || typ != tc.typ || code != tc.code {
					return false
				}
				// The quote names the refused datagram.
				off := 28
				if dst.Addr().Is6() {
					off = 48
				}
				q := b[off:]
				if dst.Addr().Is4() {
					return len(q) >= 28 && netip.AddrFrom4([4]byte(q[16:20])) == dst.Addr() &&
						binary.BigEndian.Uint16(q[22:24]) == dst.Port()
				}
				return len(q) >= 48 && netip.AddrFrom16([16]byte(q[24:40])) == dst.Addr() &&
					binary.BigEndian.Uint16(q[42:44]) == dst.Port()
			})
			if icmp == nil {
				t.Fatalf("%s: no ICMP %d/%d quoting the datagram", tc.why, tc.typ, tc.code)
			}
			// A Linux worker's socket turns this into EHOSTUNREACH
			// (IPv4) or EACCES (IPv6) on its next call; gVisor, the
			// worker here, ignores code 13, so the test checks the
			// packet itself.
			f, _ := h.sink.flow(t, tc.dst)
			if f.Action != "deny" || f.Rule != tc.rule || f.Proto != "udp" {
				t.Fatalf("%s: record %+v, want rule %s", tc.why, f, tc.rule)
			}
		})
	}
	if d := h.dialer.list(); len(d) != 0 {
		t.Fatalf("denied UDP flows were dialed: %v", d)
	}
}

func TestICMP(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		dst   string
		reply bool
		why   string
	}{
		{Gateway4, true, "ping to the gateway is answered"},
		{Gateway6, true, "over IPv6 too"},
		{"203.0.113.10", false, "ping elsewhere is administratively prohibited"},
		{"2001:db8::10", false, "over IPv6 too"},
		{DNS4, false, "the DNS address does not answer ping"},
	}
	for i, tc := range tests {
		t.Run(tc.dst, func(t *testing.T) {
			dst := mustAddr(tc.dst)
			src := mustAddr(Guest4)
			if dst.Is6() {
				src = mustAddr(Guest6)
			}
			id := uint16(100 + i)
			h.inject(t, icmpEcho(src, dst, id, 1))
			got := h.rec.wait(2*time.Second, func(b []byte) bool {
				typ, _, ok := icmpInfo(b)
				if !ok {
					return false
				}
				if b[0]>>4 == 4 != dst.Is4() || !bytes.Contains(b, []byte("ping")) {
					return false
				}
				if tc.reply {
					return (typ == 0 || typ == 129) && binary.BigEndian.Uint16(b[len(b)-8:]) == id
				}
				return (typ == 3 || typ == 1) && bytes.Contains(b, dst.AsSlice())
			})
			if got == nil {
				t.Fatalf("%s: no answer", tc.why)
			}
			typ, code, _ := icmpInfo(got)
			if !tc.reply {
				if dst.Is4() && (typ != 3 || code != 13) || dst.Is6() && (typ != 1 || code != 1) {
					t.Fatalf("%s: got type %d code %d", tc.why, typ, code)
				}
				p := h.sink.packet(t, tc.dst, "icmp echo")
				if p.Action != "deny" {
					t.Fatalf("record %+v", p)
				}
			}
		})
	}
}

func TestRawProtocols(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		dst   string
		proto uint8
		name  string
		why   string
	}{
		{"203.0.113.10", 253, "ip-253", "an experimental protocol"},
		{"203.0.113.11", 47, "gre", "GRE tunnels are not forwarded"},
		{"203.0.113.12", 132, "sctp", "SCTP is not forwarded"},
		{"2001:db8::12", 132, "sctp", "nor over IPv6"},
		{"10.0.2.2", 2, "igmp", "IGMP to the gateway"},
	}
	for _, tc := range tests {
		t.Run(tc.name+"-"+tc.dst, func(t *testing.T) {
			dst := mustAddr(tc.dst)
			src := mustAddr(Guest4)
			if dst.Is6() {
				src = mustAddr(Guest6)
			}
			h.inject(t, rawProto(src, dst, tc.proto))
			got := h.rec.wait(2*time.Second, func(b []byte) bool {
				typ, code, ok := icmpInfo(b)
				return ok && (typ == 3 && code == 13 || typ == 1 && code == 1) && bytes.Contains(b, []byte("payload!")) &&
					bytes.Contains(b, dst.AsSlice())
			})
			if got == nil {
				t.Fatalf("%s: no administratively prohibited", tc.why)
			}
			p := h.sink.packet(t, tc.dst, "ip protocol")
			if p.Proto != tc.name || p.Action != "deny" || p.Src != src.String() {
				t.Fatalf("%s: record %+v", tc.why, p)
			}
		})
	}
}

func TestMalformedDropped(t *testing.T) {
	h := newHarness(t)
	syn := tcpSyn(ap("10.0.2.100:40000"), ap("203.0.113.10:8080"))
	syn6 := tcpSyn(ap("[fd00::100]:40000"), ap("[2001:db8::10]:8080"))
	// fdbased itself drops packets too short to hold an IP header and
	// four more bytes, or of another IP version, before the filter sees
	// them; these get through to the filter.
	bad := [][]byte{
		syn[:30],
		withFix(syn, func(b []byte) { b[10] ^= 1 }, true),
		withFix(syn, func(b []byte) { b[2] = 0xff }, false),
		withFix(syn, func(b []byte) { b[0] = 0x41 }, false),
		withFix(syn6, func(b []byte) { b[4] = 0xff }, true),
		ip6(mustAddr(Guest6), mustAddr("2001:db8::10"), protoDestOpts, []byte{6, 200, 0, 0, 0, 0, 0, 0}),
	}
	for _, b := range bad {
		h.inject(t, b)
	}
	deadline := time.Now().Add(2 * time.Second)
	for h.g.Stats().Malformed < uint64(len(bad)) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := h.g.Stats(); st.Malformed != uint64(len(bad)) || st.TCPAllowed+st.TCPDenied != 0 {
		t.Fatalf("stats %+v, want %d malformed and no flows", st, len(bad))
	}
	if d := h.dialer.list(); len(d) != 0 {
		t.Fatalf("dialed %v", d)
	}
}

func TestIPv6Off(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.IPv6 = false })
	h.inject(t, icmpEcho(mustAddr(Guest6), mustAddr(Gateway6), 1, 1))
	h.inject(t, tcpSyn(ap("[fd00::100]:1000"), ap("[2001:db8::10]:8080")))
	deadline := time.Now().Add(2 * time.Second)
	for h.g.Stats().Dropped < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := h.g.Stats(); st.Dropped != 2 {
		t.Fatalf("stats %+v, want 2 dropped", st)
	}
	if got := h.rec.wait(100*time.Millisecond, func(b []byte) bool { return len(b) > 0 && b[0]>>4 == 6 }); got != nil {
		t.Fatalf("gateway answered IPv6 while it is off: % x", got)
	}
}

func TestNameFlows(t *testing.T) {
	names := &fakeNames{
		fake: map[netip.Addr]string{
			mustAddr("198.18.0.5"):        "app.test",
			mustAddr("198.18.0.6"):        "private.test",
			mustAddr("198.18.0.7"):        "mixed.test",
			mustAddr("198.18.0.8"):        "evil.test",
			mustAddr("fd6e:7367:6174::5"): "app.test",
		},
		answers: map[string][]netip.Addr{
			"app.test":     {mustAddr("203.0.113.10")},
			"private.test": {mustAddr("10.1.2.3"), mustAddr("192.168.1.1")},
			"mixed.test":   {mustAddr("169.254.169.254"), mustAddr("10.9.9.9"), mustAddr("203.0.113.11")},
			"evil.test":    {mustAddr("203.0.113.12")},
		},
	}
	h := newHarness(t, withNames(names))
	srv := tcpServer(t, "named\n")
	h.dialer.route("tcp", "203.0.113.10:80", srv)
	h.dialer.route("tcp", "203.0.113.11:80", srv)

	t.Run("allowed", func(t *testing.T) {
		for _, dst := range []string{"198.18.0.5:80", "[fd6e:7367:6174::5]:80"} {
			c, err := h.dialTCP(dst)
			if err != nil {
				t.Fatalf("dial %s: %v", dst, err)
			}
			buf := make([]byte, 6)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "named\n" {
				t.Fatalf("read %q %v", buf, err)
			}
			c.Close()
			f, _ := h.sink.flow(t, dst)
			if f.Action != "allow" || f.Host != "app.test" || f.Upstream != "203.0.113.10:80" || f.Rule != "allow[3]" {
				t.Fatalf("record %+v", f)
			}
		}
	})
	t.Run("private-answers", func(t *testing.T) {
		if _, err := h.dialTCP("198.18.0.6:80"); err == nil {
			t.Fatal("connected to a name whose answers are private")
		}
		f, _ := h.sink.flow(t, "198.18.0.6:80")
		if f.Action != "deny" || f.Rule != "builtin:special-range" || !slices.Equal(f.Refused, []string{"10.1.2.3", "192.168.1.1"}) {
			t.Fatalf("record %+v, want special-range deny refusing both answers", f)
		}
	})
	t.Run("mixed-answers", func(t *testing.T) {
		c, err := h.dialTCP("198.18.0.7:80")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.Close()
		f, _ := h.sink.flow(t, "198.18.0.7:80")
		if f.Action != "allow" || f.Upstream != "203.0.113.11:80" || !slices.Equal(f.Refused, []string{"169.254.169.254", "10.9.9.9"}) {
			t.Fatalf("record %+v, want the public answer dialed and the others refused", f)
		}
	})
	t.Run("denied-name", func(t *testing.T) {
		if _, err := h.dialTCP("198.18.0.8:80"); err == nil {
			t.Fatal("connected to a name no rule allows")
		}
		f, _ := h.sink.flow(t, "198.18.0.8:80")
		if f.Action != "deny" || f.Host != "evil.test" || f.Rule != "default" {
			t.Fatalf("record %+v", f)
		}
		if slices.Contains(names.resolvedNames(), "evil.test") {
			t.Fatal("a denied name was resolved")
		}
	})
	t.Run("stale-fake", func(t *testing.T) {
		// A fake address no name stands for is an IP flow into a
		// special range.
		if _, err := h.dialTCP("198.18.0.99:80"); err == nil {
			t.Fatal("connected to an unallocated fake address")
		}
		f, _ := h.sink.flow(t, "198.18.0.99:80")
		if f.Action != "deny" || f.Rule != "builtin:special-range" {
			t.Fatalf("record %+v", f)
		}
	})
	want := []string{"tcp 203.0.113.10:80", "tcp 203.0.113.10:80", "tcp 203.0.113.11:80"}
	if d := h.dialer.list(); !slices.Equal(d, want) {
		t.Fatalf("dials %v, want exactly %v (checked addresses only)", d, want)
	}
}

func TestDNS(t *testing.T) {
	h := newHarness(t, withNames(&fakeNames{}))
	for _, dst := range []string{"10.0.2.3:53", "[fd00::3]:53"} {
		t.Run("udp-"+dst, func(t *testing.T) {
			c := h.dialUDP(t, dst)
			c.Write([]byte("query1"))
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 100)
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "re:udp:query1" {
				t.Fatalf("answer %q, %v", buf[:n], err)
			}
		})
		t.Run("tcp-"+dst, func(t *testing.T) {
			c, err := h.dialTCP(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Two queries in one write, then one more: each is
			// answered in order on the same connection.
			frame := func(s string) []byte {
				return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...)
			}
			c.Write(append(frame("a"), frame("bb")...))
			c.Write(frame("ccc"))
			for _, want := range []string{"re:tcp:a", "re:tcp:bb", "re:tcp:ccc"} {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
					t.Fatalf("answer %q, %v; want %q", got, err, want)
				}
			}
			// A query Names drops closes the connection.
			c.Write(frame("drop"))
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if n, err := c.Read(make([]byte, 10)); err == nil {
				t.Fatalf("read %d bytes after a dropped query", n)
			}
		})
	}
	if st := h.g.Stats(); st.DNSQueries < 2*5 {
		t.Fatalf("stats %+v", st)
	}
	if d := h.dialer.list(); len(d) != 0 {
		t.Fatalf("DNS was dialed upstream: %v", d)
	}
	// Other ports on the DNS address are still flows the guard refuses.
	if _, err := h.dialTCP("10.0.2.3:853"); err == nil {
		t.Fatal("connected to 10.0.2.3:853")
	}
	f, _ := h.sink.flow(t, "10.0.2.3:853")
	if f.Rule != "builtin:special-range" {
		t.Fatalf("record %+v", f)
	}
}

func TestCloseEndsRelays(t *testing.T) {
	h := newHarness(t)
	h.dialer.route("tcp", "203.0.113.10:8080", tcpServer(t, "hi"))
	c, err := h.dialTCP("203.0.113.10:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.ReadFull(c, make([]byte, 2))
	_, seq := h.sink.flow(t, "203.0.113.10:8080")
	done := make(chan struct{})
	go func() { h.g.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung with an open relay")
	}
	if end := h.sink.flowEnd(t, seq); end.Error != "gateway shut down" {
		t.Fatalf("flow_end %+v", end)
	}
	h.g.Close() // idempotent
}

func TestPcap(t *testing.T) {
	var buf syncBuffer
	h := newHarness(t, func(c *Config) { c.Pcap = &buf })
	h.inject(t, icmpEcho(mustAddr(Guest4), mustAddr(Gateway4), 7, 1))
	if h.rec.wait(2*time.Second, func(b []byte) bool { typ, _, ok := icmpInfo(b); return ok && typ == 0 }) == nil {
		t.Fatal("no echo reply")
	}
	h.g.Close()
	b := buf.Bytes()
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(b[20:]) != 101 {
		t.Fatalf("not a LINKTYPE_RAW pcap: % x", b[:min(len(b), 24)])
	}
	// Header + request + reply.
	if n := countPcapRecords(b[24:]); n < 2 {
		t.Fatalf("%d packets captured, want request and reply", n)
	}
}

// TestPcapWriteErrorDoesNotPanic: a pcap that cannot be written (a full
// disk) stops the capture, not the gateway, and what it lost is counted,
// also what was still buffered when the write failed: the writes of the
// file header, the request and the reply.
func TestPcapWriteErrorDoesNotPanic(t *testing.T) {
	w := &failAfter{n: 0}
	h := newHarness(t, func(c *Config) { c.Pcap = w })
	h.inject(t, icmpEcho(mustAddr(Guest4), mustAddr(Gateway4), 8, 1))
	if h.rec.wait(2*time.Second, func(b []byte) bool { typ, _, ok := icmpInfo(b); return ok && typ == 0 }) == nil {
		t.Fatal("no echo reply after a pcap write error")
	}
	h.g.Close()
	if st := h.g.Stats(); st.PcapDropped < 3 || h.g.PcapErr() == nil {
		t.Fatalf("stats %+v, pcap error %v: want the lost writes counted and the error kept", st, h.g.PcapErr())
	}
}

// TestPcapIsBounded: the worker chooses how many packets cross its link
// (a refused UDP flood wrote 626 MB in 3 s), so a capture through
// Config.PcapMax stops at its bound: it holds the file header and whole packets
// only, never more than the bound, and the packets past it are counted.
func TestPcapIsBounded(t *testing.T) {
	var buf syncBuffer
	const bound = 24 + (16 + 32) + 20 // the header and one 32-byte echo, not two
	h := newHarness(t, func(c *Config) { c.Pcap, c.PcapMax = &buf, bound })
	for i := 1; i <= 6; i++ {
		h.inject(t, icmpEcho(mustAddr(Guest4), mustAddr(Gateway4), 9, uint16(i)))
	}
	if h.rec.wait(2*time.Second, func(b []byte) bool { typ, _, ok := icmpInfo(b); return ok && typ == 0 }) == nil {
		t.Fatal("no echo reply")
	}
	st := h.g.Stats()
	h.g.Close()
	b := buf.Bytes()
	if len(b) > bound {
		t.Fatalf("the capture holds %d bytes, over its bound of %d", len(b), bound)
	}
	n := countPcapRecords(b[24:])
	if st.PcapDropped == 0 || n == 0 {
		t.Fatalf("%d packets captured, %d dropped; want some of each", n, st.PcapDropped)
	}
	rest := b[24:]
	for i := 0; i < n; i++ {
		rest = rest[16+int(binary.LittleEndian.Uint32(rest[8:])):]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes after the last whole packet: the bound cut a record", len(rest))
	}
}

// TestPcapWritesInBulk: the capture reaches the writer in large writes
// (the gateway buffers it), and all of it by Close, before Stats (the exit
// record) is read.
func TestPcapWritesInBulk(t *testing.T) {
	var buf syncBuffer
	cw := &countingWriter{w: &buf}
	h := newHarness(t, func(c *Config) { c.Pcap = cw })
	h.inject(t, icmpEcho(mustAddr(Guest4), mustAddr(Gateway4), 9, 1))
	if h.rec.wait(2*time.Second, func(b []byte) bool { typ, _, ok := icmpInfo(b); return ok && typ == 0 }) == nil {
		t.Fatal("no echo reply")
	}
	if cw.writes != 0 {
		t.Fatalf("%d writes before Close, want the capture held in the buffer", cw.writes)
	}
	h.g.Close()
	if n := countPcapRecords(buf.Bytes()[24:]); n < 2 || cw.writes != 1 {
		t.Fatalf("%d packets in %d writes, want the request and the reply, with the header, in one", n, cw.writes)
	}
}

type countingWriter struct {
	w      io.Writer
	writes int
}

func (c *countingWriter) Write(b []byte) (int, error) { c.writes++; return c.w.Write(b) }

func countPcapRecords(b []byte) int {
	n := 0
	for len(b) >= 16 {
		l := int(binary.LittleEndian.Uint32(b[8:]))
		if 16+l > len(b) {
			break
		}
		b = b[16+l:]
		n++
	}
	return n
}

var _ audit.Sink = (*fakeSink)(nil)

func TestUDPLimitAndNames(t *testing.T) {
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.9"): "dns.test"},
		answers: map[string][]netip.Addr{"dns.test": {mustAddr("203.0.113.53")}},
	}
	h := newHarness(t, withNames(names), withPolicy(t, `
version: 1
allow:
  - host: dns.test
    ports: [5353]
    proto: udp
    l7: none
  - cidr: 203.0.113.0/24
    ports: [7]
    proto: udp
`), withLimits(Limits{MaxUDPFlows: 1, UDPIdle: time.Minute, DialTimeout: 3 * time.Second}))
	h.dialer.route("udp", "203.0.113.53:5353", udpEcho(t))
	h.dialer.route("udp", "203.0.113.10:7", udpEcho(t))

	// A UDP flow to a fake address is dialed at the resolved address.
	c := h.dialUDP(t, "198.18.0.9:5353")
	c.Write([]byte("via name"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 100)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "via name" {
		t.Fatalf("echo %q, %v", buf[:n], err)
	}
	f, _ := h.sink.flow(t, "198.18.0.9:5353")
	if f.Action != "allow" || f.Host != "dns.test" || f.Upstream != "203.0.113.53:5353" {
		t.Fatalf("record %+v", f)
	}

	// A second concurrent flow is over MaxUDPFlows=1.
	c2 := h.dialUDP(t, "203.0.113.10:7")
	c2.Write([]byte("second"))
	if h.rec.wait(2*time.Second, func(b []byte) bool {
		typ, code, ok := icmpInfo(b)
		return ok && typ == 3 && code == 13
	}) == nil {
		t.Fatal("no ICMP for the flow over the limit")
	}
	f, _ = h.sink.flow(t, "203.0.113.10:7")
	if f.Action != "deny" || f.Rule != "allow[1]" || !strings.HasPrefix(f.Reason, "limit: ") {
		t.Fatalf("record %+v", f)
	}
	if d := h.dialer.list(); !slices.Equal(d, []string{"udp 203.0.113.53:5353"}) {
		t.Fatalf("dials %v", d)
	}
}

func BenchmarkTCPUpload(b *testing.B) {
	for _, mtu := range []uint32{1500, 65520} {
		b.Run(fmt.Sprint("mtu", mtu), func(b *testing.B) {
			h := newHarness(b, func(c *Config) { c.MTU = mtu })
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					io.Copy(io.Discard, c)
					c.Close()
				}
			}()
			h.dialer.route("tcp", "203.0.113.10:8080", ln.Addr().String())
			c, err := h.dialTCP("203.0.113.10:8080")
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTCPDownload(b *testing.B) {
	h := newHarness(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	h.dialer.route("tcp", "203.0.113.10:8080", ln.Addr().String())
	c, err := h.dialTCP("203.0.113.10:8080")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}
