package sealed

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/sandbox"
)

// Environment markers Enter gives the re-executed child.
const (
	// EnvSealedFrom is "PID:NETNS": the pid of the process that sealed
	// the child and the network namespace it left ("net:[4026531840]").
	EnvSealedFrom = "NSGATE_SEALED_FROM"
	// EnvSealedUserns is "1" when the sealed namespace came with a user
	// namespace mapping the caller to root (Enter without root).
	EnvSealedUserns = "NSGATE_SEALED_USERNS"
)

// Info describes the sealed namespace this process runs in.
type Info struct {
	// Userns is true when Enter also made a user namespace mapping
	// the unprivileged caller to root (so uid 0 here is not real root).
	Userns bool
	// FromNetns is the network namespace the parent left.
	FromNetns string
}

// Stdio are a re-executed child's standard streams (nil: this process's).
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Current reports whether this process was started by Enter: its
// parent is the process named in EnvSealedFrom and its network namespace
// differs from the one named there. An inherited marker (a grandchild, or
// a program started inside the sealed namespace) does not count. Current
// does not check what the namespace holds: call Check for that.
func Current() (Info, bool) {
	v := os.Getenv(EnvSealedFrom)
	pid, netns, ok := strings.Cut(v, ":")
	if !ok {
		return Info{}, false
	}
	if p, err := strconv.Atoi(pid); err != nil || p != os.Getppid() {
		return Info{}, false
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil || self == netns {
		return Info{}, false
	}
	return Info{Userns: os.Getenv(EnvSealedUserns) == "1", FromNetns: netns}, true
}

// Enter re-executes this program (os.Executable) with argv (argv[0]
// is only the name it sees) and env, in a new network namespace; without
// root (or as a root that may not create one, as in a container) also in
// a new user namespace that maps the caller's uid and gid to root, so that
// the child may configure its namespace. It forwards SIGINT,
// SIGTERM and SIGHUP to the child, waits for it and returns its exit
// status (128+N when killed by signal N). The child dies with this
// process (SIGKILL). err is set only when the child could not be started:
// the kernel refused the namespaces, or the program cannot be found.
func Enter(argv, env []string, stdio Stdio) (code int, err error) {
	self, err := os.Executable()
	if err != nil {
		return -1, fmt.Errorf("find own executable: %w", err)
	}
	netns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return -1, fmt.Errorf("read own network namespace: %w", err)
	}
	cmd := exec.Command(self)
	if len(argv) > 0 {
		cmd.Args = append([]string(nil), argv...)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvSealedFrom+"=") || strings.HasPrefix(kv, EnvSealedUserns+"=") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, EnvSealedFrom+"="+strconv.Itoa(os.Getpid())+":"+netns)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	withUserns := func() {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWNET | syscall.CLONE_NEWUSER,
			Pdeathsig:   syscall.SIGKILL,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		}
		cmd.Env = append(cmd.Env, EnvSealedUserns+"=1")
	}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	} else {
		withUserns()
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	err = cmd.Start()
	if err != nil && os.Geteuid() == 0 && errors.Is(err, syscall.EPERM) {
		// Root without CAP_SYS_ADMIN (a container): a user namespace
		// of our own may still be allowed.
		withUserns()
		err = cmd.Start()
	}
	if err != nil {
		return -1, sealError(err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return -1, err
}

// sealError says how to fix a refused clone.
func sealError(err error) error {
	const what = "cannot create a sealed network namespace"
	if e := sandbox.NamespaceError(what, err); e != nil {
		return e
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Check refuses (returns an error) unless this process is in a
// network namespace that is not the initial one, not the one Enter
// left, and holds no interface but lo (and the kernel's fallback tunnel
// devices, down, that every new namespace gets when tunnel modules are
// loaded). Call it before putting addresses
// on lo or starting servers.
func Check() error {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return fmt.Errorf("read own network namespace: %w", err)
	}
	if _, from, ok := strings.Cut(os.Getenv(EnvSealedFrom), ":"); ok && from == self {
		return errors.New("still in the network namespace that was to be left")
	}
	if initNS, err := os.Readlink("/proc/1/ns/net"); err == nil && initNS == self {
		return errors.New("still in the initial network namespace")
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Name != "lo" && !FallbackTunnel(i) {
			return fmt.Errorf("interface %s in the namespace: not sealed", i.Name)
		}
	}
	return nil
}

// AddHostLink makes a veth pair, name and name+"p", both ends in this
// namespace and up, and puts each address on name (/32 or /128): the
// host's own addresses on a link other than lo, as a host's eth0 holds
// its public ones (the gateway guards those; loopback ones are left to
// the special ranges). Each of routes is routed as local on name, with no
// address (an "AnyIP" route: every address in it is the host's own).
// The pair leads nowhere else. It fails if the kernel cannot make a veth
// pair here.
func AddHostLink(name string, addrs []netip.Addr, routes []netip.Prefix) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth pair %s: %w", name, err)
	}
	for _, n := range []string{name, name + "p"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return fmt.Errorf("find %s: %w", n, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("bring %s up: %w", n, err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	for _, a := range addrs {
		a = a.Unmap()
		na := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
		if a.Is6() {
			na.Flags = syscall.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(l, na); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("add %s to %s: %w", a, name, err)
		}
	}
	for _, p := range routes {
		p = p.Masked()
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
			Dst: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if err := netlink.RouteAdd(r); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("route %s as local on %s: %w", p, name, err)
		}
	}
	return waitLocalRoutes(addrs, nil)
}

// AddLoopback brings lo up and adds each address to it (/32 or /128).
// Addresses it could not add are returned in failed when they are in
// optional; any other failure is an error. An address lo already has is
// not an error.
func AddLoopback(addrs, optional []netip.Addr) (failed []netip.Addr, err error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("bring lo up: %w", err)
	}
	for _, a := range addrs {
		a = a.Unmap()
		na := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
		if a.Is6() {
			na.Flags = syscall.IFA_F_NODAD
		}
		err := netlink.AddrAdd(lo, na)
		if err == nil || errors.Is(err, syscall.EEXIST) {
			continue
		}
		if contains(optional, a) {
			failed = append(failed, a)
			continue
		}
		return failed, fmt.Errorf("add %s to lo: %w", a, err)
	}
	return failed, waitLocalRoutes(addrs, failed)
}

// waitLocalRoutes waits (up to two seconds) until every added address has
// its route in the local table: the kernel installs IPv6 ones a moment
// after the address, and until then a connection to it can stall.
func waitLocalRoutes(addrs, skip []netip.Addr) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("list local routes: %w", err)
		}
		have := make(map[netip.Addr]bool, len(routes))
		for _, r := range routes {
			if r.Dst != nil {
				if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
					have[a.Unmap()] = true
				}
			}
		}
		var missing []netip.Addr
		for _, a := range addrs {
			if a = a.Unmap(); !have[a] && !contains(skip, a) {
				missing = append(missing, a)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("addresses on lo without a local route after 2s: %v", missing)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func contains(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b == a {
			return true
		}
	}
	return false
}
