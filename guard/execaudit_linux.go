package guard

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
)

// InstallExecNotifier installs the exec notifier on every thread of the
// calling process (see the package's exec audit notes) and returns its
// listener, close-on-exec. From then on every execve, execveat and
// memfd_create of this process and its descendants waits until the
// listener's holder answers (ServeExec); the caller must hand the listener
// over (e.g. with SCM_RIGHTS) or serve it from a goroutine before it, or a
// child, calls one of them. Call it after Apply (it needs no_new_privs),
// from the goroutine that will start the worker, locked to its thread.
//
// When the kernel cannot do it (no user notifications, no
// TSYNC_ESRCH: before Linux 5.7), it returns a *MissingLayerError, or with
// cfg.BestEffort a nil listener and the layer in degraded.
func InstallExecNotifier(cfg Config) (listener *os.File, degraded []string, err error) {
	missing := func(why string) (*os.File, []string, error) {
		if cfg.BestEffort {
			return nil, []string{LayerExecAudit + ": " + why}, nil
		}
		return nil, nil, &MissingLayerError{Layer: LayerExecAudit, Why: why}
	}
	sup := cfg.support()
	if !sup.ExecAudit {
		return missing(sup.ExecAuditWhy)
	}
	prog, err := buildNotifyFilter(nativeArch(), cfg.unixToNotifier)
	if err != nil {
		return nil, nil, fmt.Errorf("exec audit: %w", err)
	}
	fd, err := installNotifier(prog)
	if errors.Is(err, unix.EINVAL) {
		return missing(err.Error())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("exec audit: %w", err)
	}
	return os.NewFile(uintptr(fd), "nsgate-exec-listener"), nil, nil
}

// probeExecAudit fills in the exec-audit part of Support.
func probeExecAudit(s *Support) {
	switch {
	case !s.Seccomp:
		s.ExecAuditWhy = "needs seccomp (" + s.SeccompWhy + ")"
	case nativeArch() == nil:
		s.ExecAuditWhy = "no filter for this architecture"
	default:
		if err := notifyAvailable(); err != nil {
			s.ExecAuditWhy = "seccomp user notification: " + err.Error()
		} else {
			s.ExecAudit = true
		}
	}
}

// fileID identifies a file independently of its names.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// ExecServer answers the exec notifier's notifications for one Plan (see
// ServeExec). Its methods are safe for concurrent use.
type ExecServer struct {
	arch     *archSpec
	plan     Plan
	interps  map[fileID]bool // Plan.Interpreters
	explicit map[string]bool // files (not directories) of Plan.Allow
	listener *os.File
	lfd      int
	// noexecSeal: the kernel knows MFD_NOEXEC_SEAL, so memfd_create
	// is performed here (handleMemfd).
	noexecSeal bool
	report     func(ExecEvent)
	stop       *os.File // write end: closing it ends the loop
	stopR      *os.File
	done       chan struct{}
	err        error // set before done is closed

	closeOnce sync.Once
}

