package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/tun/tundev"
)

// OpenTAP creates the TAP device spec.Iface.Name in the network namespace
// spec.NetnsPath and returns its descriptor (close-on-exec), owned by the
// caller. The caller's own namespaces do not change.
//
// The work is done by a child: nsgate forks (a raw fork, so that the child
// is single-threaded and may join a user namespace, which a Go process
// cannot do once its runtime has started threads), the child joins the
// user namespace and then the network namespace, raises CAP_NET_ADMIN as
// an ambient capability (so it survives an exec as a non-root uid of that
// namespace), and re-executes nsgate with JoinArg. That process opens and
// configures the device and sends the descriptor back over SCM_RIGHTS. The
// child has exited when OpenTAP returns, whatever the outcome.
func OpenTAP(spec TAPSpec) (int, error) {
	if !spec.Iface.TAP {
		return -1, errors.New("open tap: Iface.TAP not set")
	}
	netfd, err := openNS(spec.NetnsPath, unix.CLONE_NEWNET)
	if err != nil {
		return -1, err
	}
	defer unix.Close(netfd)
	userfd, err := userNSToJoin(spec.UsernsPath, netfd)
	if err != nil {
		return -1, err
	}
	if userfd >= 0 {
		defer unix.Close(userfd)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return -1, fmt.Errorf("open tap: %w", err)
	}

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open tap: socketpair: %w", err)
	}
	defer unix.Close(pair[0])
	var errPipe [2]int
	if err := unix.Pipe2(errPipe[:], unix.O_CLOEXEC); err != nil {
		unix.Close(pair[1])
		return -1, fmt.Errorf("open tap: pipe: %w", err)
	}
	defer unix.Close(errPipe[0])

	// The child moves its end of the socketpair to fd 3; every other
	// descriptor it needs must therefore sit above 3.
	child, err := highFDs(pair[1], errPipe[1])
	unix.Close(pair[1])
	unix.Close(errPipe[1])
	if err != nil {
		return -1, fmt.Errorf("open tap: %w", err)
	}
	fa, err := newForkArgs(userfd, netfd, child[0], child[1],
		"/proc/self/exe", []string{"nsgate-join", JoinArg}, []string{joinEnv + "=" + string(js)})
	if err != nil {
		unix.Close(child[0])
		unix.Close(child[1])
		return -1, fmt.Errorf("open tap: %w", err)
	}
	pid, err := fa.start()
	unix.Close(child[0])
	unix.Close(child[1])
	if err != nil {
		return -1, fmt.Errorf("open tap: fork: %w", err)
	}
	reap := func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}

	// The error pipe closes on a successful exec; otherwise it carries the
	// failed step and errno.
	if step, errno, failed := readForkError(errPipe[0]); failed {
		reap()
		return -1, forkStepError(step, errno, spec)
	}
	fd, err := recvTAP(pair[0])
	if err != nil {
		unix.Kill(pid, unix.SIGKILL)
	}
	reap()
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// openNS opens a namespace file and checks its type.
func openNS(path string, nstype int) (int, error) {
	kind := map[int]string{unix.CLONE_NEWNET: "network", unix.CLONE_NEWUSER: "user"}[nstype]
	if path == "" {
		return -1, fmt.Errorf("no %s namespace given", kind)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s namespace %s: %w", kind, path, err)
	}
	t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil || t != nstype {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is not a %s namespace", path, kind)
	}
	return fd, nil
}

