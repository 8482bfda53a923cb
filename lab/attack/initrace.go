package attack

import (
	"bytes"
	"encoding/binary"
	"runtime"

	"github.com/nsgate/nsgate/internal/elfgen"
)

// The init memory race (fs-race-init-mem): the sandbox's init shares the
// worker's uid, so while init is dumpable the worker may open
// /proc/1/mem read-write, rewrite init's code and with it PID 1 of the
// sandbox (clear its parent-death signal and outlive nsgate, report any
// exit status). Init used to become not dumpable only after the worker's
// first exec, which left a window of microseconds to milliseconds in which
// a worker program's first instructions won; the attack review did that
// and kept a worker running after nsgate had been killed. Only the
// worker's very first program can race (a later one starts long after),
// so the lab runs this program as the command of runs of their own
// (PhaseInitRace).

// PhaseInitRace is the phase of the attempt that races init.
const PhaseInitRace = "init-race"

// Exit statuses of InitRaceProgram.
const (
	// InitRaceRefused: every open of /proc/1/mem was refused.
	InitRaceRefused = 17
	// InitRaceWon: /proc/1/mem opened read-write.
	InitRaceWon = 42
)

// InitRaceRuns is how many sandboxes the lab starts with InitRaceProgram
// as their command (on an unfixed nsgate about every second one won).
const InitRaceRuns = 20

// InitRaceTries is how many times InitRaceProgram tries the open (a few
// tens of milliseconds, longer than any window seen).
const InitRaceTries = 50000

// InitRaceProgram returns a static executable for this machine's
// architecture that tries open("/proc/1/mem", O_RDWR) InitRaceTries times
// from its first instruction and exits InitRaceWon as soon as one
// succeeds, InitRaceRefused when none did. It is made byte by byte (no
// toolchain, no libc: nothing runs before the first try). ok is false on
// architectures it has no code for.
func InitRaceProgram() (prog []byte, ok bool) {
	if runtime.GOARCH != "amd64" {
		return nil, false
	}
	le := binary.LittleEndian
	var c bytes.Buffer
	c.Write([]byte{0x41, 0xbc}) // mov r12d, tries
	binary.Write(&c, le, uint32(InitRaceTries))
	// loop (offset 6):
	c.Write([]byte{0xb8, 2, 0, 0, 0})              // mov eax, SYS_open
	c.Write([]byte{0x48, 0x8d, 0x3d, 43, 0, 0, 0}) // lea rdi, [rip+path]
	c.Write([]byte{0xbe, 2, 0, 0, 0})              // mov esi, O_RDWR
	c.Write([]byte{0x31, 0xd2})                    // xor edx, edx
	c.Write([]byte{0x0f, 0x05})                    // syscall
	c.Write([]byte{0x48, 0x85, 0xc0})              // test rax, rax
	c.Write([]byte{0x79, 17})                      // jns won
	c.Write([]byte{0x41, 0xff, 0xcc})              // dec r12d
	c.Write([]byte{0x75, 0xe1})                    // jnz loop
	c.Write([]byte{0xb8, 231, 0, 0, 0})            // mov eax, SYS_exit_group
	c.Write([]byte{0xbf, InitRaceRefused, 0, 0, 0})
	c.Write([]byte{0x0f, 0x05})
	// won (offset 49):
	c.Write([]byte{0xb8, 231, 0, 0, 0})
	c.Write([]byte{0xbf, InitRaceWon, 0, 0, 0})
	c.Write([]byte{0x0f, 0x05})
	// path (offset 61):
	c.WriteString("/proc/1/mem\x00")
	return elfgen.X8664(c.Bytes(), ""), true
}
