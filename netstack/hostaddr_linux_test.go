package netstack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/policy"
)

// hostAddrPolicy allows every address on port 5432 by the broadest rules,
// one of the host's addresses by a rule naming it exactly, and two names:
// one by dns.hosts, one answered upstream.
const hostAddrPolicy = `
version: 1
allow:
  - {cidr: 0.0.0.0/0, ports: [5432, 5433], proto: any} # allow[0]
  - {cidr: "::/0", ports: [5432], proto: any}         # allow[1]
  - {cidr: 198.51.100.0/24, ports: [5432]}            # allow[2]: the host's subnet, broader than its address
  - {cidr: 198.51.100.51/32, ports: [5432]}           # allow[3]: exactly one host address
  - {host: rebind.test, ports: [5432]}                # allow[4]
  - {host: db.test, ports: [5432]}                    # allow[5]
dns:
  hosts:
    db.test: [198.51.100.50]
`

// TestHostAddrsGuarded: a flow to one of the host's own addresses (as
// Config.HostAddrs reports them) is refused with rule
// builtin:special-range and a reason naming the host's own address,
// never dialled, although 0.0.0.0/0 and ::/0 allow the port: as an
// address (IPv4, IPv6), over UDP, and as the
// upstream answer for an allowed name. A rule naming exactly the address
// and a dns.hosts entry holding it open it. The set is read again when
// the source gives a new one.
func TestHostAddrsGuarded(t *testing.T) {
	var host atomic.Pointer[policy.HostAddrs]
	host.Store(policy.NewHostAddrs([]netip.Addr{
		mustAddr("198.51.100.50"), mustAddr("198.51.100.51"), mustAddr("2001:db8::50"),
	}))
	names := &fakeNames{
		fake: map[netip.Addr]string{
			mustAddr("198.18.0.5"): "rebind.test",
			mustAddr("198.18.0.6"): "db.test",
		},
		answers: map[string][]netip.Addr{
			"rebind.test": {mustAddr("198.51.100.50"), mustAddr("2001:db8::50")},
			"db.test":     {mustAddr("198.51.100.50")}, // as dns.hosts answers
		},
	}
	h := newHarness(t, withNames(names), withPolicy(t, hostAddrPolicy), func(c *Config) { c.HostAddrs = host.Load })
	srv := tcpServer(t, "db\n")
	udp := udpEcho(t)
	// Every destination leads to a live server, so a dial would succeed:
	// only the dial list tells.
	for _, dst := range []string{"198.51.100.50:5432", "198.51.100.51:5432", "[2001:db8::50]:5432", "203.0.113.10:5432", "203.0.113.11:5432"} {
		h.dialer.route("tcp", dst, srv)
	}
	h.dialer.route("udp", "198.51.100.50:5433", udp)

	refused := func(t *testing.T, dst, why string) {
		t.Helper()
		if c, err := h.dialTCP(dst); err == nil {
			c.Close()
			t.Fatalf("%s: the worker connected to %s", why, dst)
		}
		f, _ := h.sink.flow(t, dst)
		if f.Action != "deny" || f.Rule != policy.RuleSpecialRange || !strings.Contains(f.Reason, "the host's own address") {
			t.Fatalf("%s: record %+v, want deny rule=%s naming the host's own address", why, f, policy.RuleSpecialRange)
		}
	}
	connects := func(t *testing.T, dst, why string) {
		t.Helper()
		c, err := h.dialTCP(dst)
		if err != nil {
			t.Fatalf("%s: dial %s: %v (%s)", why, dst, err, h.sink.dump())
		}
		buf := make([]byte, 3)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "db\n" {
			t.Fatalf("%s: read %q %v", why, buf, err)
		}
		c.Close()
	}

	refused(t, "198.51.100.50:5432", "IPv4 host address under 0.0.0.0/0 and its /24")
	refused(t, "[2001:db8::50]:5432", "IPv6 host address under ::/0")
	refused(t, "198.18.0.5:5432", "a name whose upstream answers are the host's addresses")
	if f, _ := h.sink.flow(t, "198.18.0.5:5432"); len(f.Refused) != 2 {
		t.Errorf("rebinding name: refused answers %v, want both", f.Refused)
	}
	t.Run("udp", func(t *testing.T) {
		c := h.dialUDP(t, "198.51.100.50:5433")
		c.Write([]byte("ping"))
		f, _ := h.sink.flow(t, "198.51.100.50:5433")
		if f.Action != "deny" || f.Proto != "udp" || f.Rule != policy.RuleSpecialRange {
			t.Fatalf("record %+v", f)
		}
	})
	connects(t, "198.51.100.51:5432", "a rule naming exactly the host address")
	connects(t, "198.18.0.6:5432", "a dns.hosts entry holding the host address")
	connects(t, "203.0.113.10:5432", "an address the host does not hold")

	// The host gains 203.0.113.11: from the next flow on it is guarded.
	host.Store(policy.NewHostAddrs([]netip.Addr{mustAddr("203.0.113.11")}))
	refused(t, "203.0.113.11:5432", "an address the host gained")

	want := []string{"tcp 198.51.100.51:5432", "tcp 198.51.100.50:5432", "tcp 203.0.113.10:5432"}
	if d := h.dialer.list(); !slices.Equal(d, want) {
		t.Fatalf("dials %v, want only %v", d, want)
	}
}

