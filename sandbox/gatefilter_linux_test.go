package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData builds a struct seccomp_data for golang.org/x/net/bpf's VM.
// The VM loads words big-endian while the kernel loads them in native
// order, so the words are written big-endian here to read back as the
// kernel would see them.
func seccompData(arch, nr uint32, arg0 uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[seccompOffNr:], nr)
	binary.BigEndian.PutUint32(b[seccompOffArch:], arch)
	binary.BigEndian.PutUint32(b[seccompOffArg0:], uint32(arg0))
	return b
}

func TestGatewayFilter(t *testing.T) {
	a, err := nativeFilterArch()
	if err != nil {
		t.Skipf("no filter for this architecture: %v", err)
	}
	prog, err := GatewayFilter()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("filter does not load: %v", err)
	}
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_SYSVSEM | unix.CLONE_THREAD)
	for _, tc := range []struct {
		why  string
		arch uint32
		nr   uint32
		arg0 uint64
		want uint32
	}{
		{"reading a socket is what the gateway does", a.audit, unix.SYS_READ, 0, retAllow},
		{"epoll is the Go poller", a.audit, unix.SYS_EPOLL_PWAIT, 0, retAllow},
		{"accepting forwarded connections", a.audit, unix.SYS_ACCEPT4, 0, retAllow},
		{"the runtime creates threads with clone and no namespace flag", a.audit, unix.SYS_CLONE, threadFlags, retAllow},
		{"a compromised gateway must not run programs", a.audit, unix.SYS_EXECVE, 0, retEPERM},
		{"nor through execveat", a.audit, unix.SYS_EXECVEAT, 0, retEPERM},
		{"nor debug other processes", a.audit, unix.SYS_PTRACE, 0, retEPERM},
		{"nor steal their descriptors", a.audit, unix.SYS_PIDFD_GETFD, 0, retEPERM},
		{"nor mount (the sandbox root stays)", a.audit, unix.SYS_MOUNT, 0, retEPERM},
		{"nor use the new mount API", a.audit, unix.SYS_FSOPEN, 0, retEPERM},
		{"nor join namespaces", a.audit, unix.SYS_SETNS, 0, retEPERM},
		{"nor create them", a.audit, unix.SYS_UNSHARE, 0, retEPERM},
		{"clone with CLONE_NEWUSER creates a namespace", a.audit, unix.SYS_CLONE, unix.CLONE_NEWUSER, retEPERM},
		{"clone with CLONE_NEWNET too", a.audit, unix.SYS_CLONE, threadFlags | unix.CLONE_NEWNET, retEPERM},
		{"clone3 hides its flags behind a pointer: ENOSYS makes callers fall back", a.audit, unix.SYS_CLONE3, 0, retENOSYS},
		{"io_uring would bypass the filter", a.audit, unix.SYS_IO_URING_SETUP, 0, retEPERM},
		{"bpf programs", a.audit, unix.SYS_BPF, 0, retEPERM},
		{"kernel modules", a.audit, unix.SYS_FINIT_MODULE, 0, retEPERM},
		{"a foreign ABI is refused whatever the call", a.audit ^ 0x40000000, unix.SYS_READ, 0, retEPERM},
	} {
		got, err := vm.Run(seccompData(tc.arch, tc.nr, tc.arg0))
		if err != nil {
			t.Fatalf("%s: %v", tc.why, err)
		}
		if uint32(got) != tc.want {
			t.Errorf("%s: nr %d arg0 %#x: got %#x, want %#x", tc.why, tc.nr, tc.arg0, got, tc.want)
		}
	}
	if a.x32Bit != 0 {
		got, _ := vm.Run(seccompData(a.audit, a.x32Bit|unix.SYS_READ, 0))
		if uint32(got) != retEPERM {
			t.Errorf("x32 read: got %#x, want EPERM: the x32 ABI would bypass the native numbers", got)
		}
	}
}

func TestGatewayFilterJumpsFit(t *testing.T) {
	// Every jump must land on one of the three returns: an overflowing
	// 8-bit skip would silently land elsewhere.
	a, err := nativeFilterArch()
	if err != nil {
		t.Skipf("no filter for this architecture: %v", err)
	}
	prog := buildGatewayFilter(a, gatewayDenied)
	if len(prog) > 250 {
		t.Fatalf("program of %d instructions: jumps may not fit in 8 bits", len(prog))
	}
	for i, insn := range prog {
		j, ok := insn.(bpf.JumpIf)
		if !ok {
			continue
		}
		dst := i + 1 + int(j.SkipTrue)
		if dst >= len(prog) {
			t.Fatalf("jump at %d leaves the program", i)
		}
		if _, ret := prog[dst].(bpf.RetConstant); !ret {
			t.Errorf("jump at %d lands on %v, not on a return", i, prog[dst])
		}
	}
}
