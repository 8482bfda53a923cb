//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

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
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	need(t, "a veth pair in the sealed namespace", netlink.LinkAdd(veth))
	t.Cleanup(func() { netlink.LinkDel(veth) })
	for _, n := range []string{name, name + "p"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatalf("%s up: %v", n, err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		na := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(l, na); err != nil {
			t.Fatalf("address %s on %s: %v", a, name, err)
		}
	}
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
// the denial as the special-range guard of the host's own address.
func TestRunRefusesHostOwnAddress(t *testing.T) {
	needSealed(t)
	addHostLink(t, "nsgh0", netip.MustParseAddr(hostOwnV4), netip.MustParseAddr(hostOwnV6))
	const port = "5432"
	servers := map[string]*atomic.Int64{}
	for _, a := range []string{hostOwnV4, hostOwnV6} {
		servers[a] = countingServer(t, net.JoinHostPort(a, port))
	}
	const pol = "version: 1\nallow:\n  - {cidr: 0.0.0.0/0, ports: [5432]}\n  - {cidr: \"::/0\", ports: [5432]}\n"
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
				rec, ok := findFlow(readAudit(t, log), "deny", dst)
				if !ok {
					t.Fatalf("no deny flow record for %s: %v", dst, readAudit(t, log))
				}
				if rec.str("rule") != "builtin:special-range" || !strings.Contains(rec.str("reason"), "the host's own address") {
					t.Errorf("record rule %q reason %q; want builtin:special-range naming the host's own address", rec.str("rule"), rec.str("reason"))
				}
			})
		}
	})
}
