package lab

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"
)

// TestI386Exit42 checks that the probe program is a well-formed i386
// executable, and reports what the probe finds on this kernel.
func TestI386Exit42(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(i386Exit42()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Class != elf.ELFCLASS32 || f.Machine != elf.EM_386 || f.Type != elf.ET_EXEC || len(f.Progs) != 1 || f.Progs[0].Type != elf.PT_LOAD {
		t.Errorf("class %v machine %v type %v progs %d", f.Class, f.Machine, f.Type, len(f.Progs))
	}
	if f.Entry != f.Progs[0].Vaddr+52+32 {
		t.Errorf("entry %#x, want the code right after the headers", f.Entry)
	}
	t.Logf("IA32 emulation: %s", ia32Emulation(t.TempDir()))
	if os.Getenv("NSGATE_DUMP_I386") != "" {
		os.WriteFile(os.Getenv("NSGATE_DUMP_I386"), i386Exit42(), 0o755)
	}
}
