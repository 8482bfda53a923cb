//go:build unix

package session

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/inbound"
)

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestAuditIntactEndsAsBefore: with the log intact, the run ends with the
// head line and the worker's status, and the worker is left alone.
func TestAuditIntactEndsAsBefore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	var stderr bytes.Buffer
	s, err := Open(Config{AuditPath: path, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	s.StopOnAuditFailure(func() { close(killed) })
	if code := s.Close(3); code != 3 || !strings.HasPrefix(stderr.String(), "nsgate: audit head ") {
		t.Errorf("intact log: status %d, stderr %q; want 3 and the head", code, stderr.String())
	}
	select {
	case <-killed:
		t.Error("the worker was ended though the log did not fail")
	default:
	}
}

// openOnBrokenStderr opens a session whose audit log ("-", standard error) is written to
// a pipe nobody reads (the process's standard error, swapped while the
// log opens): its first write fails with EPIPE. stderr gets the session's
// own messages.
func openOnBrokenStderr(t *testing.T, stderr *bytes.Buffer) *Session {
	t.Helper()
	r, wpipe, _ := os.Pipe()
	r.Close() // a write to wpipe now fails with EPIPE
	t.Cleanup(func() { wpipe.Close() })
	old := os.Stderr
	os.Stderr = wpipe
	s, err := Open(Config{AuditPath: "-", Stderr: stderr})
	os.Stderr = old
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuditWatchEndsTheWorker: a log that fails ends the worker at once, or
// when it is attached if the log failed before; the run ends with one line
// naming the cause and status 125.
func TestAuditWatchEndsTheWorker(t *testing.T) {
	var stderr bytes.Buffer
	s := openOnBrokenStderr(t, &stderr)
	killed := make(chan struct{})
	s.StopOnAuditFailure(func() { close(killed) })
	s.Log().Log(audit.Start{})
	select {
	case <-killed:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker was not ended when the log failed")
	}
	// Attached after the failure: ended at once.
	again := make(chan struct{})
	s.StopOnAuditFailure(func() { close(again) })
	select {
	case <-again:
	default:
		t.Error("a worker attached after the failure was not ended")
	}
	code := s.Close(137)
	want := "nsgate: audit log failed: write stderr: broken pipe; the worker was stopped\n"
	if code != ExitAuditFailed || stderr.String() != want {
		t.Errorf("status %d, stderr %q; want %d and %q", code, stderr.String(), ExitAuditFailed, want)
	}
}

// TestExecAuditRefusesOnceFailed: with the log failed, an exec the server
// would let through is stopped by ending its caller.
func TestExecAuditRefusesOnceFailed(t *testing.T) {
	s := openOnBrokenStderr(t, &bytes.Buffer{})
	defer s.Close(0)
	l := s.Log()
	s.ExecAudit(guard.Plan{})
	a := s.execs[0]
	caller := exec.Command("sleep", "30")
	if err := caller.Start(); err != nil {
		t.Skipf("no sleep(1): %v", err)
	}
	defer caller.Process.Kill()
	a.record(guard.ExecEvent{Allow: true, Path: "/usr/bin/true", PID: caller.Process.Pid})
	// The log has not failed yet (nothing was written): the caller lives.
	if err := caller.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the caller was ended while the log was intact: %v", err)
	}
	select {
	case <-l.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the log did not fail")
	}
	a.record(guard.ExecEvent{Allow: true, Path: "/usr/bin/true", PID: caller.Process.Pid})
	done := make(chan error, 1)
	go func() { done <- caller.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the caller ended with %v; want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an exec was let through after the audit log failed")
	}
}

// TestInboundForwardRefusedOnceFailed: with the session's log failed, no
// forward opens (an add_hostfwd or a pasta -t could not be recorded), and
// its port stays free.
func TestInboundForwardRefusedOnceFailed(t *testing.T) {
	s := openOnBrokenStderr(t, &bytes.Buffer{})
	defer s.Close(0)
	l := s.Log()
	l.Log(audit.Start{})
	select {
	case <-l.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the log did not fail")
	}
	rule, err := inbound.ParsePublish("127.0.0.1:0:80")
	if err == nil {
		t.Fatalf("port 0 accepted: %+v", rule)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	fw, err := s.Inbound().Add(inbound.Rule{Proto: "tcp", HostAddr: netip.MustParseAddr("127.0.0.1"), HostPort: port, GuestPort: 80})
	if err == nil {
		t.Fatalf("forward %d opened with the audit log failed", fw.ID)
	}
	if c, err := net.Dial("tcp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String()); err == nil {
		c.Close()
		t.Error("the port accepts connections with the audit log failed")
	}
}