// userNSToJoin returns a descriptor of the user namespace to join, or -1
// when there is none to join (it is our own, or its owner is out of our
// reach, in which case setns on the network namespace decides).
func userNSToJoin(path string, netfd int) (int, error) {
	var fd int
	if path != "" {
		f, err := openNS(path, unix.CLONE_NEWUSER)
		if err != nil {
			return -1, err
		}
		fd = f
	} else {
		f, err := unix.IoctlRetInt(netfd, unix.NS_GET_USERNS)
		if err != nil {
			return -1, nil
		}
		unix.CloseOnExec(f)
		fd = f
	}
	same, err := sameNS(fd, "/proc/self/ns/user")
	if err != nil || same {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// sameNS reports whether fd and the namespace file at path are the same
// namespace.
func sameNS(fd int, path string) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return false, err
	}
	if err := unix.Stat(path, &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// highFDs duplicates each descriptor to a number above 3 (close-on-exec).
func highFDs(fds ...int) ([]int, error) {
	out := make([]int, 0, len(fds))
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
		if err != nil {
			for _, o := range out {
				unix.Close(o)
			}
			return nil, fmt.Errorf("dup: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// Steps of the forked child, reported on the error pipe.
const (
	stepSetnsUser = 1 + iota
	stepSetnsNet
	stepDup
	stepExec
)

func readForkError(fd int) (step uint32, errno unix.Errno, failed bool) {
	var buf [8]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || m == 0 {
			break
		}
		n += m
	}
	if n < len(buf) {
		return 0, 0, false
	}
	step = uint32(buf[0]) | uint32(buf[1])<<8 | uint32(buf[2])<<16 | uint32(buf[3])<<24
	e := uint32(buf[4]) | uint32(buf[5])<<8 | uint32(buf[6])<<16 | uint32(buf[7])<<24
	return step, unix.Errno(e), true
}

// forkStepError explains a failure of the forked child, with the fix.
func forkStepError(step uint32, errno unix.Errno, spec TAPSpec) error {
	switch step {
	case stepSetnsUser:
		what := spec.UsernsPath
		if what == "" {
			what = "the owner of " + spec.NetnsPath
		}
		return fmt.Errorf("join user namespace %s: %w (nsgate must own it, or run as the user who created it)", what, errno)
	case stepSetnsNet:
		return fmt.Errorf("join network namespace %s: %w (no CAP_SYS_ADMIN over it: pass --userns-path, or run nsgate inside the user namespace that owns it)", spec.NetnsPath, errno)
	case stepDup:
		return fmt.Errorf("open tap: child setup: %w", errno)
	case stepExec:
		return fmt.Errorf("open tap: re-execute nsgate (/proc/self/exe): %w", errno)
	}
	return fmt.Errorf("open tap: child failed at step %d: %w", step, errno)
}

// recvTAP waits for the join child's message: the descriptor, or an
// error text.
func recvTAP(sock int) (int, error) {
	tv := unix.NsecToTimeval(joinTimeout.Nanoseconds())
	unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return -1, fmt.Errorf("open tap: no answer from the join child after %s", joinTimeout)
		}
		return -1, fmt.Errorf("open tap: %w", err)
	}
	msg := string(buf[:n])
	if n == 0 {
		return -1, errors.New("open tap: the join child exited without an answer")
	}
	if strings.HasPrefix(msg, "err:") {
		return -1, errors.New(strings.TrimPrefix(msg, "err:"))
	}
	if msg != "tap" || oobn == 0 {
		return -1, fmt.Errorf("open tap: unexpected message %q", msg)
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cmsgs) != 1 {
		return -1, fmt.Errorf("open tap: bad control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&cmsgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("open tap: bad descriptor message: %v", err)
	}
	return fds[0], nil
}

// JoinMain is the body of the join child (nsgate re-executed with JoinArg
// by OpenTAP, already inside the target's namespaces). It opens and, if
// asked, configures the TAP device, sends its descriptor over fd 3 and
// returns the exit status.
func JoinMain() int {
	runtime.LockOSThread()
	unix.CloseOnExec(3)
	ctl := os.NewFile(3, "nsgate-join-ctl")
	defer ctl.Close()
	fail := func(err error) int {
		ctl.Write([]byte("err:" + err.Error()))
		return 1
	}
	// It runs in the container's namespaces with CAP_NET_ADMIN: a
	// container process that sees it must not take it over.
	if err := NotDumpable(); err != nil {
		return fail(err)
	}
	var spec TAPSpec
	if err := json.Unmarshal([]byte(os.Getenv(joinEnv)), &spec); err != nil {
		return fail(fmt.Errorf("join spec: %w", err))
	}
	fd, err := tundev.Open(spec.Iface)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(fd)
	if spec.Configure {
		if err := tundev.Configure(spec.Iface); err != nil {
			return fail(err)
		}
	}
	if err := unix.Sendmsg(int(ctl.Fd()), []byte("tap"), unix.UnixRights(fd), nil, 0); err != nil {
		return fail(fmt.Errorf("send tap descriptor: %w", err))
	}
	return 0
}
