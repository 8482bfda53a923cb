package guard

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Seccomp return values (include/uapi/linux/seccomp.h). This file is pure
// computation, with no system calls; the tests run the filter in
// golang.org/x/net/bpf's VM.
const (
	seccompRetAllow     = 0x7fff0000
	seccompRetErrno     = 0x00050000
	seccompRetUserNotif = 0x7fc00000

	errnoEPERM  = 1
	errnoENOSYS = 38

	retEPERM  = seccompRetErrno | errnoEPERM
	retENOSYS = seccompRetErrno | errnoENOSYS
)

// Offsets into struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6].
// Only little-endian ABIs are supported, so the low half of args[i] is at
// 16+8i.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
)

// argLo is the offset of the low 32 bits of syscall argument i. Every
// argument the filter inspects is an int (socket's domain, ioctl's cmd) or
// has all its meaningful bits in the low word (clone and unshare flags: the
// kernel truncates legacy clone flags to 32 bits and rejects unknown high
// bits in unshare). Comparing only the low word is therefore exact, and it
// is also the safe choice: a filter that compared all 64 bits of an int
// argument could be bypassed by setting garbage in the high word, which the
// kernel ignores.
func argLo(i int) uint32 { return uint32(offArg0 + 8*i) }

// Address families refused by socket(2).
const (
	afUnix   = 1
	afPacket = 17
	afALG    = 38
	afVsock  = 40
)

// Terminal ioctls that inject input into another process's terminal, or
// change the terminal itself in a way that outlives the worker: nsgate run
// hands the worker the caller's terminal, whose line discipline, exclusive
// flag and stopped output stay when the worker is gone (the null
// discipline, which any user may set, leaves the caller's shell a terminal
// it can neither read nor write; stopped output hangs its next write).
const (
	ioctlTIOCSTI   = 0x5412 // push a byte into the tty's input queue
	ioctlTIOCLINUX = 0x541c // on a VT: paste the selection (TIOCL_PASTESEL), same effect
	ioctlTIOCSETD  = 0x5423 // set the line discipline
	ioctlTIOCEXCL  = 0x540c // exclusive mode: every later open of the terminal fails (EBUSY)
	ioctlTCXONC    = 0x540a // tcflow: TCOOFF stops the output, and the caller's next write hangs
)

// Namespace flags (include/uapi/linux/sched.h).
const (
	cloneNewTime   = 0x00000080
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	// nsFlagsClone are the namespace flags of the legacy clone(2). Bit
	// 0x80 is not among them: there it belongs to CSIGNAL, the exit signal.
	nsFlagsClone = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet
	// nsFlagsUnshare adds CLONE_NEWTIME, which unshare(2) accepts.
	nsFlagsUnshare = nsFlagsClone | cloneNewTime
)

// File mode bits the worker may not set: a setuid or setgid program it
// left in a --rw tree (nosuid only inside the sandbox) would give its uid
// to anyone on the host who runs it afterwards.
const modeSetID = 0o6000

// Open flags that make open(2) and openat(2) create a file (x86 and arm64
// values), so that their mode argument counts.
const openCreates = 0o100 /* O_CREAT */ | 0o20000000 /* __O_TMPFILE */

// modeCall is a call that sets a file's mode: the mode is argument mode;
// for the open family (flags >= 0) only when the flags create a file.
type modeCall struct {
	name        string
	nr          uint32
	mode, flags int
}

// sysno names one system call of the native ABI.
type sysno struct {
	name string
	nr   uint32
}

// archSpec is what the filter needs to know about the native syscall ABI.
// The per-architecture files provide it (nativeArch).
type archSpec struct {
	// auditArch is the AUDIT_ARCH_* value of the native ABI; any other
	// value in seccomp_data.arch (ia32 on amd64, AArch32 on arm64) is a
	// foreign ABI and refused.
	auditArch uint32
	// x32Bit, when non-zero, is the syscall-number bit that selects the
	// x32 ABI (which shares AUDIT_ARCH_X86_64); numbers at or above it are
	// refused.
	x32Bit uint32
	// deny are refused with EPERM whatever their arguments.
	deny []sysno
	// The calls whose arguments the filter inspects.
	clone, clone3, unshare, socket, ioctl uint32
	// modes are the calls that set a file's mode: refused (EPERM) when
	// the mode has the setuid or setgid bit. openat2 carries its mode in
	// a struct the filter cannot read and is refused with ENOSYS (libc
	// falls back to openat).
	modes   []modeCall
	openat2 uint32
	// The calls the exec notifier sends to user space.
	execve, execveat, memfdCreate uint32
}

