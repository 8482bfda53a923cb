package attack

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The attacker's syscall-level attempts: sockets, ICMP, exec and namespace
// escapes. They run in the worker; none sends anything off the worker's
// own network namespace except through its TUN (to the gateway).

const shell = "/bin/sh"

// socket tries to create a socket of kind; creating it is the breach (it
// is closed at once and never connected).
func (a *attacker) socket(kind socketKind) result {
	var domain, typ, proto int
	var what string
	switch kind {
	case sockRawIP:
		domain, typ, proto, what = unix.AF_INET, unix.SOCK_RAW, 253, "raw IPv4 socket, protocol 253"
	case sockPacket:
		domain, typ, proto, what = unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)), "AF_PACKET socket"
	case sockVsock:
		domain, typ, proto, what = unix.AF_VSOCK, unix.SOCK_STREAM, 0, "AF_VSOCK socket"
	default:
		return erroredf("unknown socket kind %d", kind)
	}
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return blockedf("%s: %v", what, err)
	}
	unix.Close(fd)
	return allowedf("created a %s", what)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ping sends one ICMP echo request to dst over a ping socket (or a raw
// socket) and waits for the reply.
func (a *attacker) ping(ctx context.Context, dst string, raw bool) result {
	typ, what := unix.SOCK_DGRAM, "ICMP ping socket"
	if raw {
		typ, what = unix.SOCK_RAW, "raw ICMP socket"
	}
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	if err != nil {
		return blockedf("%s: %v", what, err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(a.cfg.Timeout.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	pkt := []byte{8, 0, 0, 0, 0x4e, 0x53, 0, 1, 'n', 's', 'g', 'a', 't', 'e', '-', 'l', 'a', 'b'}
	binary.BigEndian.PutUint16(pkt[2:], icmpChecksum(pkt))
	to := &unix.SockaddrInet4{Addr: netip.MustParseAddr(dst).As4()}
	if err := unix.Sendto(fd, pkt, 0, to); err != nil {
		return blockedf("%s created, send: %v", what, err)
	}
	buf := make([]byte, 1500)
	deadline := time.Now().Add(a.cfg.Timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return blockedf("%s created, no echo reply: %v", what, err)
		}
		b := buf[:n]
		if raw && n > 20 {
			b = b[int(b[0]&0x0f)*4:]
		}
		if len(b) > 0 && b[0] == 0 {
			return allowedf("%s: echo reply from %s", what, dst)
		}
	}
	return blockedf("%s created, no echo reply", what)
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// runMarked runs cmd and decides: the marker in its output means a shell
// ran (allowed); a refused exec is blocked.
func (a *attacker) runMarked(ctx context.Context, cmd *exec.Cmd, what string) result {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	switch {
	case strings.Contains(text, a.marker):
		return allowedf("%s: it ran (its marker came back)", what)
	case err == nil:
		return erroredf("%s ran but printed no marker: %q", what, text)
	}
	if en := errnoOf(err); en == unix.EACCES || en == unix.EPERM {
		return blockedf("%s: %v", what, err)
	}
	if strings.HasPrefix(text, "blocked: ") {
		return blockedf("%s: %s", what, strings.TrimPrefix(text, "blocked: "))
	}
	return erroredf("%s: %v %q", what, err, text)
}

func (a *attacker) shellArgs() []string { return []string{"-c", "echo " + a.marker} }

func (a *attacker) helper(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, a.cfg.Self, append(append([]string(nil), a.cfg.HelperArgs...), args...)...)
}

// realShell is /bin/sh with symlinks resolved.
func realShell() (string, error) {
	p, err := filepath.EvalSymlinks(shell)
	if err != nil {
		return "", fmt.Errorf("no %s to try: %w", shell, err)
	}
	return p, nil
}

func execShell(ctx context.Context, a *attacker) result {
	if _, err := realShell(); err != nil {
		return erroredf("%v", err)
	}
	return a.runMarked(ctx, exec.CommandContext(ctx, shell, a.shellArgs()...), "exec "+shell)
}

// execCopy copies the shell into dir and runs the copy.
func execCopy(ctx context.Context, a *attacker, dir string) result {
	src, err := realShell()
	if err != nil {
		return erroredf("%v", err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return erroredf("read %s: %v", src, err)
	}
	dst := filepath.Join(dir, "nsgate-lab-sh-"+randHex(4))
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		return erroredf("write the copy: %v", err)
	}
	defer os.Remove(dst)
	return a.runMarked(ctx, exec.CommandContext(ctx, dst, a.shellArgs()...), "exec "+dst)
}

func execCopyTmp(ctx context.Context, a *attacker) result { return execCopy(ctx, a, os.TempDir()) }

func execCopyShm(ctx context.Context, a *attacker) result { return execCopy(ctx, a, "/dev/shm") }

func execSymlink(ctx context.Context, a *attacker) result {
	if _, err := realShell(); err != nil {
		return erroredf("%v", err)
	}
	link := filepath.Join(os.TempDir(), "nsgate-lab-link-"+randHex(4))
	if err := os.Symlink(shell, link); err != nil {
		return erroredf("symlink: %v", err)
	}
	defer os.Remove(link)
	return a.runMarked(ctx, exec.CommandContext(ctx, link, a.shellArgs()...), "exec "+link)
}

func execShebang(ctx context.Context, a *attacker) result {
	if _, err := realShell(); err != nil {
		return erroredf("%v", err)
	}
	script := filepath.Join(os.TempDir(), "nsgate-lab-script-"+randHex(4))
	if err := os.WriteFile(script, []byte("#!"+shell+"\necho "+a.marker+"\n"), 0o755); err != nil {
		return erroredf("write script: %v", err)
	}
	defer os.Remove(script)
	return a.runMarked(ctx, exec.CommandContext(ctx, script), "exec "+script)
}

func execProcFD(ctx context.Context, a *attacker) result {
	f, err := os.Open(shell)
	if err != nil {
		return erroredf("open %s: %v", shell, err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "/proc/self/fd/3", a.shellArgs()...)
	cmd.ExtraFiles = []*os.File{f}
	return a.runMarked(ctx, cmd, "exec /proc/self/fd/3 (an open "+shell+")")
}

// execMemfd runs a copy of the attacker itself from a memfd: a file with
// no path, which an attacker could fill with any program.
func execMemfd(ctx context.Context, a *attacker) result {
	return a.runMarked(ctx, a.helper(ctx, "memfd-exec", a.cfg.Self, a.marker), "execveat of a memfd holding a copy of "+a.cfg.Self)
}

func execLdso(ctx context.Context, a *attacker) result {
	sh, err := realShell()
	if err != nil {
		return erroredf("%v", err)
	}
	interp, err := elfInterp(sh)
	if err != nil {
		return erroredf("%v", err)
	}
	return a.runMarked(ctx, exec.CommandContext(ctx, interp, append([]string{sh}, a.shellArgs()...)...), "exec "+interp+" "+sh)
}

func execLdsoRenamed(ctx context.Context, a *attacker) result {
	sh, err := realShell()
	if err != nil {
		return erroredf("%v", err)
	}
	if a.cfg.WorkDir == "" {
		return erroredf("no work directory given to the attacker")
	}
	loader := filepath.Join(a.cfg.WorkDir, LoaderDir, RenamedLoader)
	if _, err := os.Stat(loader); err != nil {
		return erroredf("the lab placed no renamed loader: %v", err)
	}
	return a.runMarked(ctx, exec.CommandContext(ctx, loader, append([]string{sh}, a.shellArgs()...)...), "exec "+loader+" "+sh)
}

// elfInterp returns the PT_INTERP of an ELF file.
func elfInterp(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err != nil {
				return "", fmt.Errorf("read interpreter of %s: %w", path, err)
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", fmt.Errorf("%s is static: no ELF interpreter to try", path)
}

func nsNewUserns(ctx context.Context, a *attacker) result {
	cmd := a.helper(ctx, "hello", a.marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case strings.Contains(out.String(), a.marker):
		return allowedf("a child ran in new user and network namespaces")
	case err != nil && (errnoOf(err) == unix.EPERM || errnoOf(err) == unix.EACCES || errnoOf(err) == unix.ENOSPC || errnoOf(err) == unix.EINVAL):
		return blockedf("%v", err)
	}
	return erroredf("%v %q", err, out.String())
}

// onThrowawayThread runs f on a locked OS thread that is never unlocked,
// so whatever f does to the thread (setns, ptrace) dies with it.
func onThrowawayThread(f func() result) result {
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ch <- f()
	}()
	return <-ch
}

func nsSetnsPID1(ctx context.Context, a *attacker) result {
	return onThrowawayThread(func() result {
		before, _ := os.Readlink("/proc/thread-self/ns/net")
		fd, err := unix.Open("/proc/1/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return blockedf("open /proc/1/ns/net: %v", err)
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return blockedf("setns: %v", err)
		}
		after, _ := os.Readlink("/proc/thread-self/ns/net")
		if after == before {
			return blockedf("setns into PID 1's namespace changed nothing (%s): it is the worker's own", after)
		}
		return allowedf("joined network namespace %s (was %s)", after, before)
	})
}

func nsMount(ctx context.Context, a *attacker) result {
	dir, err := os.MkdirTemp("", "nsgate-lab-mnt-")
	if err != nil {
		return erroredf("%v", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("nsgate-lab", dir, "tmpfs", 0, "size=64k"); err != nil {
		return blockedf("mount tmpfs: %v", err)
	}
	unix.Unmount(dir, unix.MNT_DETACH)
	return allowedf("mounted a tmpfs on %s", dir)
}

func nsPtraceInit(ctx context.Context, a *attacker) result {
	return onThrowawayThread(func() result {
		// SEIZE does not stop the tracee; the thread's end detaches it.
		if err := unix.PtraceSeize(1); err != nil {
			return blockedf("ptrace(PTRACE_SEIZE, 1): %v", err)
		}
		return allowedf("seized PID 1 with ptrace")
	})
}

// helperArgsOf returns the arguments that made this process a helper
// (everything from after the program name up to and including
// "--helper").
func helperArgsOf(argv []string) []string {
	for i, a := range argv {
		if a == "--helper" && i > 0 {
			return append([]string(nil), argv[1:i+1]...)
		}
	}
	return nil
}

// Helper is the attacker's helper process (`nsgate __attack
// --helper ...`): the steps that need a process of their own. It returns
// the exit status: 0 done, 3 refused (it printed "blocked: ..."), 2 usage
// or other failure.
//
//	hello MARKER             print MARKER (proof that a child started)
//	proof PATH MARKER        create PATH (unless "") and print MARKER: what
//	                         a copy of this program that ran would leave
//	memfd-exec PATH MARKER   copy PATH (this program) into a memfd and
//	                         execveat it as a "hello MARKER" helper
//	audit-volume DIR SIZE COPY -- CMD...
//	                         the lab's, not the attacker's: mount a tmpfs
//	                         of SIZE bytes on DIR in this process's mount
//	                         namespace, run CMD, copy DIR/audit.jsonl and
//	                         its head file to COPY (auditVolumeHelper)
func Helper(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "helper: no command")
		return 2
	}
	switch args[0] {
	case "proof":
		if len(args) != 3 {
			return 2
		}
		if args[1] != "" {
			os.WriteFile(args[1], []byte(args[2]+"\n"), 0o644)
		}
		fmt.Fprintln(stdout, args[2])
		return 0
	case "audit-volume":
		return auditVolumeHelper(args[1:], stdout, stderr)
	case "hello":
		if len(args) != 2 {
			return 2
		}
		fmt.Fprintln(stdout, args[1])
		return 0
	case "memfd-exec":
		if len(args) != 3 {
			return 2
		}
		data, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "helper: %v\n", err)
			return 2
		}
		fd, err := unix.MemfdCreate("nsgate-lab", 0)
		if err != nil {
			fmt.Fprintf(stdout, "blocked: memfd_create: %v\n", err)
			return 3
		}
		if _, err := unix.Write(fd, data); err != nil {
			fmt.Fprintf(stderr, "helper: write memfd: %v\n", err)
			return 2
		}
		argv := append(append([]string{"nsgate-lab-memfd"}, helperArgsOf(os.Args)...), "hello", args[2])
		err = execveatEmpty(fd, argv, os.Environ())
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			fmt.Fprintf(stdout, "blocked: execveat: %v\n", err)
			return 3
		}
		fmt.Fprintf(stderr, "helper: execveat: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "helper: unknown command %q\n", args[0])
	return 2
}

// DynamicProgram finds a harmless dynamically linked program and its ELF
// interpreter: the lab lets the worker run it, so that the interpreter is
// allowed as for any dynamic worker (exec-ldso).
func DynamicProgram() (path, interp string, ok bool) {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if in, err := elfInterp(real); err == nil {
			return real, in, true
		}
	}
	return "", "", false
}
