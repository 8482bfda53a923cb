// Package guard is nsgate's execution guard: the Landlock and
// seccomp restrictions put on the worker just before it is executed, and
// the exec audit that watches every execve/execveat it makes.
//
// Use it in the process that will start the worker:
//
//	plan, err := guard.Resolve(cfg)   // read-only: paths, ELF headers, #! lines
//	runtime.LockOSThread()            // the caller's job, never unlocked
//	w := plan.Writable()              // after dropping capabilities: make these read-only
//	degraded, err := plan.Apply(cfg)  // irreversible, restricts every thread
//	l, d, err := guard.InstallExecNotifier(cfg)  // the exec audit's listener
//	... hand l to a process outside the guard, which calls plan.ServeExec(l, report)
//	... execve(plan.Path, cfg.Command, env), directly or by fork+exec
//
// Landlock handles the execute right: the worker can execute exactly the
// files and directory trees in Plan.Allow (EACCES elsewhere) while its
// reads and writes stay as they were. The seccomp filter is a deny list
// (EPERM) of calls that reach into other processes, the mount table, the
// kernel's attack surface, new namespaces, unix sockets and foreign
// syscall ABIs; see buildFilter. The exec audit (execaudit.go) sends every
// exec to a listener that records it and refuses what Landlock cannot
// see; it only ever refuses, Landlock stays the enforcement for the rest.
//
// The guard limits which files can be passed to execve. It does not limit
// what code an allowed program runs: an allowed interpreter (a shell,
// Python, a JIT) runs whatever it is given. The network, namespace and
// seccomp layers are the containment; the exec allowlist narrows the tools
// at hand. Known limits of Landlock alone, each shown by a test, and what
// the exec audit does about them:
//
//   - The ELF interpreter (ld.so) must be executable for the kernel to
//     start any dynamically linked program, so the worker can also run it
//     directly ("ld.so /bin/sh"), which runs any readable ELF file.
//     Landlock cannot tell the two apart and seccomp cannot read the path.
//     The exec audit refuses an exec of ld.so (the kernel's own load of
//     it is no execve), but the path it reads can be rewritten by another
//     thread after the check: a racing worker still gets through.
//   - Landlock lets files of internal mounts through, so a memfd filled
//     with any program can be executed (execve("/proc/self/fd/N")). The
//     exec audit refuses exec through /proc/*/fd and of descriptors, and
//     performs every memfd_create with MFD_NOEXEC_SEAL, which closes this
//     race-free (Linux 6.3 and later).
//   - Before Landlock ABI 9, a socketpair datagram socket can still send to
//     unconnected pathname unix datagram sockets the worker's view shows
//     (journald's are hidden there; see sandbox.View).
//   - Landlock trusts the allowlist's contents: entries the worker can
//     write to let it plant programs there (see Plan.Writable).
package guard

import (
	"errors"
	"path/filepath"
	"strings"
)

