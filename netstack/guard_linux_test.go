package netstack

import (
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// allowAllPolicy allows every address and proto, and names the gateway's
// own subnets and the fake-IP pools by every cidr that could lift a
// special-range guard, and in dns.hosts.
const allowAllPolicy = `
version: 1
allow:
  - {cidr: 0.0.0.0/0, proto: any}
  - {cidr: "::/0", proto: any}
  - {cidr: 10.0.0.0/8, proto: any}
  - {cidr: 10.0.2.0/24, proto: any}
  - {cidr: 10.0.2.2/32, proto: any}
  - {cidr: 10.0.2.3/32, proto: any}
  - {cidr: "fd00::/64", proto: any}
  - {cidr: "fd00::2/128", proto: any}
  - {cidr: 198.18.0.0/15, proto: any}
  - {cidr: 198.19.255.250/32, proto: any}
  - {cidr: "fd6e:7367:6174::/64", proto: any}
  - {host: app.test, proto: any}
  - {host: gw.test, proto: any}
  - {host: pool.test, proto: any}
dns:
  hosts:
    gw.test: [10.0.2.2]
`

// withRawPolicy gives the gateway a policy source without WithLocal, so
// only the gateway's own guard stands between the policy and a dial.
func withRawPolicy(t testing.TB, src string) harnessOpt {
	p, err := policy.Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) { c.Policy = func() *policy.Policy { return p } }
}

// TestGatewayNeverDialled: whatever the policy allows, and whether or not
// its holder called WithLocal, the gateway never dials its own subnets or
// a fake-IP pool address: those flows are refused (RST or ICMP) with rule
// builtin:special-range, while a flow to a fake address that stands for an
// allowed name still reaches the name's real address.
func TestGatewayNeverDialled(t *testing.T) {
	for _, pol := range []struct {
		why string
		opt func(t *testing.T) harnessOpt
	}{
		{"a policy without WithLocal", func(t *testing.T) harnessOpt { return withRawPolicy(t, allowAllPolicy) }},
		{"a policy with WithLocal", func(t *testing.T) harnessOpt { return withPolicy(t, allowAllPolicy) }},
	} {
		t.Run(pol.why, func(t *testing.T) {
			names := &fakeNames{
				fake: map[netip.Addr]string{
					mustAddr("198.18.0.5"):        "app.test",
					mustAddr("198.18.0.6"):        "gw.test",
					mustAddr("198.18.0.7"):        "pool.test",
					mustAddr("fd6e:7367:6174::5"): "app.test",
				},
				answers: map[string][]netip.Addr{
					"app.test":  {mustAddr("203.0.113.10")},
					"gw.test":   {mustAddr("10.0.2.2")}, // as dns.hosts would answer
					"pool.test": {mustAddr("198.18.0.9"), mustAddr("fd6e:7367:6174::9"), mustAddr("fd00::2")},
				},
			}
			h := newHarness(t, withNames(names), pol.opt(t))
			srv := tcpServer(t, "up\n")
			udp := udpEcho(t)
			// Route every forbidden destination to a live server, so a
			// dial would succeed: only the dial list can tell.
			for _, dst := range []string{"203.0.113.10:80", "10.0.2.2:80", "10.0.2.3:80", "[fd00::2]:80", "[fd00::3]:80",
				"198.19.255.250:80", "198.18.0.9:80", "[fd6e:7367:6174::99]:80", "[fd6e:7367:6174::9]:80"} {
				h.dialer.route("tcp", dst, srv)
			}
			h.dialer.route("udp", "10.0.2.2:7", udp)
			h.dialer.route("udp", "198.19.0.1:7", udp)

			for _, dst := range []string{"198.18.0.5:80", "[fd6e:7367:6174::5]:80"} {
				c, err := h.dialTCP(dst)
				if err != nil {
					t.Fatalf("a fake address of an allowed name: dial %s: %v", dst, err)
				}
				buf := make([]byte, 3)
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "up\n" {
					t.Fatalf("read %q %v", buf, err)
				}
				c.Close()
			}

			for _, tc := range []struct {
				dst, why string
			}{
				{"10.0.2.2:80", "the IPv4 gateway, though cidr rules equal to and inside its subnet allow it"},
				{"10.0.2.3:80", "the DNS address on another port"},
				{"[fd00::2]:80", "the IPv6 gateway"},
				{"[fd00::3]:80", "the IPv6 DNS address on another port"},
				{"198.19.255.250:80", "an unallocated fake address, though a /32 rule allows it"},
				{"[fd6e:7367:6174::99]:80", "an unallocated IPv6 fake address"},
				{"198.18.0.6:80", "a name whose dns.hosts answer is the gateway"},
				{"198.18.0.7:80", "a name whose upstream answers are fake addresses and the gateway"},
			} {
				t.Run(tc.dst, func(t *testing.T) {
					if c, err := h.dialTCP(tc.dst); err == nil {
						c.Close()
						t.Fatalf("%s: worker connected", tc.why)
					}
					f, _ := h.sink.flow(t, tc.dst)
					if f.Action != "deny" || f.Rule != policy.RuleSpecialRange || !strings.Contains(f.Reason, "the gateway's own addresses") {
						t.Fatalf("%s: record %+v, want deny rule=%s for the gateway's own addresses", tc.why, f, policy.RuleSpecialRange)
					}
				})
			}
			for _, dst := range []string{"10.0.2.2:7", "198.19.0.1:7"} {
				t.Run("udp "+dst, func(t *testing.T) {
					c := h.dialUDP(t, dst)
					c.Write([]byte("ping"))
					f, _ := h.sink.flow(t, dst)
					if f.Action != "deny" || f.Proto != "udp" || f.Rule != policy.RuleSpecialRange {
						t.Fatalf("record %+v", f)
					}
				})
			}
			want := []string{"tcp 203.0.113.10:80", "tcp 203.0.113.10:80"}
			if d := h.dialer.list(); !slices.Equal(d, want) {
				t.Fatalf("dials %v, want only %v", d, want)
			}
		})
	}
}

