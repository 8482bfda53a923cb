package guard

import (
	"bytes"
	"encoding/binary"

	"github.com/nsgate/nsgate/internal/elfgen"
)

// Hand-made ELF files for the tests. They are written byte by byte so that
// the tests need neither a C toolchain nor files from the host.

// elf64 returns a minimal x86-64 executable. With interp != "" it has a
// PT_INTERP naming it (the file is then only good for Resolve, not for
// running).
func elf64(interp string) []byte {
	return elfgen.X8664([]byte{0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05}, interp) // exit(0)
}

// ia32Probe returns a static i386 executable that makes one ia32 system
// call (getpid, through int 0x80) and reports the outcome without any
// further system call, since under the guard every ia32 call fails:
//
//	getpid succeeded -> exit(42)
//	getpid got -EPERM -> ud2 (SIGILL)
//
// Anything else (e.g. the process killed by seccomp) shows as another
// signal or status.
func ia32Probe() []byte {
	const ehsize, phsize = 52, 32
	const base = 0x08048000
	code := []byte{
		0xb8, 20, 0, 0, 0, // mov eax, 20 (getpid)
		0xcd, 0x80, // int 0x80
		0x83, 0xf8, 0xff, // cmp eax, -1 (-EPERM)
		0x74, 0x0c, // je ud2
		0xbb, 42, 0, 0, 0, // mov ebx, 42
		0xb8, 1, 0, 0, 0, // mov eax, 1 (exit)
		0xcd, 0x80, // int 0x80
		0x0f, 0x0b, // ud2
	}
	total := ehsize + phsize + len(code)

	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0})
	b.Write(make([]byte, 8))
	binary.Write(&b, le, []uint16{2, 3})                                    // ET_EXEC, EM_386
	binary.Write(&b, le, []uint32{1, base + ehsize + phsize, ehsize, 0, 0}) // version, entry, phoff, shoff, flags
	binary.Write(&b, le, []uint16{ehsize, phsize, 1, 0, 0, 0})
	binary.Write(&b, le, []uint32{1, 0, base, base, uint32(total), uint32(total), 5, 0x1000})
	b.Write(code)
	return b.Bytes()
}