// ServeExec answers, on a goroutine of its own, every notification that
// arrives on listener (from InstallExecNotifier), deciding execs against
// p, until every process subject to the notifier has exited, or Close.
// It takes ownership of listener. report is called for each exec attempt,
// one call at a time, before the caller is answered (so an allowed
// program's record is queued before it runs); a report that blocks holds
// up the worker's exec, never nsgate. Calls whose task vanished before the
// answer (killed, interrupted) are not reported.
//
// The server must not be subject to the notifier's filter in a way that
// makes it wait for itself: a process serving its own listener must never
// execute anything from the serving goroutine.
func (p Plan) ServeExec(listener *os.File, report func(ExecEvent)) (*ExecServer, error) {
	if listener == nil {
		return nil, errors.New("exec audit: no listener")
	}
	arch := nativeArch()
	if arch == nil {
		listener.Close()
		return nil, errors.New("exec audit: no seccomp filter for this architecture")
	}
	r, w, err := os.Pipe()
	if err != nil {
		listener.Close()
		return nil, fmt.Errorf("exec audit: %w", err)
	}
	s := &ExecServer{
		arch:     arch,
		plan:     p,
		interps:  make(map[fileID]bool),
		explicit: make(map[string]bool),
		listener: listener,
		lfd:      int(listener.Fd()),
		report:   report,
		stop:     w,
		stopR:    r,
		done:     make(chan struct{}),

		noexecSeal: noexecSealAvailable(),
	}
	if s.report == nil {
		s.report = func(ExecEvent) {}
	}
	for _, i := range p.Interpreters {
		var st unix.Stat_t
		if unix.Stat(i, &st) == nil {
			s.interps[idOf(&st)] = true
		}
	}
	dirs := make(map[string]bool)
	for _, d := range p.Dirs {
		dirs[d] = true
	}
	for _, a := range p.Allow {
		if !dirs[a] {
			s.explicit[a] = true
		}
	}
	go s.loop()
	return s, nil
}

// Done is closed when the server has stopped: every process subject to
// the notifier has exited, the server failed (see Close's error), or Close
// was called.
func (s *ExecServer) Done() <-chan struct{} { return s.done }

// Close stops the server, waits (at most a few seconds) for the request in
// hand to be answered and closes the listener: from then on the kernel
// fails every exec of a process still subject to the notifier with ENOSYS.
// It returns the error that stopped the server early, if any.
func (s *ExecServer) Close() error {
	s.closeOnce.Do(func() {
		s.stop.Close()
		select {
		case <-s.done:
			s.listener.Close()
			s.stopR.Close()
		case <-time.After(5 * time.Second):
			// The loop is stuck in a system call; leave its descriptors
			// to it rather than closing them under it.
		}
	})
	select {
	case <-s.done:
		return s.err
	default:
		return errors.New("exec audit: server did not stop")
	}
}

func (s *ExecServer) loop() {
	defer close(s.done)
	fds := []unix.PollFd{
		{Fd: int32(s.lfd), Events: unix.POLLIN},
		{Fd: int32(s.stopR.Fd()), Events: unix.POLLIN},
	}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			s.err = fmt.Errorf("exec audit: poll: %w", err)
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			var n notif
			if err := notifRecv(s.lfd, &n); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // the task went away before we took it
				}
				s.err = fmt.Errorf("exec audit: receive: %w", err)
				return
			}
			s.handle(&n)
			continue
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return // no process is subject to the filter any more
		}
	}
}

func (s *ExecServer) handle(n *notif) {
	a := s.arch
	switch uint32(n.Data.Nr) {
	case a.memfdCreate:
		s.handleMemfd(n)
	case a.execve, a.execveat:
		s.handleExec(n, uint32(n.Data.Nr) == a.execveat)
	case a.socket:
		s.handleSocket(n)
	default:
		// Not ours to judge; cannot happen with buildNotifyFilter.
		notifSend(s.lfd, &notifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE})
	}
}

