//go:build linux && (amd64 || arm64)

package guard

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData lays out struct seccomp_data for golang.org/x/net/bpf's VM.
// The VM loads words big-endian where the kernel loads them in native
// (little-endian) order; since the filter only loads aligned 32-bit words,
// writing each word big-endian at its native offset gives the VM exactly
// the values the kernel's filter sees.
func seccompData(nr, arch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	be := binary.BigEndian
	be.PutUint32(b[offNr:], nr)
	be.PutUint32(b[offArch:], arch)
	for i, a := range args {
		be.PutUint32(b[argLo(i):], uint32(a))
		be.PutUint32(b[argLo(i)+4:], uint32(a>>32))
	}
	return b
}

func runFilter(t *testing.T, o filterOptions, data []byte) uint32 {
	t.Helper()
	prog, err := buildFilter(nativeArch(), o)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("the VM rejects the filter: %v", err)
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(ret)
}

func retName(r uint32) string {
	switch r {
	case seccompRetAllow:
		return "allow"
	case retEPERM:
		return "EPERM"
	case retENOSYS:
		return "ENOSYS"
	}
	return fmt.Sprintf("%#x", r)
}

func TestFilterDecisions(t *testing.T) {
	native := uint32(auditArch)
	const hi = 1 << 32 // garbage in the high word of an int argument
	strict := filterOptions{}
	userns := filterOptions{allowUserns: true}
	unixOK := filterOptions{allowUnix: true}
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_SYSVSEM | unix.CLONE_THREAD | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)

	tests := []struct {
		why  string
		o    filterOptions
		nr   uint32
		arch uint32
		args []uint64
		want uint32
	}{
		{why: "ordinary calls pass", o: strict, nr: unix.SYS_GETPID, arch: native, want: seccompRetAllow},
		{why: "execve is Landlock's business", o: strict, nr: unix.SYS_EXECVE, arch: native, want: seccompRetAllow},
		{why: "a foreign ABI is refused (ia32 on amd64, AArch32 on arm64)", o: strict, nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386, want: retEPERM},
		{why: "a foreign ABI is refused even with every option", o: filterOptions{true, true, false}, nr: 0, arch: unix.AUDIT_ARCH_ARM, want: retEPERM},
		{why: "clone3 hides its flags behind a pointer: ENOSYS so libc falls back to clone", o: strict, nr: unix.SYS_CLONE3, arch: native, want: retENOSYS},
		{why: "clone3 is ENOSYS with AllowUserns too", o: userns, nr: unix.SYS_CLONE3, arch: native, want: retENOSYS},

		{why: "socket(AF_INET) passes", o: strict, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_INET, unix.SOCK_STREAM}, want: seccompRetAllow},
		{why: "socket(AF_INET6) passes", o: strict, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, want: seccompRetAllow},
		{why: "socket(AF_NETLINK) passes (the worker's own netns)", o: strict, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_NETLINK}, want: seccompRetAllow},
		{why: "socket(AF_UNIX) is refused by default", o: strict, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, want: retEPERM},
		{why: "the kernel ignores the high word of the int domain, so must the filter", o: strict, nr: unix.SYS_SOCKET, arch: native, args: []uint64{hi | unix.AF_UNIX}, want: retEPERM},
		{why: "socket(AF_UNIX) with AllowUnix", o: unixOK, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_UNIX}, want: seccompRetAllow},
		{why: "socketpair(AF_UNIX) is always allowed", o: strict, nr: unix.SYS_SOCKETPAIR, arch: native, args: []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, want: seccompRetAllow},
		{why: "AF_PACKET even with AllowUnix", o: unixOK, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_PACKET, unix.SOCK_RAW}, want: retEPERM},
		{why: "AF_VSOCK", o: unixOK, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_VSOCK}, want: retEPERM},
		{why: "AF_ALG", o: unixOK, nr: unix.SYS_SOCKET, arch: native, args: []uint64{unix.AF_ALG}, want: retEPERM},
		{why: "AF_PACKET with a high-word disguise", o: strict, nr: unix.SYS_SOCKET, arch: native, args: []uint64{hi<<8 | unix.AF_PACKET}, want: retEPERM},

		{why: "fchmodat with the setuid bit: a setuid program left in --rw", o: strict, nr: unix.SYS_FCHMODAT, arch: native, args: []uint64{0, 0, 0o4755}, want: retEPERM},
		{why: "fchmodat with the setgid bit", o: strict, nr: unix.SYS_FCHMODAT, arch: native, args: []uint64{0, 0, 0o2755}, want: retEPERM},
		{why: "fchmod with the setuid bit and a high-word disguise", o: strict, nr: unix.SYS_FCHMOD, arch: native, args: []uint64{0, hi | 0o4700}, want: retEPERM},
		{why: "fchmodat2 with the setuid bit", o: strict, nr: unix.SYS_FCHMODAT2, arch: native, args: []uint64{0, 0, 0o4755}, want: retEPERM},
		{why: "an ordinary chmod passes", o: strict, nr: unix.SYS_FCHMODAT, arch: native, args: []uint64{0, 0, 0o755}, want: seccompRetAllow},
		{why: "the sticky bit passes (shared scratch directories)", o: strict, nr: unix.SYS_FCHMODAT, arch: native, args: []uint64{0, 0, 0o1777}, want: seccompRetAllow},
		{why: "openat creating a setuid file", o: strict, nr: unix.SYS_OPENAT, arch: native, args: []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, want: retEPERM},
		{why: "openat with O_TMPFILE and a setgid mode", o: strict, nr: unix.SYS_OPENAT, arch: native, args: []uint64{0, 0, unix.O_TMPFILE | unix.O_RDWR, 0o2700}, want: retEPERM},
		{why: "openat that creates nothing ignores its mode argument (garbage there)", o: strict, nr: unix.SYS_OPENAT, arch: native, args: []uint64{0, 0, unix.O_RDONLY, 0o6777}, want: seccompRetAllow},
		{why: "openat creating an ordinary file", o: strict, nr: unix.SYS_OPENAT, arch: native, args: []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o644}, want: seccompRetAllow},
		{why: "mknodat of a setuid regular file", o: strict, nr: unix.SYS_MKNODAT, arch: native, args: []uint64{0, 0, unix.S_IFREG | 0o4755}, want: retEPERM},
		{why: "openat2 hides its mode in a struct: ENOSYS so libc falls back to openat", o: strict, nr: unix.SYS_OPENAT2, arch: native, want: retENOSYS},

		{why: "ioctl(TIOCSTI)", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TIOCSTI}, want: retEPERM},
		{why: "ioctl cmd is an unsigned int: high word ignored", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, hi | unix.TIOCSTI}, want: retEPERM},
		{why: "ioctl(TIOCLINUX) can paste into a VT", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TIOCLINUX}, want: retEPERM},
		{why: "ioctl(TIOCSETD): a line discipline set on the caller's terminal outlives the worker", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TIOCSETD}, want: retEPERM},
		{why: "ioctl(TIOCSETD) with the high word set", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, hi | unix.TIOCSETD}, want: retEPERM},
		{why: "ioctl(TIOCEXCL): exclusive mode on the caller's terminal outlives the worker", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TIOCEXCL}, want: retEPERM},
		{why: "ioctl(TCXONC): output stopped on the caller's terminal hangs its shell after the worker", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TCXONC}, want: retEPERM},
		{why: "ioctl(TIOCGETD) passes", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TIOCGETD}, want: seccompRetAllow},
		{why: "ioctl(TCGETS) passes", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.TCGETS}, want: seccompRetAllow},
		{why: "ioctl(FIONREAD) passes", o: strict, nr: unix.SYS_IOCTL, arch: native, args: []uint64{0, unix.SIOCINQ}, want: seccompRetAllow},

		{why: "clone for a thread passes", o: strict, nr: unix.SYS_CLONE, arch: native, args: []uint64{threadFlags}, want: seccompRetAllow},
		{why: "fork-like clone passes", o: strict, nr: unix.SYS_CLONE, arch: native, args: []uint64{unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD)}, want: seccompRetAllow},
		{why: "clone(CLONE_NEWUSER)", o: strict, nr: unix.SYS_CLONE, arch: native, args: []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, want: retEPERM},
		{why: "clone(CLONE_NEWNET)", o: strict, nr: unix.SYS_CLONE, arch: native, args: []uint64{unix.CLONE_NEWNET}, want: retEPERM},
		{why: "clone(CLONE_NEWNS)", o: strict, nr: unix.SYS_CLONE, arch: native, args: []uint64{unix.CLONE_NEWNS}, want: retEPERM},
		{why: "clone(CLONE_NEWUSER) with AllowUserns", o: userns, nr: unix.SYS_CLONE, arch: native, args: []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET}, want: seccompRetAllow},
		{why: "unshare(CLONE_NEWUSER)", o: strict, nr: unix.SYS_UNSHARE, arch: native, args: []uint64{unix.CLONE_NEWUSER}, want: retEPERM},
		{why: "unshare(CLONE_NEWTIME)", o: strict, nr: unix.SYS_UNSHARE, arch: native, args: []uint64{unix.CLONE_NEWTIME}, want: retEPERM},
		{why: "unshare(CLONE_NEWCGROUP)", o: strict, nr: unix.SYS_UNSHARE, arch: native, args: []uint64{unix.CLONE_NEWCGROUP}, want: retEPERM},
		{why: "unshare(CLONE_FILES) creates no namespace", o: strict, nr: unix.SYS_UNSHARE, arch: native, args: []uint64{unix.CLONE_FILES | unix.CLONE_FS}, want: seccompRetAllow},
		{why: "unshare(CLONE_NEWUSER) with AllowUserns", o: userns, nr: unix.SYS_UNSHARE, arch: native, args: []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, want: seccompRetAllow},
		{why: "setns is refused even with AllowUserns", o: userns, nr: unix.SYS_SETNS, arch: native, args: []uint64{3, 0}, want: retEPERM},
	}
	if x32Bit != 0 {
		tests = append(tests,
			struct {
				why  string
				o    filterOptions
				nr   uint32
				arch uint32
				args []uint64
				want uint32
			}{why: "x32 calls share the arch value; the bit gives them away", o: filterOptions{true, true, false}, nr: x32Bit | unix.SYS_GETPID, arch: native, want: retEPERM})
	}
	for _, tc := range tests {
		got := runFilter(t, tc.o, seccompData(tc.nr, tc.arch, tc.args...))
		if got != tc.want {
			t.Errorf("%s: nr %d args %#x: %s, want %s", tc.why, tc.nr, tc.args, retName(got), retName(tc.want))
		}
	}
}