// TestReadHostAddrs: the reader returns the addresses of every interface
// of this network namespace but loopback ones.
func TestReadHostAddrs(t *testing.T) {
	got, err := ReadHostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var want []netip.Addr
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(n.IP)
			ip = ip.Unmap()
			if ifc.Flags&net.FlagLoopback != 0 {
				if slices.Contains(got, ip) && !slices.Contains(want, ip) {
					t.Errorf("%s on loopback %s is in the host set %v", ip, ifc.Name, got)
				}
				continue
			}
			want = append(want, ip)
		}
	}
	for _, a := range want {
		if !slices.Contains(got, a) {
			t.Errorf("%s is missing from the host set %v", a, got)
		}
	}
	for _, a := range got {
		if a.IsLoopback() {
			t.Errorf("loopback %s in the host set", a)
		}
	}
}

// TestHostWatchRereads: the watch reads the host's addresses again when
// the kernel announced a change and on every load without a
// subscription; after a failed read the set is unknown and the next load
// reads again.
func TestHostWatchRereads(t *testing.T) {
	reads := 0
	next := []netip.Addr{mustAddr("198.51.100.50")}
	var fail error
	announced := false
	w := &hostWatch{read: func() (*policy.HostAddrs, error) {
		reads++
		if fail != nil {
			return nil, fail
		}
		return policy.NewHostAddrs(next), nil
	}, changed: func() bool {
		a := announced
		announced = false
		return a
	}}
	first, _ := w.read()
	w.cur = first
	if got := w.load(); got != first || reads != 1 {
		t.Fatalf("a fresh watch read again (%d reads)", reads)
	}
	next = []netip.Addr{mustAddr("198.51.100.51")}
	announced = true
	if got := w.load(); !got.Contains(mustAddr("198.51.100.51")) || got.Contains(mustAddr("198.51.100.50")) {
		t.Fatalf("after a change: %v", got.Addrs())
	}
	if w.load(); reads != 2 {
		t.Fatalf("%d reads, want 2 (one per change)", reads)
	}
	same := w.cur
	announced = true
	if got := w.load(); got != same {
		t.Error("an unchanged set was replaced (the policy copy would be made again)")
	}
	// A change was announced and reading it failed: the last set may
	// lack the address the host just gained, so the set is unknown (the
	// policy then guards every address) until a read succeeds.
	fail = errors.New("netlink down")
	next = []netip.Addr{mustAddr("198.51.100.52")}
	announced = true
	if got := w.load(); got.Unknown() == "" || !strings.Contains(got.Unknown(), "netlink down") {
		t.Fatalf("a failed read: set %v (unknown %q); want it unknown", got.Addrs(), got.Unknown())
	}
	if got := w.load(); got.Unknown() == "" {
		t.Fatalf("a second failed read: set %v; want it still unknown", got.Addrs())
	}
	fail = nil
	if got := w.load(); !got.Contains(mustAddr("198.51.100.52")) {
		t.Fatalf("the next load did not read again: %v", got.Addrs())
	}
	w.changed = nil
	before := reads
	w.load()
	w.load()
	if reads != before+2 {
		t.Errorf("without a subscription: %d reads for 2 loads", reads-before)
	}
}

// TestDrainChanges: the subscription socket reports a change the kernel
// announced before the call, once.
func TestDrainChanges(t *testing.T) {
	fd, err := subscribeAddrs()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if drainChanges(fd) {
		t.Fatal("a change on a fresh subscription")
	}
	// A netlink message from ourselves to our own socket stands in for
	// the kernel's announcement (making a real one needs privilege).
	self, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tx)
	msg := make([]byte, unix.SizeofNlMsghdr)
	msg[0] = byte(len(msg))
	if err := unix.Sendto(tx, msg, 0, self); err != nil {
		t.Fatal(err)
	}
	if !drainChanges(fd) {
		t.Fatal("a pending message was not seen")
	}
	if drainChanges(fd) {
		t.Fatal("the same message was seen twice")
	}
}