// openProc opens /proc/PID of the notifying task and checks that the
// notification is still pending, so that the directory is the task's and
// not that of a process that reused its pid. ok is false when the task is
// gone (nothing to answer).
func (s *ExecServer) openProc(n *notif) (fd int, ok bool, err error) {
	fd, err = unix.Open("/proc/"+strconv.Itoa(int(n.PID)), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if !notifIDValid(s.lfd, n.ID) {
		if err == nil {
			unix.Close(fd)
		}
		return -1, false, nil
	}
	return fd, true, err
}

func (s *ExecServer) handleExec(n *notif, at bool) {
	ev := ExecEvent{PID: int(n.PID), Syscall: "execve"}
	dirfd, addr, flags := int32(unix.AT_FDCWD), n.Data.Args[0], 0
	if at {
		ev.Syscall = "execveat"
		dirfd, addr, flags = int32(n.Data.Args[0]), n.Data.Args[1], int(int32(n.Data.Args[4]))
	}
	proc, ok, err := s.openProc(n)
	switch {
	case !ok:
		return
	case err != nil:
		ev.refuse(unix.EACCES, "cannot inspect the caller: %v", err)
	default:
		s.decide(proc, &ev, dirfd, addr, flags)
		unix.Close(proc)
	}
	if !notifIDValid(s.lfd, n.ID) {
		return
	}
	s.report(ev)
	resp := notifResp{ID: n.ID}
	if ev.Allow {
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	} else {
		resp.Error = -int32(ev.Errno)
	}
	notifSend(s.lfd, &resp) // ENOENT: the task went away meanwhile
}

// handleSocket refuses a socket(AF_UNIX) (the only socket call the
// notifier sends) with EPERM, as the deny filter would, and reports it.
func (s *ExecServer) handleSocket(n *notif) {
	if !notifIDValid(s.lfd, n.ID) {
		return
	}
	ev := ExecEvent{PID: int(n.PID), Syscall: "socket", Path: "AF_UNIX " + sockType(uint32(n.Data.Args[1]))}
	ev.refuse(unix.EPERM, "%s", UnixRefused)
	s.report(ev)
	notifSend(s.lfd, &notifResp{ID: n.ID, Error: -int32(unix.EPERM)})
}

// sockType names a socket(2) type argument (its flags aside).
func sockType(t uint32) string {
	switch t &^ (unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC) {
	case unix.SOCK_STREAM:
		return "SOCK_STREAM"
	case unix.SOCK_DGRAM:
		return "SOCK_DGRAM"
	case unix.SOCK_SEQPACKET:
		return "SOCK_SEQPACKET"
	}
	return "type=" + strconv.FormatUint(uint64(t), 10)
}

func (ev *ExecEvent) refuse(errno syscall.Errno, format string, args ...any) {
	ev.Allow = false
	ev.Errno = errno
	ev.Reason = fmt.Sprintf(format, args...)
}

// decide fills in ev for one exec: the path the task asked for, the file
// it names and the verdict.
func (s *ExecServer) decide(proc int, ev *ExecEvent, dirfd int32, addr uint64, flags int) {
	path, err := readCString(proc, ev.PID, addr, unix.PathMax)
	if err != nil {
		ev.refuse(errnoOf(err, unix.EFAULT), "cannot read the path from the caller's memory: %v", err)
		return
	}
	ev.Path = path
	if path == "" {
		if flags&unix.AT_EMPTY_PATH == 0 {
			ev.refuse(unix.ENOENT, "empty path")
			return
		}
		// execveat(fd, "", AT_EMPTY_PATH), fexecve(3): the file is
		// whatever the descriptor holds when the kernel looks, which a
		// thread can swap after we looked. Only paths are allowed.
		ev.Path = fmt.Sprintf("fd %d", dirfd)
		link, err := readlinkAt(proc, "fd/"+strconv.Itoa(int(dirfd)))
		if err != nil {
			ev.refuse(errnoOf(err, unix.EBADF), "exec of descriptor %d: %v", dirfd, err)
			return
		}
		if strings.HasPrefix(link, "/memfd:") {
			ev.refuse(unix.EACCES, "exec of a memfd (%s)", link)
			return
		}
		if !isAnonTarget(link) {
			ev.Resolved = link
		}
		ev.refuse(unix.EACCES, "exec of a file descriptor (%s): only paths may be executed", link)
		return
	}
	w := walker{proc: proc, root: -1}
	defer w.close()
	fd, err := w.resolve(dirfd, path, flags&unix.AT_SYMLINK_NOFOLLOW != 0)
	if err != nil {
		var d *denial
		if errors.As(err, &d) {
			ev.refuse(unix.EACCES, "%s", d.reason)
		} else {
			ev.refuse(errnoOf(err, unix.EACCES), "cannot resolve %s: %v", path, err)
		}
		return
	}
	defer unix.Close(fd)
	canon, why := s.verdict(&w, fd, 0)
	ev.Resolved = canon
	if why != "" {
		ev.refuse(unix.EACCES, "%s", why)
		return
	}
	ev.Allow = true
}

// verdict checks the file open at fd (O_PATH) and what the kernel would
// load to run it: its #! interpreter chain and ELF interpreter. It returns
// the file's canonical path and, when it must be refused, why.
func (s *ExecServer) verdict(w *walker, fd, depth int) (canon, why string) {
	canon, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", "cannot name the file: " + err.Error()
	}
	if isAnonTarget(canon) {
		if strings.HasPrefix(canon, "/memfd:") {
			return "", "exec of a memfd (" + canon + ")"
		}
		return "", "exec of a file not reachable by path (" + canon + ")"
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return canon, "cannot stat " + canon + ": " + err.Error()
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return canon, canon + " is not a regular file"
	}
	if canon != s.plan.Path && (s.interps[idOf(&st)] || looksLikeELFInterpreter(canon) && !s.explicit[canon]) {
		return canon, "direct invocation of the ELF interpreter " + canon + " (it would run any readable program)"
	}
	if canon != s.plan.Path && looksLikeUserSpaceLoader(canon) && !s.explicit[canon] {
		return canon, "direct invocation of " + canon + ", a program that loads other programs itself (it would run any readable program)"
	}
	if !s.plan.Allows(canon) {
		return canon, canon + audit.ExecNotListed
	}

	// What the kernel loads next. When we cannot read the file, Landlock
	// alone decides about its interpreters.
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return canon, ""
	}
	defer unix.Close(rfd)
	head := make([]byte, binprmBufSize)
	n, _ := unix.Pread(rfd, head, 0)
	if n < 0 {
		n = 0
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		interp, _, err := parseShebang(head)
		if err != nil {
			return canon, "" // the kernel refuses it (ENOEXEC)
		}
		if depth >= maxInterpDepth {
			return canon, "more than " + strconv.Itoa(maxInterpDepth) + " levels of #! interpreters"
		}
		ifd, err := w.resolve(unix.AT_FDCWD, interp, false)
		if err != nil {
			return canon, "#! interpreter " + interp + " of " + canon + ": " + err.Error()
		}
		defer unix.Close(ifd)
		if _, iwhy := s.verdict(w, ifd, depth+1); iwhy != "" {
			return canon, "#! interpreter " + interp + " of " + canon + ": " + iwhy
		}
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		pi, err := elfInterp("/proc/self/fd/" + strconv.Itoa(rfd))
		if err == nil && pi == "" && canon != s.plan.Path && !s.explicit[canon] && elfLoader("/proc/self/fd/"+strconv.Itoa(rfd)) {
			// A loader by what it is, not by its name: musl's
			// (libc.so, which ld-musl-ARCH.so.1 links to) or a
			// renamed copy of ld.so.
			return canon, "direct invocation of the ELF interpreter " + canon + ", a dynamic loader (it would run any readable program)"
		}
		if err != nil || pi == "" {
			return canon, "" // static, or malformed: the kernel judges
		}
		ifd, err := w.resolve(unix.AT_FDCWD, pi, false)
		if err != nil {
			return canon, "ELF interpreter " + pi + " of " + canon + ": " + err.Error()
		}
		defer unix.Close(ifd)
		ic, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(ifd))
		if err != nil || isAnonTarget(ic) || !s.plan.Allows(ic) {
			return canon, "ELF interpreter " + pi + " of " + canon + " is not in the exec allowlist"
		}
	}
	return canon, ""
}

