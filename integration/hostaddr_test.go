//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host's own addresses the test gives the sealed namespace, on an
// interface other than lo (docs/threat-model.md, "The host's own
// addresses").
const (
	hostOwnV4 = "198.51.100.61"
	hostOwnV6 = "2001:db8:5::61"
)

// addHostLink gives the sealed namespace a link other than lo holding
// addrs (a veth pair: the kernel may lack the dummy driver, and a veth is
// up once both ends are), as a host's eth0 holds its public addresses. It
// is removed when the test ends.
func addHostLink(t *testing.T, name string, addrs ...netip.Addr) {
	t.Helper()
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	need(t, "a veth pair with an address in the sealed namespace", addLink(name, addrs...))
}

// addLink makes the veth pair name and name+"p", sets both up and puts
// addrs on name.
func addLink(name string, addrs ...netip.Addr) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", name, err)
	}
	for _, n := range []string{name, name + "p"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("%s up: %w", n, err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		na := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(l, na); err != nil {
			return fmt.Errorf("address %s on %s: %w", a, name, err)
		}
	}
	return nil
}

// countingServer accepts TCP connections at addr until the test ends and
// counts them.
func countingServer(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost service\n"))
			c.Close()
		}
	}()
	return &n
}

// TestRunRefusesHostOwnAddress: with a policy allowing every address on
// one port (0.0.0.0/0 and ::/0), a worker connecting to an address the
// host itself holds on a non-loopback interface is refused with a RST,
// the host's service there sees no connection, and the audit log records
// the denial as the special-range guard of the host's own address. The
// same holds for an address the host gains while the gateway runs (the
// host's service listens on the wildcard address), and nsgate explain
// gives the same answer.
func TestRunRefusesHostOwnAddress(t *testing.T) {
	needSealed(t)
	addHostLink(t, "nsgh0", netip.MustParseAddr(hostOwnV4), netip.MustParseAddr(hostOwnV6))
	const port = "5432"
	servers := map[string]*atomic.Int64{}
	for _, a := range []string{hostOwnV4, hostOwnV6} {
		servers[a] = countingServer(t, net.JoinHostPort(a, port))
	}
	// The host's service on every address, for the address gained later.
	wildcard := countingServer(t, "0.0.0.0:5433")
	// The worker waits at this gate, on the fake internet's app server
	// address (on lo, so not one of the host's), until the test has given
	// the host a new address.
	gate, err := net.Listen("tcp", net.JoinHostPort(appV4, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	gatePort := gate.Addr().(*net.TCPAddr).Port
	pol := fmt.Sprintf("version: 1\nallow:\n  - {cidr: 0.0.0.0/0, ports: [5432, 5433]}\n  - {cidr: \"::/0\", ports: [5432]}\n"+
		"  - {cidr: %s/32, ports: [%d]}\n", appV4, gatePort)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		polFile := writeFile(t, dir, "policy.yaml", pol)
		for i, a := range []string{hostOwnV4, hostOwnV6} {
			dst := net.JoinHostPort(a, port)
			t.Run(a, func(t *testing.T) {
				log := filepath.Join(dir, fmt.Sprintf("audit-%d.jsonl", i))
				before := servers[a].Load()
				r := runNsgate(t, m, "run", "--policy", polFile, "--audit", log, "--", nsgateBin, "__probe", "tcp", dst)
				if r.code != 1 || !strings.Contains(r.stdout, "refused") || !strings.Contains(r.stdout, "connection refused") {
					t.Errorf("probe exit %d stdout %q; want a refusal (RST: connection refused)", r.code, r.stdout)
				}
				if got := servers[a].Load() - before; got != 0 {
					t.Errorf("the host's service at %s saw %d connections, want 0", dst, got)
				}
				checkHostDenial(t, log, dst)
				r = runNsgate(t, m, "explain", "--policy", polFile, dst)
				if r.code != 1 || !strings.Contains(r.stdout, "deny rule=builtin:special-range") || !strings.Contains(r.stdout, "the host's own address") {
					t.Errorf("explain %s: exit %d stdout %q; want the same denial", dst, r.code, r.stdout)
				}
			})
		}
		t.Run("gained while running", func(t *testing.T) {
			name := "nsgh" + m.name
			gained := "198.51.100.62"
			if m.name == "user" {
				gained = "198.51.100.63"
			}
			dst := net.JoinHostPort(gained, "5433")
			added := make(chan error, 1)
			go func() {
				c, err := gate.Accept()
				if err != nil {
					added <- err
					return
				}
				defer c.Close()
				err = addLink(name, netip.MustParseAddr(gained))
				added <- err
				c.Write([]byte("go\n"))
			}()
			t.Cleanup(func() {
				if l, err := netlink.LinkByName(name); err == nil {
					netlink.LinkDel(l)
				}
			})
			log := filepath.Join(dir, "audit-gained.jsonl")
			before := wildcard.Load()
			p := nsgateBin + " __probe "
			r := runNsgate(t, m, "run", "--policy", polFile, "--audit", log, "--exec-allow", nsgateBin, "--",
				"/bin/sh", "-c", fmt.Sprintf("%sbanner %s:%d && %stcp %s", p, appV4, gatePort, p, dst))
			// A worker that never reached the gate leaves Accept waiting:
			// end it, then open the gate again for the next mode.
			gate.(*net.TCPListener).SetDeadline(time.Now())
			err := <-added
			gate.(*net.TCPListener).SetDeadline(time.Time{})
			if err != nil {
				t.Fatalf("the gate or giving the host %s: %v", gained, err)
			}
			if r.code != 1 || !strings.Contains(r.stdout, "ok "+appV4) || !strings.Contains(r.stdout, "connection refused") {
				t.Errorf("exit %d stdout %q; want the gate passed, then a refusal (RST: connection refused)", r.code, r.stdout)
			}
			if got := wildcard.Load() - before; got != 0 {
				t.Errorf("the host's service on 0.0.0.0:5433 saw %d connections, want 0", got)
			}
			checkHostDenial(t, log, dst)
		})
	})
}

