package guard

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit is __X32_SYSCALL_BIT: x32 calls share AUDIT_ARCH_X86_64 and
	// are told apart by this bit in the syscall number.
	x32Bit = 0x40000000
)

// modeCalls are the calls that set a file's mode, with the index of their
// mode argument (and of their flags argument for the open family, -1
// otherwise: they always create or change).
var modeCalls = []modeCall{
	{"chmod", unix.SYS_CHMOD, 1, -1},
	{"fchmod", unix.SYS_FCHMOD, 1, -1},
	{"fchmodat", unix.SYS_FCHMODAT, 2, -1},
	{"fchmodat2", unix.SYS_FCHMODAT2, 2, -1},
	{"creat", unix.SYS_CREAT, 1, -1},
	{"mknod", unix.SYS_MKNOD, 1, -1},
	{"mknodat", unix.SYS_MKNODAT, 2, -1},
	{"open", unix.SYS_OPEN, 2, 1},
	{"openat", unix.SYS_OPENAT, 3, 2},
}