// filterOptions are the user's choices that change the filter.
type filterOptions struct {
	allowUserns bool // clone/unshare may create namespaces
	allowUnix   bool // socket(AF_UNIX) is allowed
	// unixToNotifier: socket(AF_UNIX) is left to the exec notifier (which
	// refuses and records it, see buildNotifyFilter) instead of being
	// refused here. Only with a notifier installed after this filter: the
	// kernel prefers this filter's ERRNO to the notifier's USER_NOTIF.
	unixToNotifier bool
}

// buildFilter returns the seccomp program for arch a. The program is a
// deny list: everything not named below is allowed.
//
//   - a foreign ABI (arch mismatch) or the x32 bit: EPERM;
//   - every call in a.deny: EPERM;
//   - clone3: ENOSYS, so that libc falls back to clone(2), whose flags are
//     in a register the filter can inspect (clone3's are behind a pointer);
//   - socket(AF_PACKET|AF_VSOCK|AF_ALG): EPERM; socket(AF_UNIX) too unless
//     allowUnix (socketpair(2) is never restricted);
//   - ioctl(TIOCSTI|TIOCLINUX|TIOCSETD|TIOCEXCL|TCXONC): EPERM;
//   - unless allowUserns, clone and unshare with any CLONE_NEW* flag: EPERM;
//   - chmod, fchmod, fchmodat(2), creat, mknod(at) and a creating
//     open(at) whose mode has the setuid or setgid bit: EPERM; openat2:
//     ENOSYS.
func buildFilter(a *archSpec, o filterOptions) ([]bpf.Instruction, error) {
	var p program
	p.add(bpf.LoadAbsolute{Off: offArch, Size: 4})
	p.jeq(a.auditArch, "native", "deny")

	p.label("native")
	p.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	if a.x32Bit != 0 {
		p.jge(a.x32Bit, "deny", "")
	}
	for _, s := range a.deny {
		p.jeq(s.nr, "deny", "")
	}
	p.jeq(a.clone3, "enosys", "")
	if a.openat2 != 0 {
		p.jeq(a.openat2, "enosys", "")
	}
	for i, m := range a.modes {
		p.jeq(m.nr, fmt.Sprintf("mode%d", i), "")
	}
	p.jeq(a.socket, "socket", "")
	p.jeq(a.ioctl, "ioctl", "")
	if !o.allowUserns {
		p.jeq(a.clone, "clone", "")
		p.jeq(a.unshare, "unshare", "")
	}
	p.ret(seccompRetAllow)

	p.label("socket")
	p.add(bpf.LoadAbsolute{Off: argLo(0), Size: 4})
	for _, af := range []uint32{afPacket, afVsock, afALG} {
		p.jeq(af, "deny", "")
	}
	if !o.allowUnix && !o.unixToNotifier {
		p.jeq(afUnix, "deny", "")
	}
	p.ret(seccompRetAllow)

	p.label("ioctl")
	p.add(bpf.LoadAbsolute{Off: argLo(1), Size: 4})
	p.jeq(ioctlTIOCSTI, "deny", "")
	p.jeq(ioctlTIOCLINUX, "deny", "")
	p.jeq(ioctlTIOCSETD, "deny", "")
	p.jeq(ioctlTIOCEXCL, "deny", "")
	p.jeq(ioctlTCXONC, "deny", "")
	p.ret(seccompRetAllow)

	if !o.allowUserns {
		p.label("clone")
		p.add(bpf.LoadAbsolute{Off: argLo(0), Size: 4})
		p.jset(nsFlagsClone, "deny", "")
		p.ret(seccompRetAllow)

		p.label("unshare")
		p.add(bpf.LoadAbsolute{Off: argLo(0), Size: 4})
		p.jset(nsFlagsUnshare, "deny", "")
		p.ret(seccompRetAllow)
	}

	for i, m := range a.modes {
		p.label(fmt.Sprintf("mode%d", i))
		if m.flags >= 0 {
			p.add(bpf.LoadAbsolute{Off: argLo(m.flags), Size: 4})
			p.jset(openCreates, "", "allow")
		}
		p.add(bpf.LoadAbsolute{Off: argLo(m.mode), Size: 4})
		p.jset(modeSetID, "deny", "allow")
	}

	p.label("allow")
	p.ret(seccompRetAllow)
	p.label("deny")
	p.ret(retEPERM)
	p.label("enosys")
	p.ret(retENOSYS)
	return p.assemble()
}

