package sandbox

import (
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp return values and the offsets of struct seccomp_data (int nr;
// u32 arch; u64 ip; u64 args[6]; little-endian ABIs only).
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)

	seccompOffNr   = 0
	seccompOffArch = 4
	seccompOffArg0 = 16
)

// gatewayDenied are the system calls the gateway never needs once it is
// serving: running programs, debugging or reading other processes,
// mounts and namespaces, kernel modules and kexec, BPF and perf, the
// kernel keyring, userfaultfd and io_uring (which would bypass this
// filter), file handles, and host administration. The list follows
// slirp4netns's --enable-seccomp blocklist in spirit; the numbers are the
// native ABI's (golang.org/x/sys/unix).
var gatewayDenied = []uint32{
	unix.SYS_EXECVE, unix.SYS_EXECVEAT,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_PIDFD_GETFD, unix.SYS_KCMP, unix.SYS_PROCESS_MADVISE,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS, unix.SYS_UNSHARE,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_FANOTIFY_INIT,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SYSLOG, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_VHANGUP,
	unix.SYS_PERSONALITY, unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
	unix.SYS_LOOKUP_DCOOKIE, unix.SYS_NFSSERVCTL,
}

// cloneNewFlags are the CLONE_NEW* bits of clone(2) (not CLONE_NEWTIME,
// 0x80, which clone reads as part of the exit signal).
const cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// filterArch describes the native syscall ABI for the filter.
type filterArch struct {
	audit  uint32 // AUDIT_ARCH_* of the native ABI
	x32Bit uint32 // syscall-number bit of the x32 ABI (amd64), or 0
}

func nativeFilterArch() (filterArch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return filterArch{audit: unix.AUDIT_ARCH_X86_64, x32Bit: 0x40000000}, nil
	case "arm64":
		return filterArch{audit: unix.AUDIT_ARCH_AARCH64}, nil
	}
	return filterArch{}, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}

// GatewayFilter returns the seccomp program for nsgate's own process under
// slirp4netns --enable-seccomp: a deny list, everything else allowed.
//   - another syscall ABI (ia32 on amd64, AArch32 on arm64) or x32: EPERM;
//   - every call in gatewayDenied: EPERM;
//   - clone with a CLONE_NEW* flag: EPERM (threads are created without);
//   - clone3: ENOSYS, so that a caller falls back to clone, whose flags the
//     filter can see.
func GatewayFilter() ([]bpf.Instruction, error) {
	a, err := nativeFilterArch()
	if err != nil {
		return nil, err
	}
	return buildGatewayFilter(a, gatewayDenied), nil
}

// buildGatewayFilter lays the program out as straight-line tests that
// jump forward to one of the three return instructions at the end:
//
//	ld arch; jeq native ? +1 : deny
//	ld nr; [jge x32 → deny]; jeq each denied → deny; jeq clone3 → enosys;
//	jeq clone ? → clone check : allow
//	clone: ld arg0; jset NEW* → deny; allow
//	allow / deny / enosys
func buildGatewayFilter(a filterArch, denied []uint32) []bpf.Instruction {
	var p []bpf.Instruction
	// Jumps to the trailing returns are patched once the length is known.
	type patch struct {
		at     int
		target int // 0 allow, 1 deny, 2 enosys
		onTrue bool
	}
	var patches []patch
	const (
		toAllow = iota
		toDeny
		toENOSYS
	)
	jumpTo := func(insn bpf.JumpIf, target int) {
		patches = append(patches, patch{at: len(p), target: target, onTrue: true})
		p = append(p, insn)
	}
	p = append(p, bpf.LoadAbsolute{Off: seccompOffArch, Size: 4})
	jumpTo(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: a.audit}, toDeny)
	p = append(p, bpf.LoadAbsolute{Off: seccompOffNr, Size: 4})
	if a.x32Bit != 0 {
		jumpTo(bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: a.x32Bit}, toDeny)
	}
	for _, nr := range denied {
		jumpTo(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr}, toDeny)
	}
	jumpTo(bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3}, toENOSYS)
	// Not clone: allow. clone: inspect the flags (low word of arg 0).
	jumpTo(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE}, toAllow)
	p = append(p, bpf.LoadAbsolute{Off: seccompOffArg0, Size: 4})
	jumpTo(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNewFlags}, toDeny)

	ret := len(p)
	p = append(p,
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM},
		bpf.RetConstant{Val: retENOSYS},
	)
	for _, pt := range patches {
		j := p[pt.at].(bpf.JumpIf)
		// Skips count from the instruction after the jump.
		j.SkipTrue = uint8(ret + pt.target - pt.at - 1)
		p[pt.at] = j
	}
	return p
}