// denial is a resolution the audit refuses outright (a path through
// /proc).
type denial struct{ reason string }

func (d *denial) Error() string { return d.reason }

// maxSymlinks is the kernel's limit on symbolic links in one lookup.
const maxSymlinks = 40

// procRootIno is the inode number of the root of every procfs.
const procRootIno = 1

// walker resolves paths the way the notifying task's execve will: from its
// root, working directory or a descriptor of its own, through its mount
// namespace, following symbolic links one component at a time. It uses
// O_PATH descriptors only, never opening the files themselves. Into
// procfs it goes no further than /proc/self/exe (which is the task's own
// program): other paths through /proc are denials, since /proc/self means
// the caller, not us, and /proc/*/fd/* names descriptors.
type walker struct {
	proc   int // O_PATH /proc/<tid> of the caller (borrowed)
	root   int // the caller's root directory, -1 until needed
	rootID fileID
	links  int
}

func (w *walker) close() {
	if w.root >= 0 {
		unix.Close(w.root)
		w.root = -1
	}
}

func (w *walker) getRoot() (int, error) {
	if w.root >= 0 {
		return w.root, nil
	}
	fd, err := unix.Openat(w.proc, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the caller's root: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	w.root, w.rootID = fd, idOf(&st)
	return fd, nil
}

// resolve returns an O_PATH descriptor of the file path names for the
// caller, relative to dirfd (AT_FDCWD: its working directory) when
// relative. The final symbolic link is followed unless nofollow (ELOOP
// then, as the kernel does). Errors are the kernel's (ENOENT, ENOTDIR,
// ELOOP, EACCES...) or a *denial.
func (w *walker) resolve(dirfd int32, path string, nofollow bool) (int, error) {
	w.links = 0
	var cur int
	var err error
	switch {
	case strings.HasPrefix(path, "/"):
		var r int
		if r, err = w.getRoot(); err == nil {
			cur, err = unix.Dup(r)
		}
	case dirfd == unix.AT_FDCWD:
		cur, err = unix.Openat(w.proc, "cwd", unix.O_PATH|unix.O_CLOEXEC, 0)
	case dirfd < 0:
		err = unix.EBADF
	default:
		cur, err = unix.Openat(w.proc, "fd/"+strconv.Itoa(int(dirfd)), unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			err = unix.EBADF
		}
	}
	if err != nil {
		return -1, err
	}
	rest := splitPath(path)
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		onProc, isRoot, err := procInfo(cur)
		if err != nil {
			unix.Close(cur)
			return -1, err
		}
		if onProc {
			unix.Close(cur)
			return w.procStep(isRoot, c, rest)
		}
		if c == ".." {
			if _, err := w.getRoot(); err != nil {
				unix.Close(cur)
				return -1, err
			}
			var st unix.Stat_t
			if unix.Fstat(cur, &st) == nil && idOf(&st) == w.rootID {
				continue // ".." of the root is the root
			}
			next, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			unix.Close(cur)
			if err != nil {
				return -1, err
			}
			cur = next
			continue
		}
		next, err := unix.Openat(cur, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(cur)
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(cur)
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			unix.Close(cur)
			cur = next
			continue
		}
		target, err := readlinkAt(next, "")
		unix.Close(next)
		switch {
		case err != nil:
		case len(rest) == 0 && nofollow:
			err = unix.ELOOP
		case w.links >= maxSymlinks:
			err = unix.ELOOP
		case target == "":
			err = unix.ENOENT
		}
		if err != nil {
			unix.Close(cur)
			return -1, err
		}
		w.links++
		if strings.HasPrefix(target, "/") {
			unix.Close(cur)
			r, err := w.getRoot()
			if err != nil {
				return -1, err
			}
			if cur, err = unix.Dup(r); err != nil {
				return -1, err
			}
		}
		rest = append(splitPath(target), rest...)
	}
	if onProc, _, _ := procInfo(cur); onProc {
		unix.Close(cur)
		return -1, &denial{"exec of a file in /proc"}
	}
	return cur, nil
}

