package tun

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/tun/tundev"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// The real-device tests run in a child process (this test binary again)
// inside a fresh user and network namespace, where it may create a TUN:
// nothing it sends can leave that namespace.
const tunChildEnv = "NSGATE_TUN_TEST_CHILD"

// skipExit is the child's exit status for "cannot run here"; it prints
// the reason on a line starting with skipPrefix.
const (
	skipExit   = 3
	skipPrefix = "TUN-TEST-SKIP: "
)

func requireAll() bool { return os.Getenv("NSGATE_REQUIRE_ALL") == "1" }

func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if requireAll() {
		t.Fatalf("%s is required (NSGATE_REQUIRE_ALL=1): %v", what, err)
	}
	t.Skipf("needs %s: %v", what, err)
}

// inNamespace runs test in a child process in new user and network
// namespaces and reports its outcome here.
func inNamespace(t *testing.T, test string) {
	t.Helper()
	if os.Getenv(tunChildEnv) != "" {
		panic("inNamespace called in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), tunChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		need(t, "unprivileged user namespaces", err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == skipExit {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, skipPrefix) {
				need(t, "a TUN device in a user namespace", errors.New(strings.TrimPrefix(l, skipPrefix)))
			}
		}
	}
	t.Logf("child output:\n%s", out.String())
	if err != nil {
		t.Fatalf("child %s: %v", test, err)
	}
}

// childSkip ends the child with a reason for the parent to skip on.
func childSkip(format string, err error) {
	os.Stdout.WriteString(skipPrefix + strings.ReplaceAll(format+": "+err.Error(), "\n", " ") + "\n")
	os.Exit(skipExit)
}

// openTestTUN creates tun0 (10.99.0.1/24, fd99::1/64) in the child's
// namespace with the given MTU.
func openTestTUN(t *testing.T, mtu uint32) int {
	ifc := tundev.Iface{
		Name:  "tun0",
		MTU:   mtu,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24"), netip.MustParsePrefix("fd99::1/64")},
	}
	fd, err := tundev.Open(ifc)
	if err != nil {
		childSkip("open tun", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := tundev.Configure(ifc); err != nil {
		t.Fatalf("configure: %v", err)
	}
	return fd
}

// gvisorPeer is a gVisor stack on the endpoint, at 10.99.0.2 and fd99::2.
func gvisorPeer(t *testing.T, ep stack.LinkEndpoint) *stack.Stack {
	s := stack.New(stack.Options{
		NetworkProtocols: []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocolWithOptions(ipv6.Options{
			DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0},
		})},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	t.Cleanup(func() { s.Close(); s.Wait() })
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatalf("create nic: %v", err)
	}
	for _, a := range []tcpip.ProtocolAddress{
		{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4([4]byte{10, 99, 0, 2}), PrefixLen: 24}},
		{Protocol: ipv6.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFromSlice(netip.MustParseAddr("fd99::2").AsSlice()), PrefixLen: 64}},
	} {
		if err := s.AddProtocolAddress(1, a, stack.AddressProperties{}); err != nil {
			t.Fatalf("add address: %v", err)
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: 1},
		{Destination: header.IPv6EmptySubnet, NIC: 1},
	})
	return s
}

// TestTUNDevice moves TCP and UDP through a real TUN between the kernel
// and a gVisor stack on the endpoint, with offloads on: the kernel's TCP
// sends super-packets (which go up whole), gVisor's TCP writes
// super-packets (which the kernel takes), UDP super-packets (USO, Linux
// 6.2+) are split, and every byte must arrive intact in both directions.
// At MTU 1500 segmentation matters; at 65520 (nsgate's default) the
// virtio header's checksum offload does.
func TestTUNDevice(t *testing.T) {
	if os.Getenv(tunChildEnv) == "" {
		inNamespace(t, "TestTUNDevice")
		return
	}
	for _, mtu := range []uint32{1500, tundev.DefaultMTU} {
		t.Run(map[uint32]string{1500: "mtu1500", tundev.DefaultMTU: "mtu65520"}[mtu], func(t *testing.T) {
			fd := openTestTUN(t, mtu)
			ep, err := NewEndpoint(fd, EndpointOptions{MTU: mtu})
			if err != nil {
				t.Fatal(err)
			}
			e := ep.(*Endpoint)
			if !e.vnet || !e.Offloads() {
				t.Fatalf("Open sets IFF_VNET_HDR and NewEndpoint the offloads: vnet %v, offloads %v", e.vnet, e.Offloads())
			}
			s := gvisorPeer(t, ep)
			for _, addr := range []string{"10.99.0.2", "fd99::2"} {
				t.Run("tcp-"+addr, func(t *testing.T) { tcpEcho(t, s, addr) })
			}
			t.Run("udp", func(t *testing.T) { udpUSO(t, s) })
			st := e.Stats()
			t.Logf("endpoint stats: %+v", st)
			// At MTU 65520 a segment is already as large as a super-packet
			// may be, so only the smaller MTU shows segmentation.
			if mtu == 1500 && (st.RxSuper == 0 || st.TxSuper == 0) {
				t.Errorf("want super-packets both ways with offloads on: rx %d, tx %d", st.RxSuper, st.TxSuper)
			}
			if st.RxErrors != 0 || st.TxErrors != 0 {
				t.Errorf("read or write errors: %+v", st)
			}
		})
	}
}

// tcpEcho sends 8 MiB from the kernel to a gVisor echo server and checks
// what comes back.
func tcpEcho(t *testing.T, s *stack.Stack, addr string) {
	a := netip.MustParseAddr(addr)
	proto := ipv4.ProtocolNumber
	if a.Is6() {
		proto = ipv6.ProtocolNumber
	}
	ln, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(a.AsSlice()), Port: 7}, proto)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "7"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	want := make([]byte, 8<<20)
	rand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		c.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read back: %v (after %d bytes)", err, len(got))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo returned %d bytes, not the %d sent", len(got), len(want))
	}
}