// TestGuardFollowsReload: a new policy from the source is guarded too, and
// decides from then on.
func TestGuardFollowsReload(t *testing.T) {
	var cur atomic.Pointer[policy.Policy]
	first, err := policy.Parse("a.yaml", []byte("version: 1\nallow:\n  - {cidr: 203.0.113.0/24, ports: [8080]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(first)
	h := newHarness(t, func(c *Config) { c.Policy = cur.Load })
	h.dialer.route("tcp", "203.0.113.10:8080", tcpServer(t, "x"))
	c, err := h.dialTCP("203.0.113.10:8080")
	if err != nil {
		t.Fatalf("first policy: %v", err)
	}
	c.Close()

	second, err := policy.Parse("b.yaml", []byte(allowAllPolicy))
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(second)
	if c, err := h.dialTCP("203.0.113.10:8080"); err != nil {
		t.Fatalf("second policy: %v", err)
	} else {
		c.Close()
	}
	if c, err := h.dialTCP("10.0.2.2:8080"); err == nil {
		c.Close()
		t.Fatal("connected to the gateway after a reload")
	}
	f, _ := h.sink.flow(t, "10.0.2.2:8080")
	if f.Rule != policy.RuleSpecialRange {
		t.Fatalf("record %+v", f)
	}
	if g := h.g.guarded.Load(); g == nil || g.src != second {
		t.Fatalf("cached guard is for %v, want the second policy", g)
	}
}

// TestReloadRemovesName: a name that a reload removes is refused on the
// next flow to its fake address, although the worker still holds that
// address (from an answer given under the old policy) and the new policy
// allows the name's upstream address by cidr: a flow to a fake address
// is a flow to its name, decided by the policy in force when it opens.
// A connection opened before the reload keeps its policy (docs/policy.md,
// "Reload").
func TestReloadRemovesName(t *testing.T) {
	var cur atomic.Pointer[policy.Policy]
	cur.Store(mustPolicy(t, "version: 1\nallow:\n  - {host: app.test, ports: [80]}\n"))
	names := &fakeNames{
		fake:    map[netip.Addr]string{mustAddr("198.18.0.5"): "app.test"},
		answers: map[string][]netip.Addr{"app.test": {mustAddr("203.0.113.10")}},
	}
	h := newHarness(t, withNames(names), func(c *Config) { c.Policy = cur.Load })
	h.dialer.route("tcp", "203.0.113.10:80", serveTCP(t, func(c *net.TCPConn) { io.Copy(c, c) }))
	old, err := h.dialTCP("198.18.0.5:80")
	if err != nil {
		t.Fatalf("under the first policy: %v", err)
	}
	defer old.Close()
	h.sink.flowBySrc(t, old.LocalAddr().String())
	dials := len(h.dialer.list())

	cur.Store(mustPolicy(t, "version: 1\nallow:\n  - {cidr: 203.0.113.0/24, ports: [80]}\n"))
	if c, err := h.dialTCP("198.18.0.5:80"); err == nil {
		c.Close()
		t.Fatal("a flow to the removed name's fake address connected after the reload")
	}
	f, _ := h.sink.waitEvent(t, "the refused flow", func(ev audit.Event) bool {
		f, ok := ev.(audit.Flow)
		return ok && f.Action == "deny" && f.Host == "app.test"
	})
	if got := h.dialer.list(); len(got) != dials {
		t.Fatalf("dialled %q after the reload; the record was %+v", got[dials:], f)
	}
	// The connection opened before the reload still relays.
	old.SetDeadline(time.Now().Add(5 * time.Second))
	const request = "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"
	if _, err := old.Write([]byte(request)); err != nil {
		t.Fatalf("the open connection: %v", err)
	}
	buf := make([]byte, len(request))
	if _, err := io.ReadFull(old, buf); err != nil || string(buf) != request {
		t.Fatalf("the open connection read %q, %v%s", buf, err, h.sink.dump())
	}
}