// procStep handles a lookup that reaches procfs: c is the component being
// looked up in a procfs directory (isRoot: the root of the procfs), rest
// what follows it.
func (w *walker) procStep(isRoot bool, c string, rest []string) (int, error) {
	if !isRoot {
		return -1, &denial{"exec through a /proc directory"}
	}
	switch {
	case c == "self" || c == "thread-self":
		if len(rest) == 1 && rest[0] == "exe" {
			// The caller's own program; open it through our view of
			// the caller's /proc directory.
			return unix.Openat(w.proc, "exe", unix.O_PATH|unix.O_CLOEXEC, 0)
		}
		if len(rest) > 0 && rest[0] == "fd" {
			return -1, &denial{"exec of a file descriptor through /proc/" + c + "/fd"}
		}
		return -1, &denial{"exec through /proc/" + c + " (only /proc/self/exe is allowed)"}
	case isDigits(c):
		return -1, &denial{"exec through /proc/" + c + " (only /proc/self/exe is allowed)"}
	}
	return -1, &denial{"exec of a file in /proc"}
}

// procInfo reports whether fd lies on a procfs and whether it is the root
// of one.
func procInfo(fd int) (onProc, isRoot bool, err error) {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil {
		return false, false, err
	}
	if sf.Type != unix.PROC_SUPER_MAGIC {
		return false, false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return true, false, err
	}
	return true, st.Ino == procRootIno, nil
}

