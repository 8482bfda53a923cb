package pasta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnvChild marks the background copy of `nsgate pasta` (Background sets
// it; ChildReady reads it).
const EnvChild = "NSGATE_PASTA_CHILD"

// childReadyFD is the descriptor on which the background copy reports:
// "1" once it serves, or the text of its error.
const childReadyFD = 3

// Background starts a detached copy of nsgate (`nsgate pasta ARGS`, in a
// session of its own, its standard streams on /dev/null) and waits, at
// most timeout, until it reports. It returns nil once the copy serves;
// otherwise the copy's own error, and no copy is left running. This is
// pasta's fork to the background: Podman waits for pasta to exit 0 and
// then uses the namespace.
func Background(args []string, timeout time.Duration) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start the background process: %w", err)
	}
	defer r.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return fmt.Errorf("start the background process: %w", err)
	}
	defer null.Close()
	// The binary by its name (ps then shows nsgate, not exe); the
	// kernel's link when that cannot be read.
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        append([]string{"nsgate", "pasta"}, args...),
		Env:         append(os.Environ(), EnvChild+"=1"),
		Stdin:       null,
		Stdout:      null,
		Stderr:      null,
		ExtraFiles:  []*os.File{w}, // fd 3: childReadyFD
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("start the background process: %w", err)
	}
	type report struct {
		b   []byte
		err error
	}
	got := make(chan report, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, 64<<10))
		got <- report{b, err}
	}()
	select {
	case rep := <-got:
		if string(rep.b) == "1" {
			cmd.Process.Release()
			return nil
		}
		cmd.Process.Kill()
		cmd.Wait()
		msg := strings.TrimSpace(string(rep.b))
		if msg == "" {
			msg = "the background process exited before it was ready"
		}
		return errors.New(msg)
	case <-time.After(timeout):
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("the background process was not ready within %v", timeout)
	}
}

// ChildReady returns, in the background copy, the descriptor to hand to
// podnet as its ready fd and a writer for an error that keeps it from
// getting ready (the waiting parent prints it). Elsewhere it returns -1
// and nil.
func ChildReady() (fd int, fail io.Writer) {
	if os.Getenv(EnvChild) != "1" {
		return -1, nil
	}
	os.Unsetenv(EnvChild)
	unix.CloseOnExec(childReadyFD)
	return childReadyFD, fdWriter(childReadyFD)
}

// fdWriter writes to a descriptor without owning it.
type fdWriter int

func (f fdWriter) Write(b []byte) (int, error) { return unix.Write(int(f), bytes.TrimSpace(b)) }

// WatchNetns returns a channel closed once the namespace file at path is
// gone: removed, unmounted (the path then names another file) or, for
// /proc/PID/ns/net, its process ended. It checks every interval; stop ends
// the watch without closing the channel.
func WatchNetns(path string, interval time.Duration) (gone <-chan struct{}, stop func(), err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	dev, ino := st.Dev, st.Ino
	ch := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			var now unix.Stat_t
			if err := unix.Stat(path, &now); err != nil || now.Dev != dev || now.Ino != ino {
				close(ch)
				return
			}
		}
	}()
	var stopped bool
	return ch, func() {
		if !stopped {
			stopped = true
			close(quit)
		}
	}, nil
}

// WritePIDFile writes the calling process's PID to path (--pid).
func WritePIDFile(path string) error {
	// O_NOFOLLOW: a link left at the name is refused, never written
	// through (docs/threat-model.md, "nsgate's own host paths").
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("--pid: %w", err)
	}
	_, err = fmt.Fprintf(f, "%d\n", os.Getpid())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--pid: %w", err)
	}
	return nil
}
