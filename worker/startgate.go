package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The start gate: when many `nsgate run` start at once (a burst of
// sandboxes), each start is a few tens of milliseconds of CPU, but
// hundreds of starts sharing the CPUs all take as long as the whole
// burst, and the Go runtime of every one of them keeps waking up
// meanwhile (its scheduler and system monitor), so the CPU a start costs
// grows with the burst: in a burst of 1,000 on 2 CPUs, twice what it
// costs in a burst of 100. The gate lets only a few starts build their
// sandbox at once, per user: from the open session until the worker runs
// (or the start fails) a start holds one of a few slots, an exclusive
// flock on a file in $XDG_RUNTIME_DIR/nsgate; the kernel drops the lock
// when nsgate exits, however it ends. The others wait in flock, asleep.
// A start waits at most startGateWait, then goes on without a slot (in
// a burst of 1,000 on 2 CPUs the last ones waited almost a minute; a
// holder that is stopped or stuck holds up only the starts queued on its
// slot).
// Without a private XDG_RUNTIME_DIR (the user's own, 0700, as a login
// session has) there is no gate: nsgate leaves no file anywhere else.
// The worker never sees the gate's folder (Run's view hides it), else it
// could lock every slot, which needs no write access.
//
// NSGATE_START_SLOTS=N sets the number of slots (default: twice the CPUs
// nsgate may run on); 0 turns the gate off.
const (
	startSlotsEnv = "NSGATE_START_SLOTS"
	startGateWait = 5 * time.Minute
)

// A start that has waited startGateSay for its slot says so, once, on
// gateOut (variables for the tests).
var (
	startGateSay           = 2 * time.Second
	gateOut      io.Writer = os.Stderr
)

// startSlot takes a start slot and returns what gives it back (safe to
// call more than once). Whatever goes wrong (no private directory, no
// lock) only means no gate: it never fails a run.
func startSlot() (release func()) {
	n := 2 * runtime.NumCPU()
	if v, ok := os.LookupEnv(startSlotsEnv); ok {
		if i, err := strconv.Atoi(v); err == nil && i >= 0 {
			n = i
		}
	}
	if n == 0 {
		return func() {}
	}
	dir, err := gateDir()
	if err != nil {
		return func() {}
	}
	f := takeSlot(dir, n, os.Getpid(), startGateWait)
	if f == nil {
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }
}

// gateDir is the user's private directory for the slots,
// $XDG_RUNTIME_DIR/nsgate, made if missing. Both must be directories (not
// links) that the user owns and nobody else may write to.
func gateDir() (string, error) {
	uid := os.Getuid()
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		return "", errors.New("no XDG_RUNTIME_DIR")
	}
	if err := privateDir(rt, uid); err != nil {
		return "", err
	}
	dir := filepath.Join(rt, "nsgate")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return dir, privateDir(dir, uid)
}

// privateDir checks that dir is a directory owned by uid that no one else
// may write to.
func privateDir(dir string, uid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a private directory of uid %d", dir, uid)
	}
	return nil
}

// takeSlot locks one of the n slot files in dir and returns it open (its
// close gives the slot back): the first free one from slot id%n on, or,
// when all are taken, slot id%n once its holder lets go, waiting at most
// wait. It returns nil when no slot could be had.
func takeSlot(dir string, n, id int, wait time.Duration) *os.File {
	open := func(i int) *os.File {
		name := filepath.Join(dir, "start-slot-"+strconv.Itoa(i))
		fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil
		}
		return os.NewFile(uintptr(fd), name)
	}
	first := id % n
	for k := range n {
		f := open((first + k) % n)
		if f == nil {
			return nil
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			return f
		}
		f.Close()
	}
	f := open(first)
	if f == nil {
		return nil
	}
	got := make(chan bool, 1)
	go func() {
		for {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				got <- err == nil
				return
			}
		}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// A wait that is felt is said, once.
	said := time.AfterFunc(startGateSay, func() {
		fmt.Fprintf(gateOut, "nsgate: waiting for a start slot: %d other starts of this user are building their sandbox (%s; %s=0 turns the gate off)\n", n, dir, startSlotsEnv)
	})
	defer said.Stop()
	select {
	case ok := <-got:
		if ok {
			return f
		}
		f.Close()
		return nil
	case <-timer.C:
		// Go on without a slot; give it back the moment it comes.
		go func() {
			<-got
			f.Close()
		}()
		return nil
	}
}