// Config is what the user asked for. It holds plain data (it is serialised
// from nsgate's parent to the sandbox init).
type Config struct {
	// Command is the worker's argv. Command[0] is resolved through PATH
	// (PathEnv) unless it contains a slash; argv[0] itself is passed to the
	// worker unchanged.
	Command []string
	// ExecAllow are extra files or directories the worker may execute
	// (--exec-allow and the policy's exec.allow). A directory allows its
	// whole tree. Each must exist when Resolve runs. For a file, its
	// interpreters are added as for Command; a directory is not scanned, so
	// a dynamically linked program in it also needs its ELF interpreter in
	// the list (it is there already when Command is dynamically linked
	// against the same libc).
	ExecAllow []string
	// AllowUserns lets the worker create namespaces (clone and unshare with
	// CLONE_NEW* flags), e.g. for Chromium's own sandbox. Joining one with
	// setns(2) stays denied.
	AllowUserns bool
	// AllowUnix allows socket(AF_UNIX, ...). socketpair(AF_UNIX) is always
	// allowed.
	AllowUnix bool
	// BestEffort (--exec-guard=best-effort): a layer the kernel lacks is
	// reported by Apply instead of being an error.
	BestEffort bool
	// Writes, when set, limits where the worker may write, with Landlock's
	// write rights (write, truncate, make, remove, refer): granted below
	// Writes.Paths and, for writing existing files only, on
	// Writes.Devices; refused everywhere else (EACCES). nil leaves writes
	// as the file system's permissions and mounts make them (as `nsgate
	// guard` does inside a container).
	Writes *WriteRules `json:",omitempty"`
	// PathEnv is the PATH used to resolve Command[0] and the program of a
	// "#!/usr/bin/env NAME" script; empty means this process's $PATH.
	// Relative entries (including empty ones) are ignored: the worker's
	// working directory is not trusted.
	PathEnv string
	// Absent are layers (LayerLandlock, LayerSeccomp, LayerExecAudit) to
	// treat as missing whatever the kernel offers. Only the hidden
	// --unsafe-break flag sets it (tests, and `nsgate lab --break
	// exec-guard`), to show the fail-closed and best-effort paths on a
	// kernel that has every layer. It can only take layers away.
	Absent []string `json:",omitempty"`

	// unixToNotifier: without AllowUnix, socket(AF_UNIX) is refused by
	// the exec notifier, which records it, rather than by the deny filter
	// in silence. RestrictSelf sets it when the kernel has the exec audit
	// (it installs both filters, and falls back to the deny filter's
	// refusal if the notifier cannot be installed after all).
	unixToNotifier bool
}

// UnixRefused is the reason of a refused socket(AF_UNIX): it names the
// flag that lifts it.
const UnixRefused = "unix sockets are not allowed (--allow-unix, or a profile that has it, lets the worker create them)"

// WhyAbsent is the reason a layer in Config.Absent is reported missing.
const WhyAbsent = "switched off (--unsafe-break)"

// support is what the kernel offers (Probe) less the layers cfg.Absent
// takes away.
func (cfg Config) support() Support {
	s := Probe()
	for _, l := range cfg.Absent {
		switch l {
		case LayerLandlock:
			s.LandlockABI, s.LandlockWhy = 0, WhyAbsent
		case LayerSeccomp:
			s.Seccomp, s.SeccompWhy = false, WhyAbsent
			if s.ExecAudit {
				s.ExecAudit, s.ExecAuditWhy = false, "needs seccomp ("+WhyAbsent+")"
			}
		case LayerExecAudit:
			s.ExecAudit, s.ExecAuditWhy = false, WhyAbsent
		}
	}
	return s
}

// WriteRules are the places the worker may write (Config.Writes). Every
// path must exist when Apply runs.
type WriteRules struct {
	// Paths are files and directory trees where every write right is
	// granted (a file: write and truncate).
	Paths []string `json:",omitempty"`
	// Devices are files and directory trees where existing files may be
	// written and truncated, but nothing created, removed or renamed
	// (e.g. /dev/null, /dev/pts, /proc). Missing ones are skipped.
	Devices []string `json:",omitempty"`
}

// Plan is the resolved allowlist. Resolve returns it; it is a plain value
// that callers must treat as read-only (Apply does not modify it).
type Plan struct {
	// Path is the canonical absolute path of Command[0]. Execute this path
	// (not Command[0] again) so that what runs is what was resolved.
	Path string
	// Allow lists, sorted and without duplicates, the canonical files and
	// directories the worker may execute: Path, its ELF interpreter or
	// its #! interpreter chain, and ExecAllow with their interpreters.
	Allow []string
	// Interpreters are the ELF interpreters (PT_INTERP, e.g. ld.so) in
	// Allow. The kernel needs execute permission on them to start any
	// dynamically linked program, so Landlock cannot refuse running one
	// directly ("ld.so /bin/sh"), which runs any readable ELF file. The
	// exec audit must refuse an execve whose target is one of these.
	Interpreters []string
	// Dirs are the entries of Allow that are directories (their whole
	// tree is allowed); the others are regular files.
	Dirs []string
	// Why gives, for every entry of Allow, the reason it is there.
	Why map[string]string
}

