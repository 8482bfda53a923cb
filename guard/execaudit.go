package guard

import (
	"path/filepath"
	"strings"
	"syscall"
)

// The exec audit: each execve/execveat attempt of the worker is decided
// and recorded.
//
// The process that applies the guard also installs a second seccomp
// filter (InstallExecNotifier) that sends every execve, execveat and
// memfd_create of it and its descendants to a listener descriptor. Another
// process that is not subject to the filter, or a goroutine of the same
// process that never executes anything, holds the listener and answers with
// ServeExec:
//
//   - an exec is read (the path from the caller's memory, its working
//     directory, root and descriptors from /proc), resolved the way the
//     kernel will, reported as an ExecEvent and then either refused with
//     an errno or let through to the kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE),
//     where Landlock decides. The audit only ever refuses: a thread that
//     rewrites the path after it was read cannot run anything Landlock
//     does not allow. What it refuses that Landlock cannot: a direct
//     invocation of an ELF interpreter ("ld.so PROGRAM"), exec of a file
//     descriptor (execveat AT_EMPTY_PATH, /proc/self/fd/N) and of memfds;
//     and, when Landlock is missing, everything outside the allowlist.
//   - a memfd_create is performed by the server with MFD_NOEXEC_SEAL and
//     the descriptor installed in the caller (SECCOMP_ADDFD_FLAG_SEND), so
//     no memfd the worker makes can ever be executed, race or not. An
//     explicit MFD_EXEC is refused (EACCES).
//
// If the listener goes away, the kernel fails every later exec with
// ENOSYS: the audit fails closed.

// ExecEvent is one exec attempt and what the exec audit did with it.
type ExecEvent struct {
	// Allow is true when the call was passed on to the kernel (Landlock
	// still decides); false when the audit refused it.
	Allow bool
	// Path is the path the caller asked for, as given (relative paths
	// stay relative). For execveat(fd, "", AT_EMPTY_PATH) it is "fd N".
	Path string
	// Resolved is the canonical path of the file Path names, in the
	// caller's mount namespace, when it could be found ("" otherwise).
	Resolved string
	// PID is the calling thread's id in the listener holder's PID
	// namespace.
	PID int
	// Syscall is "execve" or "execveat"; or "socket" for a refused
	// socket(AF_UNIX) (Path is then "AF_UNIX" and the socket type).
	Syscall string
	// Reason says why the call was refused; empty when allowed.
	Reason string
	// Errno is the error the caller got from the audit (0 when allowed).
	Errno syscall.Errno
}

// looksLikeELFInterpreter reports whether a file name is one an ELF
// interpreter (dynamic loader) goes by: ld-linux-x86-64.so.2,
// ld-linux-aarch64.so.1, ld-2.31.so, ld-musl-x86_64.so.1, ld64.so.2,
// ld.so. The exec audit refuses running such a file directly when it lies
// in an allowed directory (explicitly listed files are trusted), because a
// loader runs any readable program it is given.
func looksLikeELFInterpreter(path string) bool {
	b := filepath.Base(path)
	switch {
	case strings.HasPrefix(b, "ld-") && strings.Contains(b, ".so"):
		return true
	case b == "ld.so" || strings.HasPrefix(b, "ld.so."):
		return true
	case strings.HasPrefix(b, "ld64.so"):
		return true
	}
	return false
}

// isAnonTarget reports whether a /proc fd link text names a file that is
// not reachable by path: a memfd ("/memfd:NAME (deleted)"), another
// internal-mount file, an anonymous inode, or a deleted file.
func isAnonTarget(link string) bool {
	return !strings.HasPrefix(link, "/") || strings.HasPrefix(link, "/memfd:") || strings.HasSuffix(link, " (deleted)")
}

// splitPath splits a path into its components, without empty and "."
// ones.
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// qemuUserArchs are the architectures qemu's user mode (qemu-ARCH,
// qemu-ARCH-static) emulates: each such program runs any program of its
// architecture, loaded by itself.
var qemuUserArchs = map[string]bool{
	"aarch64": true, "aarch64_be": true, "alpha": true, "arm": true, "armeb": true,
	"cris": true, "hexagon": true, "hppa": true, "i386": true, "loongarch64": true,
	"m68k": true, "microblaze": true, "microblazeel": true, "mips": true, "mips64": true,
	"mips64el": true, "mipsel": true, "mipsn32": true, "mipsn32el": true, "nios2": true,
	"or1k": true, "ppc": true, "ppc64": true, "ppc64le": true, "riscv32": true,
	"riscv64": true, "s390x": true, "sh4": true, "sh4eb": true, "sparc": true,
	"sparc32plus": true, "sparc64": true, "x86_64": true, "xtensa": true, "xtensaeb": true,
}

// looksLikeUserSpaceLoader reports whether a file is a program that loads
// and runs another program itself, with no execve that the audit or
// Landlock would see: valgrind's tools (NAME-ARCH-linux in a directory
// named valgrind, which valgrind's launcher executes) and qemu's user mode.
// Like an ELF interpreter, such a program in an allowed directory would run
// any readable program; the audit refuses it unless listed explicitly.
func looksLikeUserSpaceLoader(path string) bool {
	b := filepath.Base(path)
	if filepath.Base(filepath.Dir(path)) == "valgrind" && strings.HasSuffix(b, "-linux") {
		return true
	}
	if a, ok := strings.CutPrefix(b, "qemu-"); ok {
		return qemuUserArchs[strings.TrimSuffix(a, "-static")]
	}
	return false
}
