//go:build integration

package integration

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWorkerCannotBreakCallerTerminal: `nsgate run` hands the worker the
// caller's terminal as its standard streams. A terminal's line discipline
// and its exclusive flag belong to the terminal, not to the process that
// set them, so they outlive the worker: an attack review set the null
// line discipline (N_NULL, which any user may set) on the caller's
// terminal, and after nsgate exited the caller's shell could neither read
// nor write it (tcgetattr EINVAL, every write refused) until the terminal
// was closed; output stopped with TCOOFF hung the shell's next write.
// The guard refuses the three ioctls; the terminal the host holds
// is checked after the run.
func TestWorkerCannotBreakCallerTerminal(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Fatalf("open /dev/ptmx: %v", err)
		}
		defer master.Close()
		if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
			t.Fatal(err)
		}
		n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
		if err != nil {
			t.Fatal(err)
		}
		sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		slave := os.NewFile(uintptr(sfd), "pty-slave")
		defer slave.Close()

		cmd := nsgateCmd(m, "run", "--", nsgateBin, "__guardprobe", "ttystate")
		cmd.Stdin = slave
		r := runBounded(t, cmd, 60*time.Second, "nsgate run __guardprobe ttystate", nil)
		t.Logf("exit %d; stdout %q; stderr %q", r.code, r.stdout, r.stderr)
		if got := strings.TrimSpace(r.stdout); got != "setd=EPERM excl=EPERM xonc=EPERM" {
			t.Errorf("worker: %q, want setd=EPERM excl=EPERM xonc=EPERM", got)
		}

		// The caller's terminal after the run.
		ld, err := unix.IoctlGetInt(sfd, unix.TIOCGETD)
		if err != nil {
			t.Fatalf("TIOCGETD after the run: %v", err)
		}
		if ld != 0 {
			t.Errorf("the caller's terminal has line discipline %d after the run, want 0 (N_TTY)", ld)
		}
		excl, err := unix.IoctlGetInt(sfd, unix.TIOCGEXCL)
		if err != nil {
			t.Fatalf("TIOCGEXCL after the run: %v", err)
		}
		if excl != 0 {
			t.Errorf("the caller's terminal is in exclusive mode after the run")
		}
		if _, err := unix.IoctlGetTermios(sfd, unix.TCGETS); err != nil {
			t.Errorf("tcgetattr on the caller's terminal after the run: %v", err)
		}
		// Output stopped (TCOOFF) makes a write block; non-blocking, it
		// fails with EAGAIN.
		unix.SetNonblock(sfd, true)
		if _, err := unix.Write(sfd, []byte("x")); err != nil {
			t.Errorf("write to the caller's terminal after the run: %v (its output was stopped)", err)
		}
		unix.SetNonblock(sfd, false)
		// Put the pty back as it was whatever happened (the test owns it).
		unix.IoctlSetPointerInt(sfd, unix.TIOCSETD, 0)
		unix.IoctlSetInt(sfd, unix.TIOCNXCL, 0)
		unix.IoctlSetInt(sfd, unix.TCXONC, unix.TCOON)
	})
}