// Allows reports whether the canonical path p lies in the allowlist: it is
// an allowed file or below an allowed directory. It does not resolve
// symlinks; give it a canonical path.
func (p Plan) Allows(path string) bool {
	path = filepath.Clean(path)
	if !filepath.IsAbs(path) {
		return false
	}
	for _, a := range p.Allow {
		if path == a {
			return true
		}
	}
	for _, d := range p.Dirs {
		if d == "/" || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// Support is what the running kernel offers the guard.
type Support struct {
	// LandlockABI is the Landlock ABI version; 0 means no Landlock.
	LandlockABI int
	// LandlockWhy says why Landlock is unavailable ("" when it is).
	LandlockWhy string
	// Seccomp is true when seccomp filters returning errno are available
	// and this build has a filter for its architecture.
	Seccomp bool
	// SeccompWhy says why seccomp is unavailable ("" when it is).
	SeccompWhy string
	// ExecAudit is true when seccomp user notifications are available
	// for the exec audit (InstallExecNotifier, ServeExec).
	ExecAudit bool
	// ExecAuditWhy says why the exec audit is unavailable ("" when it is).
	ExecAuditWhy string
}

// Layer names used in Apply's degraded list and in MissingLayerError.
const (
	LayerLandlock  = "landlock"
	LayerSeccomp   = "seccomp"
	LayerExecAudit = "exec-audit" // the seccomp exec notifier (InstallExecNotifier)
)

// MissingLayerError is returned by Apply when the kernel lacks a layer and
// Config.BestEffort is false.
type MissingLayerError struct {
	Layer string // LayerLandlock, LayerSeccomp or LayerExecAudit
	Why   string // what the kernel said
}

func (e *MissingLayerError) Error() string {
	fix := "enable it in the kernel"
	switch e.Layer {
	case LayerLandlock:
		fix = "enable Landlock (CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= boot list)"
	case LayerSeccomp:
		fix = "use a kernel with CONFIG_SECCOMP_FILTER=y on amd64 or arm64"
	case LayerExecAudit:
		fix = "use Linux 5.7 or later (seccomp user notification with TSYNC_ESRCH)"
	}
	return "exec guard: " + e.Layer + " unavailable (" + e.Why + "): " + fix +
		", or pass --exec-guard=best-effort to run without it"
}

// ErrNoCommand is returned by Resolve for an empty Config.Command.
var ErrNoCommand = errors.New("exec guard: no command")

// shellNames are the base names of programs that run whatever commands
// they are given: a shell allowed as some script's #! interpreter lets
// the worker run any command line the allowlist's programs permit.
var shellNames = map[string]bool{
	"sh": true, "dash": true, "bash": true, "ash": true, "zsh": true, "ksh": true,
	"mksh": true, "yash": true, "fish": true, "csh": true, "tcsh": true, "busybox": true,
	"rbash": true, "pdksh": true, "oksh": true, "rc": true, "es": true, "elvish": true, "nu": true, "xonsh": true, "posh": true, "lksh": true,
}

// IsShellName reports whether base is the name of a shell (or of busybox,
// which is one).
func IsShellName(base string) bool { return shellNames[base] }

// ShellInterpreter is a shell the allowlist holds only because a script
// needs it.
type ShellInterpreter struct {
	Shell  string // the shell's canonical path
	Script string // the script whose #! line (directly or through env) names it
}

// ShellInterpreters returns the shells that Resolve added to the allowlist
// silently, as the #! interpreter of a script (the command or an
// --exec-allow file), e.g. a browser installed as a sh wrapper script. A
// shell the user named itself (as the command or an --exec-allow entry)
// is not listed.
func (p Plan) ShellInterpreters() []ShellInterpreter {
	var out []ShellInterpreter
	for _, a := range p.Allow {
		why := p.Why[a]
		script, ok := strings.CutPrefix(why, "#! interpreter of ")
		if !ok {
			rest, ok2 := strings.CutPrefix(why, "program that ")
			script, _, ok = strings.Cut(rest, " runs through env")
			ok = ok && ok2
		}
		if ok && shellNames[filepath.Base(a)] {
			out = append(out, ShellInterpreter{Shell: a, Script: script})
		}
	}
	return out
}