// TestWatchHostAddrs: the gateway's own watch starts with what
// ReadHostSet reads.
func TestWatchHostAddrs(t *testing.T) {
	w, err := watchHostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	want, err := ReadHostSet()
	if err != nil {
		t.Fatal(err)
	}
	if got := w.load(); !got.Equal(want) {
		t.Errorf("watch holds %v %v, ReadHostSet gives %v %v", got.Addrs(), got.Prefixes(), want.Addrs(), want.Prefixes())
	}
}

// TestWatchLocalRoute: in a network namespace of its own, a prefix routed
// as local on a link other than lo, with no address, is announced to the
// watch's subscription and read as the host's own; one routed on lo is
// left out as lo's addresses are.
func TestWatchLocalRoute(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("NSGATE_REQUIRE_ALL") == "1" {
			t.Fatal("root, to make a network namespace and routes, is required (NSGATE_REQUIRE_ALL=1)")
		}
		t.Skip("needs root, to make a network namespace and routes")
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is left locked in its own namespace: it ends with
		// the goroutine and is never reused.
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(lo); err != nil {
				return err
			}
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rt0"}, PeerName: "rt0p"}); err != nil {
				return fmt.Errorf("veth: %w", err)
			}
			l, err := netlink.LinkByName("rt0")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			fd, err := subscribeAddrs()
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			drainChanges(fd)
			local := func(link netlink.Link, p string) error {
				pr := netip.MustParsePrefix(p)
				return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
					Dst: &net.IPNet{IP: pr.Addr().AsSlice(), Mask: net.CIDRMask(pr.Bits(), pr.Addr().BitLen())}})
			}
			if err := local(l, "198.51.100.128/25"); err != nil {
				return fmt.Errorf("local route: %w", err)
			}
			if err := local(lo, "203.0.113.0/24"); err != nil {
				return fmt.Errorf("local route on lo: %w", err)
			}
			if !drainChanges(fd) {
				return errors.New("the new local route was not announced")
			}
			h, err := ReadHostSet()
			if err != nil {
				return err
			}
			if !h.Contains(mustAddr("198.51.100.130")) || h.Contains(mustAddr("198.51.100.5")) || h.Contains(mustAddr("203.0.113.9")) {
				return fmt.Errorf("host set %v %v", h.Addrs(), h.Prefixes())
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestHostAddrsUnreadable: while the host's own addresses cannot be read
// after the kernel announced a change, a flow under 0.0.0.0/0 to an
// address that may be the one the host just gained is refused and not
// dialled; a rule naming the address exactly still opens it, and once a
// read succeeds the flow goes through.
func TestHostAddrsUnreadable(t *testing.T) {
	var mu sync.Mutex
	var fail error
	announced := true
	w := &hostWatch{read: func() (*policy.HostAddrs, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail != nil {
			return nil, fail
		}
		return policy.NewHostAddrs([]netip.Addr{mustAddr("198.51.100.50")}), nil
	}, changed: func() bool {
		mu.Lock()
		defer mu.Unlock()
		a := announced
		announced = false
		return a
	}}
	w.cur = policy.NewHostAddrs(nil)
	mu.Lock()
	fail = errors.New("dump interrupted")
	mu.Unlock()
	h := newHarness(t, withPolicy(t, hostAddrPolicy), func(c *Config) { c.HostAddrs = w.load })
	srv := tcpServer(t, "db\n")
	for _, dst := range []string{"203.0.113.10:5432", "198.51.100.51:5432"} {
		h.dialer.route("tcp", dst, srv)
	}
	if c, err := h.dialTCP("203.0.113.10:5432"); err == nil {
		c.Close()
		t.Fatalf("a flow while the host's addresses could not be read was let through: %s", h.sink.dump())
	}
	f, _ := h.sink.flow(t, "203.0.113.10:5432")
	if f.Action != "deny" || f.Rule != policy.RuleSpecialRange || !strings.Contains(f.Reason, "could not be read") {
		t.Errorf("record: %+v", f)
	}
	if slices.Contains(h.dialer.list(), "tcp 203.0.113.10:5432") {
		t.Error("the refused flow was dialled")
	}
	c, err := h.dialTCP("198.51.100.51:5432")
	if err != nil {
		t.Fatalf("a rule naming exactly the address: %v", err)
	}
	c.Close()
	mu.Lock()
	fail = nil
	mu.Unlock()
	c, err = h.dialTCP("203.0.113.10:5432")
	if err != nil {
		t.Fatalf("once a read succeeds: %v (%s)", err, h.sink.dump())
	}
	c.Close()
}