// checkHostDenial fails t unless the audit log at log denies a flow to
// dst as the host's own address.
func checkHostDenial(t *testing.T, log, dst string) {
	t.Helper()
	rec, ok := findFlow(readAudit(t, log), "deny", dst)
	if !ok {
		t.Fatalf("no deny flow record for %s: %v", dst, readAudit(t, log))
	}
	if rec.str("rule") != "builtin:special-range" || !strings.Contains(rec.str("reason"), "the host's own address") {
		t.Errorf("record rule %q reason %q; want builtin:special-range naming the host's own address", rec.str("rule"), rec.str("reason"))
	}
}

// TestSlirp4netnsRefusesHostOwnAddress: nsgate slirp4netns, confined as
// Podman runs it (--enable-sandbox: its own root, no capabilities,
// seccomp), guards the host's own addresses as nsgate run does: one held
// when it starts and one the host gains afterwards, under a policy
// allowing 0.0.0.0/0 on the port. The container sees a refusal, the
// host's service none, and the audit log the denial.
func TestSlirp4netnsRefusesHostOwnAddress(t *testing.T) {
	needSealed(t)
	const held, gained = "198.51.100.64", "198.51.100.65"
	addHostLink(t, "nsghs0", netip.MustParseAddr(held))
	service := countingServer(t, "0.0.0.0:5434")
	forEachMode(t, func(t *testing.T, m mode) {
		_, err := exec.LookPath("nsenter")
		need(t, "nsenter and unshare (util-linux)", err)
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", "version: 1\nallow:\n  - {cidr: 0.0.0.0/0, ports: [5434]}\n")
		target := startTarget(t, m)
		s := startSlirp(t, m, dir, pol, target, false, "--enable-seccomp", "--enable-sandbox")
		before := service.Load()
		link := "nsghg" + m.name
		addHostLink(t, link, netip.MustParseAddr(gained))
		for _, a := range []string{held, gained} {
			dst := net.JoinHostPort(a, "5434")
			if out, code := s.probe(t, m, dst); code == 0 || !strings.Contains(out, "connection refused") {
				t.Errorf("%s: exit %d %q, want refused (RST)", dst, code, out)
			}
		}
		if l, err := netlink.LinkByName(link); err == nil {
			netlink.LinkDel(l)
		}
		s.stop(t)
		if got := service.Load() - before; got != 0 {
			t.Errorf("the host's service on 0.0.0.0:5434 saw %d connections, want 0", got)
		}
		for _, a := range []string{held, gained} {
			checkHostDenial(t, s.audit, net.JoinHostPort(a, "5434"))
		}
	})
}