// buildNotifyFilter returns the exec notifier's program for arch a:
// execve, execveat and memfd_create of the native ABI go to the listener
// (SECCOMP_RET_USER_NOTIF), and so does socket(AF_UNIX) when refuseUnix
// (the listener refuses it with EPERM and records it: a refusal the worker
// would otherwise meet in silence); everything else is allowed here. It is
// stacked on buildFilter's program, which refuses foreign ABIs and the x32
// bit; the kernel runs both and ERRNO takes precedence over USER_NOTIF, so
// a call the deny filter refuses never reaches the listener.
func buildNotifyFilter(a *archSpec, refuseUnix bool) ([]bpf.Instruction, error) {
	var p program
	p.add(bpf.LoadAbsolute{Off: offArch, Size: 4})
	p.jeq(a.auditArch, "", "allow")
	p.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	p.jeq(a.execve, "notify", "")
	p.jeq(a.execveat, "notify", "")
	p.jeq(a.memfdCreate, "notify", "")
	if refuseUnix {
		p.jeq(a.socket, "", "allow")
		p.add(bpf.LoadAbsolute{Off: argLo(0), Size: 4})
		p.jeq(afUnix, "notify", "")
	}
	p.label("allow")
	p.ret(seccompRetAllow)
	p.label("notify")
	p.ret(seccompRetUserNotif)
	return p.assemble()
}

// program is a tiny assembler for classic BPF with symbolic forward jump
// targets. A target "" means the next instruction.
type program struct {
	insns  []bpf.Instruction
	fixups []fixup
	labels map[string]int
}

type fixup struct {
	at        int
	jumpTrue  string
	jumpFalse string
	cond      bpf.JumpTest
	val       uint32
}

func (p *program) add(i bpf.Instruction) { p.insns = append(p.insns, i) }

func (p *program) ret(v uint32) { p.add(bpf.RetConstant{Val: v}) }

func (p *program) label(name string) {
	if p.labels == nil {
		p.labels = make(map[string]int)
	}
	p.labels[name] = len(p.insns)
}

func (p *program) jump(cond bpf.JumpTest, val uint32, t, f string) {
	p.fixups = append(p.fixups, fixup{at: len(p.insns), jumpTrue: t, jumpFalse: f, cond: cond, val: val})
	p.add(nil) // placeholder, filled in by assemble
}

func (p *program) jeq(val uint32, t, f string)  { p.jump(bpf.JumpEqual, val, t, f) }
func (p *program) jge(val uint32, t, f string)  { p.jump(bpf.JumpGreaterOrEqual, val, t, f) }
func (p *program) jset(val uint32, t, f string) { p.jump(bpf.JumpBitsSet, val, t, f) }

// assemble resolves the labels. Classic BPF jumps only forward and at most
// 255 instructions; the filter is far shorter than that.
func (p *program) assemble() ([]bpf.Instruction, error) {
	skip := func(from int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := p.labels[label]
		if !ok {
			return 0, fmt.Errorf("bpf: undefined label %q", label)
		}
		d := to - from - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("bpf: jump to %q out of range (%d)", label, d)
		}
		return uint8(d), nil
	}
	out := append([]bpf.Instruction(nil), p.insns...)
	for _, f := range p.fixups {
		t, err := skip(f.at, f.jumpTrue)
		if err != nil {
			return nil, err
		}
		e, err := skip(f.at, f.jumpFalse)
		if err != nil {
			return nil, err
		}
		out[f.at] = bpf.JumpIf{Cond: f.cond, Val: f.val, SkipTrue: t, SkipFalse: e}
	}
	if len(out) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("bpf: program too long (%d instructions)", len(out))
	}
	return out, nil
}