// udpUSO sends a 12000-byte UDP super-packet (UDP_SEGMENT 1200) from the
// kernel and expects ten datagrams at a gVisor socket, then answers one.
func udpUSO(t *testing.T, s *stack.Stack) {
	pc, err := gonet.DialUDP(s, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{10, 99, 0, 2}), Port: 9}, nil, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	k, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 99, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	raw, _ := k.SyscallConn()
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, 1200)
	})
	msg := make([]byte, 12000)
	rand.Read(msg)
	if _, err := k.WriteToUDP(msg, &net.UDPAddr{IP: net.IPv4(10, 99, 0, 2), Port: 9}); err != nil {
		t.Fatal(err)
	}
	pc.SetDeadline(time.Now().Add(5 * time.Second))
	var joined []byte
	var from net.Addr
	buf := make([]byte, 65536)
	for i := 0; i < 10; i++ {
		n, a, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if n != 1200 {
			t.Fatalf("datagram %d has %d bytes, want 1200", i, n)
		}
		joined = append(joined, buf[:n]...)
		from = a
	}
	if !bytes.Equal(joined, msg) {
		t.Fatal("datagrams do not add up to the message sent")
	}
	if _, err := pc.WriteTo([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	k.SetDeadline(time.Now().Add(5 * time.Second))
	n, _, err := k.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("reply: %q, %v", buf[:n], err)
	}
}

// TestTUNFloodBounded floods a real TUN with UDP from the kernel while
// deliveries are slow: the backlog must stay in the kernel (whose queue
// for the device overflows and drops) and the process's memory must not
// grow with what was sent.
func TestTUNFloodBounded(t *testing.T) {
	if os.Getenv(tunChildEnv) == "" {
		inNamespace(t, "TestTUNFloodBounded")
		return
	}
	fd := openTestTUN(t, tundev.DefaultMTU)
	ep, err := NewEndpoint(fd, EndpointOptions{MTU: tundev.DefaultMTU})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	s := &sink{delay: 200 * time.Microsecond}
	ep.Attach(s)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 99, 0, 2), Port: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	msg := make([]byte, 1200)
	var sent int
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if _, err := k.Write(msg); err == nil {
			sent++
		}
	}
	runtime.ReadMemStats(&after)
	link, err := netlink.LinkByName("tun0")
	if err != nil {
		t.Fatal(err)
	}
	drops := link.Attrs().Statistics.TxDropped
	delivered := s.n.Load()
	t.Logf("sent %d, delivered %d, dropped by the kernel %d; heap in use %d -> %d KiB",
		sent, delivered, drops, before.HeapInuse>>10, after.HeapInuse>>10)
	if drops == 0 {
		t.Errorf("the kernel dropped nothing: the endpoint is buffering the flood")
	}
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 16<<20 {
		t.Errorf("heap grew by %d KiB during the flood; want bounded", grow>>10)
	}
}

// TestConfigureIPv6UsableAtOnce: Configure leaves the worker's IPv6
// usable the moment it returns, whatever the kernel's address
// configuration work is still doing: the address is added without
// duplicate address detection (never tentative), and each default route
// is onlink (it needs no route to its gateway, so it cannot be refused
// while the address's prefix route is still missing: the burst failure
// "add default route via fd00::2: no route to host"). A UDP socket
// connected through each default route proves both: the route lookup and
// the source address selection succeed at once. Nothing is sent.
func TestConfigureIPv6UsableAtOnce(t *testing.T) {
	if os.Getenv(tunChildEnv) == "" {
		inNamespace(t, "TestConfigureIPv6UsableAtOnce")
		return
	}
	ifc := tundev.Iface{
		Name:     "tun0",
		Addrs:    []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24"), netip.MustParsePrefix("fd99::1/64")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("fd99::2")},
	}
	fd, err := tundev.Open(ifc)
	if err != nil {
		childSkip("open tun", err)
	}
	defer unix.Close(fd)
	if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + ifc.Name + "/disable_ipv6"); err != nil || len(b) == 0 || b[0] != '0' {
		childSkip("ipv6", errors.New("IPv6 is disabled on tun0"))
	}
	if err := tundev.Configure(ifc); err != nil {
		t.Fatalf("configure: %v", err)
	}
	// At once, before anything else can settle.
	for _, dst := range []string{"192.0.2.1:9", "[2001:db8::1]:9"} {
		c, err := net.Dial("udp", dst)
		if err != nil {
			t.Errorf("right after Configure, a UDP socket to %s through the default route: %v", dst, err)
			continue
		}
		c.Close()
	}
	link, err := netlink.LinkByName(ifc.Name)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range addrs {
		if !a.IP.Equal(net.ParseIP("fd99::1")) {
			continue
		}
		found = true
		if a.Flags&unix.IFA_F_NODAD == 0 || a.Flags&unix.IFA_F_TENTATIVE != 0 {
			t.Errorf("fd99::1 flags %#x: want nodad and never tentative", a.Flags)
		}
	}
	if !found {
		t.Errorf("fd99::1 not on %s: %v", ifc.Name, addrs)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(link, fam)
		if err != nil {
			t.Fatal(err)
		}
		def := false
		for _, r := range routes {
			if r.Gw != nil && (r.Dst == nil || r.Dst.IP.IsUnspecified()) {
				def = true
				if r.Flags&int(netlink.FLAG_ONLINK) == 0 {
					t.Errorf("default route via %v is not onlink (flags %#x)", r.Gw, r.Flags)
				}
			}
		}
		if !def {
			t.Errorf("no default route in family %d: %v", fam, routes)
		}
	}
}