// readlinkAt reads the symbolic link path relative to dirfd; an empty path
// reads the link dirfd itself refers to (an O_PATH|O_NOFOLLOW descriptor).
func readlinkAt(dirfd int, path string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, path, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}

// readCString reads a NUL-terminated string of at most max bytes
// (terminator included) at addr in the memory of task tid, whose /proc
// directory is proc and whose seccomp notification the caller checks is
// still pending once it has read (then tid was that task all along: a
// task waiting for an answer cannot have exited).
//
// It reads with process_vm_readv, which needs the ptrace permission
// alone, and falls back to /proc/TID/mem when that call is refused
// (EPERM, ENOSYS: a container's seccomp profile, such as Docker's default
// or nsgate's own pod profile, may refuse it). /proc/TID/mem also needs
// the file's owner: a task that is not dumpable has its /proc files owned
// by root of its user namespace, which rootless (one uid mapped) is
// nobody nsgate can be. The sandbox's init is not dumpable before its
// worker's first exec, which it asks for from a child sharing its memory
// (sandbox.InitMain); nsgate made that user namespace and holds every
// capability in it, CAP_SYS_PTRACE included. So one of the two works
// unless both are taken away: then the exec is refused.
func readCString(proc, tid int, addr uint64, max int) (string, error) {
	s, err := readCStringWith(addr, max, func(buf []byte, at uint64) (int, error) {
		return unix.ProcessVMReadv(tid,
			[]unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
			[]unix.RemoteIovec{{Base: uintptr(at), Len: len(buf)}}, 0)
	})
	if err != unix.EPERM && err != unix.ENOSYS {
		return s, err
	}
	mem, merr := unix.Openat(proc, "mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if merr != nil {
		return "", fmt.Errorf("process_vm_readv: %w; /proc/%d/mem: %w", err, tid, merr)
	}
	defer unix.Close(mem)
	return readCStringWith(addr, max, func(buf []byte, at uint64) (int, error) {
		return unix.Pread(mem, buf, int64(at))
	})
}

// readCStringWith reads the string at addr, a page at most per call of
// read.
func readCStringWith(addr uint64, max int, read func(buf []byte, at uint64) (int, error)) (string, error) {
	page := uint64(os.Getpagesize())
	var out []byte
	for len(out) < max {
		if addr >= 1<<63 {
			return "", unix.EFAULT
		}
		chunk := int(page - addr%page)
		if left := max - len(out); chunk > left {
			chunk = left
		}
		buf := make([]byte, chunk)
		n, err := read(buf, addr)
		if err != nil {
			return "", err
		}
		if n <= 0 {
			return "", unix.EFAULT
		}
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:n]...)
		addr += uint64(n)
	}
	return "", unix.ENAMETOOLONG
}

