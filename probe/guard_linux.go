//go:build linux

package probe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The hidden guard probe is what the exec-guard tests run as the worker
// (it needs nothing installed in the sandbox). Each kind tries one thing
// the guard must refuse and prints the outcome on stdout: "ok", an errno
// name (EPERM, EACCES, ENOSYS...) or "RAN" when a refused program ran
// after all. It exits 0 once it has printed, 2 on usage errors.
//
//	nsgate __guardprobe memfd          memfd_create, fill it with nsgate, execveat(fd, "", AT_EMPTY_PATH)
//	nsgate __guardprobe procfd         open nsgate, execve("/proc/self/fd/N")
//	nsgate __guardprobe ran            print RAN (what the two above execute)
//	nsgate __guardprobe ptrace         PTRACE_ATTACH to a pid that does not exist (ESRCH without the guard)
//	nsgate __guardprobe userns         unshare(CLONE_NEWUSER) and a child cloned with CLONE_NEWUSER: "unshare=E clone=E"
//	nsgate __guardprobe io_uring       io_uring_setup (EFAULT without the guard)
//	nsgate __guardprobe bpf            bpf(BPF_PROG_LOAD, NULL)
//	nsgate __guardprobe unix PATH      socket(AF_UNIX) and connect to PATH
//	nsgate __guardprobe unixeach PATH...
//	                                   the same for each PATH: one line "PATH RESULT" each
//	nsgate __guardprobe dgram PATH...  from a socketpair(AF_UNIX, SOCK_DGRAM) socket (which needs no
//	                                   socket(AF_UNIX)), sendto each PATH: one line "PATH RESULT" each
//	nsgate __guardprobe packet         socket(AF_PACKET, SOCK_RAW)
//	nsgate __guardprobe tiocsti        ioctl(TIOCSTI) on /dev/null (ENOTTY without the guard)
//	nsgate __guardprobe ttystate       on standard input, a terminal: ioctl(TIOCSETD) to the null line
//	                                   discipline and ioctl(TIOCEXCL), both of which outlive the worker:
//	                                   and ioctl(TCXONC, TCOOFF), which stops the terminal's output:
//	                                   "setd=E excl=E xonc=E"
//	nsgate __guardprobe binfmt         in a child cloned into a user and mount namespace of its own,
//	                                   keeping CAP_SYS_ADMIN there (ambient): mount binfmt_misc (per user
//	                                   namespace since Linux 6.7) on the temporary directory and
//	                                   fsopen("binfmt_misc"): "mount=E fsopen=E" (without the guard, ok)
//	nsgate __guardprobe opath DIR      copy nsgate into DIR, open the copy O_PATH, execveat(fd, "", AT_EMPTY_PATH)
//	nsgate __guardprobe ia32 FILE      run FILE, an i386 program that exits 42 if its int 0x80 getpid works
//	                                   and executes ud2 (SIGILL) if it got -EPERM: prints ok or EPERM

// noSuchPid is above PID_MAX_LIMIT (4M), so it never names a process.
const noSuchPid = 1<<22 + 1000

