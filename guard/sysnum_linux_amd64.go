package guard

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit is __X32_SYSCALL_BIT: x32 calls share AUDIT_ARCH_X86_64 and
	// are told apart by this bit in the syscall number.
	x32Bit = 0x40000000
)