func TestFilterDeniesEveryListedCall(t *testing.T) {
	for _, o := range []filterOptions{{}, {allowUserns: true, allowUnix: true}} {
		for _, s := range deniedSyscalls {
			if got := runFilter(t, o, seccompData(s.nr, auditArch)); got != retEPERM {
				t.Errorf("%s (%d) with %+v: %s, want EPERM", s.name, s.nr, o, retName(got))
			}
		}
	}
}

func TestFilterAssembles(t *testing.T) {
	for _, o := range []filterOptions{{}, {true, false, false}, {false, true, false}, {true, true, false}, {false, false, true}} {
		prog, err := buildFilter(nativeArch(), o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bpf.Assemble(prog); err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
	}
}

func TestNotifyFilterDecisions(t *testing.T) {
	native := uint32(auditArch)
	type tcase struct {
		why        string
		refuseUnix bool
		nr, arch   uint32
		args       []uint64
		want       uint32
	}
	tests := []tcase{
		{"execve goes to the listener", false, unix.SYS_EXECVE, native, nil, seccompRetUserNotif},
		{"execveat goes to the listener", false, unix.SYS_EXECVEAT, native, nil, seccompRetUserNotif},
		{"memfd_create goes to the listener (performed with MFD_NOEXEC_SEAL)", false, unix.SYS_MEMFD_CREATE, native, nil, seccompRetUserNotif},
		{"other calls are not this filter's business", false, unix.SYS_GETPID, native, nil, seccompRetAllow},
		{"a foreign ABI is left to the deny filter (ERRNO beats USER_NOTIF)", false, unix.SYS_EXECVE, unix.AUDIT_ARCH_I386, nil, seccompRetAllow},
		{"socket(AF_UNIX) is not sent without refuseUnix", false, unix.SYS_SOCKET, native, []uint64{afUnix}, seccompRetAllow},
		{"socket(AF_UNIX) goes to the listener with refuseUnix (refused and recorded)", true, unix.SYS_SOCKET, native, []uint64{afUnix, unix.SOCK_STREAM}, seccompRetUserNotif},
		{"socket(AF_UNIX) with garbage in the high word still goes there", true, unix.SYS_SOCKET, native, []uint64{1<<32 | afUnix}, seccompRetUserNotif},
		{"socket(AF_INET) is left alone with refuseUnix", true, unix.SYS_SOCKET, native, []uint64{unix.AF_INET}, seccompRetAllow},
		{"execve still goes there with refuseUnix", true, unix.SYS_EXECVE, native, nil, seccompRetUserNotif},
		{"socketpair(AF_UNIX) is never sent", true, unix.SYS_SOCKETPAIR, native, []uint64{afUnix}, seccompRetAllow},
	}
	if x32Bit != 0 {
		tests = append(tests, tcase{"x32 execve is left to the deny filter", false, x32Bit | 520, native, nil, seccompRetAllow})
	}
	for _, tc := range tests {
		prog, err := buildNotifyFilter(nativeArch(), tc.refuseUnix)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("the VM rejects the filter: %v", err)
		}
		ret, err := vm.Run(seccompData(tc.nr, tc.arch, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		if uint32(ret) != tc.want {
			t.Errorf("%s: got %#x, want %#x", tc.why, ret, tc.want)
		}
	}
}

// TestDenyFilterLeavesUnixToNotifier: with unixToNotifier the deny filter
// lets socket(AF_UNIX) through to the notifier (its ERRNO would win over
// USER_NOTIF, and the refusal would go unrecorded); with allowUnix or
// without the notifier, it decides as before.
func TestDenyFilterLeavesUnixToNotifier(t *testing.T) {
	data := seccompData(unix.SYS_SOCKET, uint32(auditArch), afUnix)
	if got := runFilter(t, filterOptions{unixToNotifier: true}, data); got != seccompRetAllow {
		t.Errorf("unixToNotifier: socket(AF_UNIX) got %s, want allow (the notifier refuses it)", retName(got))
	}
	if got := runFilter(t, filterOptions{}, data); got != retEPERM {
		t.Errorf("no notifier: socket(AF_UNIX) got %s, want EPERM", retName(got))
	}
	if got := runFilter(t, filterOptions{unixToNotifier: true}, seccompData(unix.SYS_SOCKET, uint32(auditArch), afPacket)); got != retEPERM {
		t.Errorf("unixToNotifier: socket(AF_PACKET) got %s, want EPERM", retName(got))
	}
}
