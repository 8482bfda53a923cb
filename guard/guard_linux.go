package guard

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Probe reports what the running kernel offers. It changes nothing and is
// safe to call from any goroutine.
func Probe() Support {
	var s Support
	v, err := llsys.LandlockGetABIVersion()
	switch {
	case errors.Is(err, unix.ENOSYS):
		s.LandlockWhy = "kernel built without Landlock"
	case errors.Is(err, unix.EOPNOTSUPP):
		s.LandlockWhy = "Landlock is disabled at boot"
	case err != nil:
		s.LandlockWhy = "landlock_create_ruleset: " + err.Error()
	case v < 1:
		s.LandlockWhy = fmt.Sprintf("Landlock ABI %d", v)
	default:
		s.LandlockABI = v
	}
	switch {
	case nativeArch() == nil:
		s.SeccompWhy = "no filter for " + runtime.GOARCH
	default:
		if err := seccompErrnoAvailable(); err != nil {
			s.SeccompWhy = "seccomp filters returning errno: " + err.Error()
		} else {
			s.Seccomp = true
		}
	}
	probeExecAudit(&s)
	return s
}

// Apply restricts the calling process; it cannot be undone. It sets
// no_new_privs, then installs Landlock (execute allowed only in p.Allow)
// on every thread, then the seccomp filter on every thread (TSYNC).
// Threads and processes created afterwards inherit both, and so does the
// program an execve starts. cfg supplies AllowUserns, AllowUnix and
// BestEffort; its other fields are not used (they went into Resolve).
//
// Call it from the goroutine that will start the worker, with that
// goroutine locked to its OS thread (runtime.LockOSThread; never unlock
// it), after every other setup step: mounts, capabilities, chroot. Landlock
// opens each path of p.Allow at this point, in this mount namespace.
//
// When the kernel lacks a layer, Apply changes nothing and returns a
// *MissingLayerError for each missing layer (joined with errors.Join; use
// errors.As), or, with cfg.BestEffort, skips the missing layers and names
// them in degraded ("landlock: why", "seccomp: why"). Any other failure is
// an error even with BestEffort; the process may then be partly
// restricted and must not start the worker.
func (p Plan) Apply(cfg Config) (degraded []string, err error) {
	if p.Path == "" || len(p.Allow) == 0 {
		return nil, errors.New("exec guard: empty plan (use Resolve)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // nested: the caller's lock stays

	// Refuse before changing anything when a layer is missing and the
	// user did not accept that.
	sup := cfg.support()
	var missing []error
	if sup.LandlockABI == 0 {
		missing = append(missing, &MissingLayerError{Layer: LayerLandlock, Why: sup.LandlockWhy})
		degraded = append(degraded, LayerLandlock+": "+sup.LandlockWhy)
	}
	if !sup.Seccomp {
		missing = append(missing, &MissingLayerError{Layer: LayerSeccomp, Why: sup.SeccompWhy})
		degraded = append(degraded, LayerSeccomp+": "+sup.SeccompWhy)
	}
	if len(missing) > 0 && !cfg.BestEffort {
		return nil, errors.Join(missing...)
	}

	// Both layers need no_new_privs (or CAP_SYS_ADMIN); set it even if
	// both are missing, so that the worker cannot gain privileges.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("exec guard: set no_new_privs: %w", err)
	}
	if sup.LandlockABI > 0 {
		if err := p.applyLandlock(sup.LandlockABI, cfg.AllowUnix, cfg.Writes); err != nil {
			return nil, fmt.Errorf("exec guard: landlock: %w", err)
		}
	}
	if sup.Seccomp {
		if err := applySeccomp(cfg); err != nil {
			return nil, fmt.Errorf("exec guard: seccomp: %w", err)
		}
	}
	return degraded, nil
}

// applyLandlock restricts execution to p.Allow and, with w, writing to
// w's paths. The ruleset handles the execute right (plus REFER, the write
// rights with w and, without AllowUnix, unix-socket rights; see below), so
// every other file access stays as it was.
//
// Any ruleset that handles a file-system right also denies moving or
// linking files between directories (REFER) unless a rule grants it.
// From ABI 2 on we grant it where writing is allowed (on "/" without w),
// which keeps rename(2) and link(2) working there; the kernel still
// refuses a move or link that would make a file executable (into an
// allowed directory from outside), because REFER never lets a file gain
// rights. On ABI 1 such cross-directory moves fail with EXDEV, which is
// safe and which programs usually handle by copying.
//
// Without AllowUnix the seccomp filter refuses socket(AF_UNIX), but a
// datagram socket from socketpair(2) can still send to any unconnected
// unix datagram socket by naming its address. Landlock closes that where
// the kernel can: from ABI 6 the abstract-socket scope (no connect or send
// to an abstract socket created outside the domain), from ABI 9 the
// RESOLVE_UNIX right, handled and granted nowhere (the same for pathname
// sockets). Sockets created inside the domain (socketpair) are unaffected.
func (p Plan) applyLandlock(abi int, allowUnix bool, w *WriteRules) error {
	exec := landlock.AccessFSSet(llsys.AccessFSExecute)
	refer := landlock.AccessFSSet(llsys.AccessFSRefer)
	cfg := landlock.Config{HandledAccessFS: exec}
	rules := []landlock.Rule{landlock.PathAccess(exec, p.Allow...)}
	switch {
	case w != nil:
		dirRights, fileRights := writeRights(abi)
		cfg.HandledAccessFS |= dirRights
		for _, path := range w.Paths {
			r := dirRights
			if st, err := os.Stat(path); err == nil && !st.IsDir() {
				r = fileRights
			}
			rules = append(rules, landlock.PathAccess(r, path))
		}
		for _, path := range w.Devices {
			rules = append(rules, landlock.PathAccess(fileRights, path).IgnoreIfMissing())
		}
	case abi >= 2:
		cfg.HandledAccessFS |= refer
		rules = append(rules, landlock.PathAccess(refer, "/"))
	}
	// The abstract-socket scope holds with AllowUnix too: the worker may
	// make and use its own sockets, never reach one made outside (in
	// `nsgate run` its network namespace has none of the host's anyway;
	// `nsgate guard` shares a container's).
	if abi >= 6 {
		cfg.Scoped |= landlock.ScopedSet(llsys.ScopeAbstractUnixSocket)
	}
	if !allowUnix {
		if abi >= 9 {
			cfg.HandledAccessFS |= landlock.AccessFSSet(llsys.AccessFSResolveUnix)
		}
	}
	return cfg.Restrict(rules...)
}

// writeRights are Landlock's write rights that ABI abi knows: all of them
// (for directories), and those that apply to a file.
func writeRights(abi int) (dir, file landlock.AccessFSSet) {
	file = llsys.AccessFSWriteFile
	if abi >= 3 {
		file |= llsys.AccessFSTruncate
	}
	dir = file | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile |
		llsys.AccessFSMakeChar | llsys.AccessFSMakeDir | llsys.AccessFSMakeReg |
		llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo | llsys.AccessFSMakeBlock |
		llsys.AccessFSMakeSym
	if abi >= 2 {
		dir |= llsys.AccessFSRefer
	}
	return dir, file
}

// Writable returns the entries of p.Allow that the calling process could
// write to with its current credentials (faccessat W_OK, AT_EACCESS): a
// file it could replace the contents of, a directory it could create files
// in. Landlock cannot tell a trusted program from one the worker wrote, so
// a writable entry lets the worker plant a program and run it. Call it
// once the credentials are final (after dropping capabilities: with
// CAP_DAC_OVERRIDE everything not on a read-only mount is writable), and
// make the entries it returns read-only (e.g. bind-mount them read-only in
// the worker's mount namespace) or refuse to start. Only the entries
// themselves are checked, not what lies below an allowed directory.
func (p Plan) Writable() []string {
	var w []string
	for _, a := range p.Allow {
		if unix.Faccessat(unix.AT_FDCWD, a, unix.W_OK, unix.AT_EACCESS) == nil {
			w = append(w, a)
		}
	}
	return w
}

// refuseUnixAlone installs a filter that refuses socket(AF_UNIX) with
// EPERM: the deny filter left it to the exec notifier, which could not be
// installed after all (best-effort).
func refuseUnixAlone() error {
	a := nativeArch()
	if a == nil {
		return errors.New("no filter for " + runtime.GOARCH)
	}
	var p program
	p.add(bpf.LoadAbsolute{Off: offArch, Size: 4})
	p.jeq(a.auditArch, "", "allow")
	p.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	p.jeq(a.socket, "", "allow")
	p.add(bpf.LoadAbsolute{Off: argLo(0), Size: 4})
	p.jeq(afUnix, "deny", "allow")
	p.label("allow")
	p.ret(seccompRetAllow)
	p.label("deny")
	p.ret(retEPERM)
	prog, err := p.assemble()
	if err != nil {
		return err
	}
	return installFilter(prog)
}

// applySeccomp installs the filter for the native architecture on every
// thread.
func applySeccomp(cfg Config) error {
	a := nativeArch()
	if a == nil {
		return errors.New("no filter for " + runtime.GOARCH)
	}
	prog, err := buildFilter(a, filterOptions{allowUserns: cfg.AllowUserns, allowUnix: cfg.AllowUnix, unixToNotifier: cfg.unixToNotifier})
	if err != nil {
		return err
	}
	return installFilter(prog)
}
