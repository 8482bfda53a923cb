package sandbox

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/tun/tundev"
)

// OpenTAP re-executes /proc/self/exe with JoinArg: in this test binary,
// act as the join child before the tests start.
func init() {
	if len(os.Args) > 1 && os.Args[1] == JoinArg {
		os.Exit(JoinMain())
	}
}

// needNS skips (or fails under NSGATE_REQUIRE_ALL=1) for a missing
// prerequisite.
func needNS(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("NSGATE_REQUIRE_ALL") == "1" {
		t.Fatalf("%s is required (NSGATE_REQUIRE_ALL=1): %v", what, err)
	}
	t.Skipf("needs %s: %v", what, err)
}

// targetProcess starts `sleep` in a new user and network namespace (as an
// unprivileged user would with `unshare -rn`) and returns its PID.
func targetProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	needNS(t, "unprivileged user and network namespaces", cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func TestOpenTAPInAnotherProcessNamespaces(t *testing.T) {
	needNS(t, "/dev/net/tun", func() error { _, err := os.Stat("/dev/net/tun"); return err }())
	pid := targetProcess(t)
	proc := "/proc/" + strconv.Itoa(pid)
	spec := TAPSpec{
		NetnsPath:  proc + "/ns/net",
		UsernsPath: proc + "/ns/user",
		Iface: tundev.Iface{
			Name: "tap7", TAP: true, MTU: 1500, MAC: "02:00:00:00:00:07",
			Addrs:    []netip.Prefix{netip.MustParsePrefix("10.0.2.100/24")},
			Gateways: []netip.Addr{netip.MustParseAddr("10.0.2.2")},
		},
		Configure: true,
	}
	fd, err := OpenTAP(spec)
	if err != nil {
		t.Fatalf("OpenTAP: %v", err)
	}
	defer unix.Close(fd)

	ifr, err := unix.NewIfreq("")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		t.Fatalf("TUNGETIFF: %v", err)
	}
	if ifr.Name() != "tap7" || ifr.Uint16()&unix.IFF_TAP == 0 {
		t.Errorf("descriptor is %q flags %#x, want the TAP tap7", ifr.Name(), ifr.Uint16())
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor is not close-on-exec (flags %#x, %v)", flags, err)
	}
	// The device, its default route and its MAC are in the target's
	// network namespace, not in ours.
	dev, _ := os.ReadFile(proc + "/net/dev")
	if !strings.Contains(string(dev), "tap7:") {
		t.Errorf("tap7 missing from the target's /proc/net/dev:\n%s", dev)
	}
	if own, _ := os.ReadFile("/proc/self/net/dev"); strings.Contains(string(own), "tap7:") {
		t.Error("tap7 appeared in the test's own network namespace")
	}
	route, _ := os.ReadFile(proc + "/net/route")
	if !strings.Contains(string(route), "tap7\t00000000\t0202000A") {
		t.Errorf("no default route via 10.0.2.2 on tap7 in the target:\n%s", route)
	}
}

func TestOpenTAPErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-namespace")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		why  string
		spec TAPSpec
		want string
	}{
		{"a missing path names the path", TAPSpec{NetnsPath: "/nonexistent/netns", Iface: tundev.Iface{Name: "tap0", TAP: true}}, "/nonexistent/netns"},
		{"a regular file is not a namespace", TAPSpec{NetnsPath: file, Iface: tundev.Iface{Name: "tap0", TAP: true}}, "is not a network namespace"},
		{"a user namespace path that is a network namespace is refused", TAPSpec{NetnsPath: "/proc/self/ns/net", UsernsPath: "/proc/self/ns/net", Iface: tundev.Iface{Name: "tap0", TAP: true}}, "is not a user namespace"},
		{"only TAP devices", TAPSpec{NetnsPath: "/proc/self/ns/net", Iface: tundev.Iface{Name: "tun0"}}, "TAP"},
	} {
		fd, err := OpenTAP(tc.spec)
		if err == nil {
			unix.Close(fd)
			t.Errorf("%s: no error", tc.why)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to mention %q", tc.why, err, tc.want)
		}
	}
}

func TestOpenTAPChildErrorComesBack(t *testing.T) {
	// An invalid device name fails in the join child, after the fork and
	// exec: its message must reach the caller.
	needNS(t, "/dev/net/tun", func() error { _, err := os.Stat("/dev/net/tun"); return err }())
	pid := targetProcess(t)
	proc := "/proc/" + strconv.Itoa(pid)
	_, err := OpenTAP(TAPSpec{NetnsPath: proc + "/ns/net", UsernsPath: proc + "/ns/user",
		Iface: tundev.Iface{Name: "this-name-is-far-too-long", TAP: true}})
	if err == nil || !strings.Contains(err.Error(), "this-name-is-far-too-long") {
		t.Fatalf("got %v, want the join child's error about the name", err)
	}
}