// errnoOf returns the errno inside err, or def.
func errnoOf(err error, def syscall.Errno) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return def
}

// memfdNameMax is MFD_NAME_MAX_LEN plus the terminating NUL.
const memfdNameMax = 249 + 1

// mfdKnown are the memfd_create flags Linux 6.3 knows; with MFD_HUGETLB
// the huge page size bits (MFD_HUGE_MASK << MFD_HUGE_SHIFT) are valid too.
const (
	mfdKnown     = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING | unix.MFD_HUGETLB | unix.MFD_NOEXEC_SEAL | unix.MFD_EXEC
	mfdHugeSizes = 0x3f << 26
)

// noexecSealAvailable reports whether the kernel knows MFD_NOEXEC_SEAL
// (Linux 6.3).
func noexecSealAvailable() bool {
	fd, err := unix.MemfdCreate("nsgate-probe", unix.MFD_CLOEXEC|unix.MFD_NOEXEC_SEAL)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// handleMemfd performs the caller's memfd_create with MFD_NOEXEC_SEAL
// added and installs the descriptor in the caller, so that no memfd of
// the worker can be executed (the exec audit refuses memfd paths too, but
// a thread could swap the path after the check; this cannot be raced).
// MFD_EXEC is refused with EACCES, as the kernel does under
// vm.memfd_noexec=2; invalid flags get EINVAL, as from the kernel (Chromium
// probes memfd_create("", ~0) and insists on EINVAL, ENOSYS or EPERM).
// When the kernel lacks MFD_NOEXEC_SEAL (before 6.3) or
// SECCOMP_ADDFD_FLAG_SEND (before 5.14), the call is passed on unchanged
// and the exec audit's refusal is all there is.
func (s *ExecServer) handleMemfd(n *notif) {
	pass := func() {
		notifSend(s.lfd, &notifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE})
	}
	fail := func(e syscall.Errno) { notifSend(s.lfd, &notifResp{ID: n.ID, Error: -int32(e)}) }
	if !s.noexecSeal {
		pass()
		return
	}
	flags := uint32(n.Data.Args[1])
	known := uint32(mfdKnown)
	if flags&unix.MFD_HUGETLB != 0 {
		known |= mfdHugeSizes
	}
	switch {
	case flags&^known != 0, flags&unix.MFD_EXEC != 0 && flags&unix.MFD_NOEXEC_SEAL != 0:
		fail(unix.EINVAL)
		return
	case flags&unix.MFD_EXEC != 0:
		fail(unix.EACCES)
		return
	}
	proc, ok, err := s.openProc(n)
	if !ok {
		return
	}
	if err != nil {
		fail(unix.EACCES)
		return
	}
	name, err := readCString(proc, int(n.PID), n.Data.Args[0], memfdNameMax)
	unix.Close(proc)
	if err != nil {
		fail(errnoOf(err, unix.EFAULT))
		return
	}
	fd, err := unix.MemfdCreate(name, int(flags|unix.MFD_NOEXEC_SEAL|unix.MFD_CLOEXEC))
	if err != nil {
		// The caller's own call would have failed the same way (EINVAL,
		// ENOMEM, ENFILE...).
		fail(errnoOf(err, unix.ENOMEM))
		return
	}
	defer unix.Close(fd)
	if !notifIDValid(s.lfd, n.ID) {
		return
	}
	_, err = notifAddfdSend(s.lfd, n.ID, fd, flags&unix.MFD_CLOEXEC != 0)
	switch {
	case err == nil: // answered: the call returns the new descriptor
	case errors.Is(err, errAddfdUnsupported):
		pass()
	case errors.Is(err, unix.ENOENT): // the task went away
	default:
		// Not installed (EMFILE: the caller's descriptor table is
		// full); the call is still waiting for an answer.
		fail(errnoOf(err, unix.EMFILE))
	}
}
