// Package elfgen writes minimal x86-64 ELF executables byte by byte, for
// the tests and the lab: programs that need neither a C toolchain nor
// files from the host.
package elfgen

import (
	"bytes"
	"encoding/binary"
)

// X8664 returns a static x86-64 executable whose one read-execute
// PT_LOAD holds the headers and code, entry at the code. With interp !=
// "" it also has a PT_INTERP naming it (then the file is only good for
// reading, not for running).
func X8664(code []byte, interp string) []byte {
	const ehsize, phsize, base = 64, 56, 0x400000
	phnum := 1
	var interpBytes []byte
	if interp != "" {
		phnum = 2
		interpBytes = append([]byte(interp), 0)
	}
	codeOff := ehsize + phsize*phnum
	total := codeOff + len(code) + len(interpBytes)
	le := binary.LittleEndian
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0})
	b.Write(make([]byte, 8))
	binary.Write(&b, le, uint16(2))                // ET_EXEC
	binary.Write(&b, le, uint16(62))               // EM_X86_64
	binary.Write(&b, le, uint32(1))                // EV_CURRENT
	binary.Write(&b, le, uint64(base+codeOff))     // e_entry
	binary.Write(&b, le, uint64(ehsize))           // e_phoff
	binary.Write(&b, le, uint64(0))                // e_shoff
	binary.Write(&b, le, uint32(0))                // e_flags
	binary.Write(&b, le, []uint16{ehsize, phsize}) // e_ehsize, e_phentsize
	binary.Write(&b, le, []uint16{uint16(phnum), 0, 0, 0})
	if interp != "" {
		off := uint64(codeOff + len(code))
		binary.Write(&b, le, []uint32{3, 4}) // PT_INTERP, PF_R
		binary.Write(&b, le, []uint64{off, base + off, base + off,
			uint64(len(interpBytes)), uint64(len(interpBytes)), 1})
	}
	binary.Write(&b, le, []uint32{1, 5}) // PT_LOAD, PF_R|PF_X
	binary.Write(&b, le, []uint64{0, base, base, uint64(total), uint64(total), 0x1000})
	b.Write(code)
	b.Write(interpBytes)
	return b.Bytes()
}
