package guard

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	// arm64 has no second ABI that shares its audit arch (AArch32 tasks
	// report AUDIT_ARCH_ARM and are refused by the arch check).
	x32Bit = 0
)