// TestRunRefusesHostLocalRoute: a prefix the host routes as local on an
// interface other than lo (ip route add local PREFIX dev IF table local,
// an "AnyIP" setup) holds no address, yet every address in it reaches
// the host's services on the wildcard address. Under a policy allowing
// 0.0.0.0/0 and ::/0 on the port, a worker connecting to one is refused,
// the host's service sees nothing, and the audit log records the host's
// own address.
func TestRunRefusesHostLocalRoute(t *testing.T) {
	needSealed(t)
	const name = "nsgl0"
	addHostLink(t, name)
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"198.51.100.128/25", "2001:db8:6::/64"} {
		pr := netip.MustParsePrefix(p)
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: pr.Addr().AsSlice(), Mask: net.CIDRMask(pr.Bits(), pr.Addr().BitLen())},
			Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
		need(t, "a local route in the sealed namespace", netlink.RouteAdd(r))
	}
	v4 := countingServer(t, "0.0.0.0:5434")
	v6 := countingServer(t, "[::]:5435")
	pol := "version: 1\nallow:\n  - {cidr: 0.0.0.0/0, ports: [5434]}\n  - {cidr: \"::/0\", ports: [5435]}\n"
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		polFile := writeFile(t, dir, "policy.yaml", pol)
		for i, c := range []struct {
			dst string
			srv *atomic.Int64
		}{{"198.51.100.130:5434", v4}, {"[2001:db8:6::9]:5435", v6}} {
			t.Run(c.dst, func(t *testing.T) {
				log := filepath.Join(dir, fmt.Sprintf("audit-route-%d.jsonl", i))
				before := c.srv.Load()
				r := runNsgate(t, m, "run", "--policy", polFile, "--audit", log, "--", nsgateBin, "__probe", "tcp", c.dst)
				if r.code != 1 || !strings.Contains(r.stdout, "connection refused") {
					t.Errorf("probe exit %d stdout %q; want a refusal (RST: connection refused)", r.code, r.stdout)
				}
				if got := c.srv.Load() - before; got != 0 {
					t.Errorf("the host's service saw %d connections through %s, want 0", got, c.dst)
				}
				checkHostDenial(t, log, c.dst)
				r = runNsgate(t, m, "explain", "--policy", polFile, c.dst)
				if r.code != 1 || !strings.Contains(r.stdout, "deny rule=builtin:special-range") || !strings.Contains(r.stdout, "the host's own address") {
					t.Errorf("explain %s: exit %d stdout %q; want the same denial", c.dst, r.code, r.stdout)
				}
			})
		}
	})
}

// TestRunRefusesHostBroadcast: an address with its subnet on a link other
// than lo (198.51.100.71/24) gives the host the subnet's broadcast
// address too, and a UDP datagram the gateway sends there reaches the
// host's own UDP services on the wildcard address (and the link's whole
// segment). Under a policy allowing 0.0.0.0/0 on the port, the worker's
// datagram to it is refused and the host's service sees nothing.
func TestRunRefusesHostBroadcast(t *testing.T) {
	needSealed(t)
	const name = "nsgb0"
	addHostLink(t, name)
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	na := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("198.51.100.71").To4(), Mask: net.CIDRMask(24, 32)}}
	need(t, "an address with its subnet in the sealed namespace", netlink.AddrAdd(l, na))
	pc, err := net.ListenPacket("udp4", "0.0.0.0:5436")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var got atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	// The gateway's own dial would reach it: the test's check that the
	// setup is what a flow would meet.
	if c, err := net.Dial("udp", "198.51.100.255:5436"); err == nil {
		c.Write([]byte("setup"))
		c.Close()
		deadline := time.Now().Add(3 * time.Second)
		for got.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got.Load() != 1 {
		t.Fatalf("the host's service did not get a datagram sent to the broadcast address here (%d)", got.Load())
	}
	pol := "version: 1\nallow:\n  - {cidr: 0.0.0.0/0, ports: [5436], proto: udp}\n"
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		polFile := writeFile(t, dir, "policy.yaml", pol)
		log := filepath.Join(dir, "audit-bcast.jsonl")
		dst := "198.51.100.255:5436"
		before := got.Load()
		r := runNsgate(t, m, "run", "--policy", polFile, "--audit", log, "--", nsgateBin, "__probe", "udp", dst)
		if r.code != 1 || !strings.Contains(r.stdout, "refused") {
			t.Errorf("probe exit %d stdout %q; want a refusal", r.code, r.stdout)
		}
		if n := got.Load() - before; n != 0 {
			t.Errorf("the host's UDP service got %d datagrams sent to %s, want 0", n, dst)
		}
		checkHostDenial(t, log, dst)
	})
}