// GuardMain runs `nsgate __guardprobe ARGS...` and returns its exit status.
func GuardMain(args []string, stdout, stderr io.Writer) int {
	e := env{stdout, stderr}
	if len(args) == 0 {
		e.errorf("usage: nsgate __guardprobe KIND [ARG...]")
		return exitUsage
	}
	out := func(s string) int { fmt.Fprintln(e.stdout, s); return 0 }
	errno := func(err error) string {
		var en syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &en) && en == 0:
			return "ok"
		case errors.As(err, &en):
			return unix.ErrnoName(en)
		}
		return err.Error()
	}
	self, err := os.Executable()
	if err != nil {
		return out(err.Error())
	}
	ranArgv := []string{"nsgate", "__guardprobe", "ran"}
	switch args[0] {
	case "ran":
		return out("RAN")
	case "memfd":
		fd, err := unix.MemfdCreate("nsgate-guardprobe", 0)
		if err != nil {
			return out("memfd_create: " + errno(err))
		}
		b, err := os.ReadFile(self)
		if err != nil {
			return out(err.Error())
		}
		if _, err := unix.Write(fd, b); err != nil {
			return out("write: " + errno(err))
		}
		return out(errno(execveat(fd, "", ranArgv, os.Environ(), unix.AT_EMPTY_PATH)))
	case "procfd":
		f, err := os.Open(self)
		if err != nil {
			return out(err.Error())
		}
		unix.FcntlInt(f.Fd(), unix.F_SETFD, 0) // as a careless fexecve would
		return out(errno(unix.Exec("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), ranArgv, os.Environ())))
	case "ptrace":
		_, _, en := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, noSuchPid, 0)
		return out(errno(en))
	case "userns":
		_, _, en := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
		cmd := exec.Command(self, "__guardprobe", "ran")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
		b, err := cmd.Output()
		clone := errno(err)
		if err == nil && strings.TrimSpace(string(b)) != "RAN" {
			clone = "no RAN"
		}
		return out("unshare=" + errno(en) + " clone=" + clone)
	case "io_uring":
		_, _, en := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
		return out(errno(en))
	case "bpf":
		_, _, en := unix.RawSyscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0)
		return out(errno(en))
	case "unix":
		if len(args) != 2 {
			return exitUsage
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return out(errno(err))
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: args[1]}); err != nil {
			return out("connect: " + errno(err))
		}
		return out("ok")
	case "unixeach":
		for _, p := range args[1:] {
			res := "ok"
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				res = "socket: " + errno(err)
			} else {
				if err := unix.Connect(fd, &unix.SockaddrUnix{Name: p}); err != nil {
					res = "connect: " + errno(err)
				}
				unix.Close(fd)
			}
			fmt.Fprintln(e.stdout, p, res)
		}
		return 0
	case "dgram":
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return out("socketpair: " + errno(err))
		}
		defer unix.Close(pair[0])
		defer unix.Close(pair[1])
		for _, p := range args[1:] {
			res := "ok"
			if err := unix.Sendto(pair[0], []byte("nsgate-probe"), 0, &unix.SockaddrUnix{Name: p}); err != nil {
				res = "sendto: " + errno(err)
			}
			fmt.Fprintln(e.stdout, p, res)
		}
		return 0
	case "packet":
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return out(errno(err))
	case "tiocsti":
		f, err := os.Open("/dev/null")
		if err != nil {
			return out(err.Error())
		}
		defer f.Close()
		return out(errno(unix.IoctlSetInt(int(f.Fd()), unix.TIOCSTI, 0)))
	case "ttystate":
		if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err != nil {
			return out("standard input is not a terminal: " + errno(err))
		}
		// N_NULL (27) discards all input and refuses all output: the
		// caller's shell is left with a dead terminal. TIOCEXCL makes
		// every later open of the terminal fail with EBUSY.
		setd := unix.IoctlSetPointerInt(0, unix.TIOCSETD, 27)
		excl := unix.IoctlSetInt(0, unix.TIOCEXCL, 0)
		// TCOOFF stops the terminal's output until a TCOON or a typed
		// start character: the caller's shell hangs on its next write.
		xonc := unix.IoctlSetInt(0, unix.TCXONC, unix.TCOOFF)
		return out("setd=" + errno(setd) + " excl=" + errno(excl) + " xonc=" + errno(xonc))
	case "binfmt":
		// A Go program has threads, and unshare(CLONE_NEWUSER) wants a
		// single one: the child is cloned into the namespaces. It has no
		// uid there (no mapping), so it keeps CAP_SYS_ADMIN across its
		// exec as an ambient capability.
		cmd := exec.Command(self, "__guardprobe", "binfmt-child")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
			AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN},
		}
		b, err := cmd.Output()
		if err != nil {
			return out("namespaces: " + errno(err))
		}
		return out(strings.TrimSpace(string(b)))
	case "binfmt-child":
		dir := os.TempDir() // in this mount namespace only
		m := unix.Mount("binfmt_misc", dir, "binfmt_misc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		if m == nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
		fd, f := unix.Fsopen("binfmt_misc", unix.FSOPEN_CLOEXEC)
		if f == nil {
			unix.Close(fd)
		}
		return out("mount=" + errno(m) + " fsopen=" + errno(f))
	case "opath":
		if len(args) != 2 {
			return exitUsage
		}
		b, err := os.ReadFile(self)
		if err != nil {
			return out(err.Error())
		}
		cp := filepath.Join(args[1], "guardprobe-copy")
		if err := os.WriteFile(cp, b, 0o755); err != nil {
			return out("write: " + errno(err))
		}
		defer os.Remove(cp)
		fd, err := unix.Open(cp, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return out("open: " + errno(err))
		}
		return out(errno(execveat(fd, "", ranArgv, os.Environ(), unix.AT_EMPTY_PATH)))
	case "ia32":
		if len(args) != 2 {
			return exitUsage
		}
		err := exec.Command(args[1]).Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 42:
			return out("ok")
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGILL {
				return out("EPERM")
			}
			return out(err.Error())
		case err != nil:
			return out(errno(err))
		}
		return out("exit 0")
	}
	e.errorf("guardprobe: unknown kind %q", args[0])
	return exitUsage
}
