package guard

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	// arm64 has no second ABI that shares its audit arch (AArch32 tasks
	// report AUDIT_ARCH_ARM and are refused by the arch check).
	x32Bit = 0
)

// modeCalls are the calls that set a file's mode, with the index of their
// mode argument (and of their flags argument for the open family, -1
// otherwise). arm64 has only the *at forms.
var modeCalls = []modeCall{
	{"fchmod", unix.SYS_FCHMOD, 1, -1},
	{"fchmodat", unix.SYS_FCHMODAT, 2, -1},
	{"fchmodat2", unix.SYS_FCHMODAT2, 2, -1},
	{"mknodat", unix.SYS_MKNODAT, 2, -1},
	{"openat", unix.SYS_OPENAT, 3, 2},
}
