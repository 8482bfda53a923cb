//go:build linux && (amd64 || arm64)

package guard

import "golang.org/x/sys/unix"

// deniedSyscalls are refused with EPERM whatever their arguments. The
// numbers come from x/sys/unix for the architecture being built, so one
// list serves amd64 and arm64.
var deniedSyscalls = []sysno{
	// Reading or writing another process's memory or descriptors.
	// pidfd_getfd needs the same permission as ptrace attach and gives a
	// copy of any descriptor of the target.
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD},
	// The mount family, old and new API (open_tree_attr: Linux 6.15).
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	// Opening a file by handle bypasses path checks (the "shocker"
	// container escape); it needs CAP_DAC_READ_SEARCH, refused anyway.
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	// Kernel attack surface a browser never needs.
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	// io_uring performs socket, open and other operations without the
	// syscalls this filter inspects.
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	// Joining an existing namespace is never allowed, even with
	// AllowUserns.
	{"setns", unix.SYS_SETNS},
}

// nativeArch describes the ABI this binary was built for.
func nativeArch() *archSpec {
	return &archSpec{
		auditArch: auditArch,
		x32Bit:    x32Bit,
		deny:      deniedSyscalls,
		clone:     unix.SYS_CLONE,
		clone3:    unix.SYS_CLONE3,
		unshare:   unix.SYS_UNSHARE,
		socket:    unix.SYS_SOCKET,
		ioctl:     unix.SYS_IOCTL,
		modes:     modeCalls,
		openat2:   unix.SYS_OPENAT2,

		execve:      unix.SYS_EXECVE,
		execveat:    unix.SYS_EXECVEAT,
		memfdCreate: unix.SYS_MEMFD_CREATE,
	}
}
