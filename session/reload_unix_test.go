//go:build unix

package session

import (
	"bytes"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReloadSIGHUPBurstAndFIFO: the policy file replaced by a FIFO (no
// writer) at a SIGHUP is refused at once, the old policy kept; a burst of
// SIGHUPs neither crashes nor wedges the reloads: the last file is in
// force afterwards and the audit log still verifies.
func TestReloadSIGHUPBurstAndFIFO(t *testing.T) {
	// The test listens too, so that a SIGHUP still queued when the
	// session stops listening does not end the test binary.
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)
	dir := t.TempDir()
	pol := writePolicy(t, dir, "version: 1\n")
	log := filepath.Join(dir, "audit.jsonl")
	var stderr lockedBuffer
	s, err := Open(Config{PolicyPath: pol, AuditPath: log, Stderr: &stderr, Reload: ReloadOnSIGHUP, Start: audit.Start{Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Policy().SHA256()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				s.Close(0)
				t.Fatalf("no %s; stderr:\n%s", what, stderr.String())
			}
		}
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, pol); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("refusal of the FIFO", func() bool { return strings.Contains(stderr.String(), "named pipe (FIFO)") })
	if s.Policy().SHA256() != first {
		t.Fatal("the FIFO changed the policy in force")
	}

	// A burst: the file alternates between a bad and a good version
	// while the signals come, then settles on the final one.
	final := "version: 1\nallow:\n  - {cidr: 203.0.113.0/24, ports: [443]}\n"
	for i := range 300 {
		os.Remove(pol)
		if i%2 == 0 {
			writePolicy(t, dir, "version: 1\nbogus: true\n")
		} else {
			writePolicy(t, dir, "version: 1\nallow:\n  - {cidr: 198.51.100.0/24, ports: [80]}\n")
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
	}
	writePolicy(t, dir, final)
	want, err := policy.Parse(pol, []byte(final))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("final policy in force", func() bool { return s.Policy().SHA256() == want.SHA256() })
	// One more, to be sure the goroutine is past every queued SIGHUP
	// before the session stops listening.
	n := strings.Count(stderr.String(), "nsgate: ")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("the last reload", func() bool { return strings.Count(stderr.String(), "nsgate: ") > n })
	s.Close(0)
	if _, _, err := audit.VerifyFile(log, nil); err != nil {
		t.Errorf("the log does not verify after the burst: %v", err)
	}
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), "named pipe (FIFO)") {
		t.Errorf("the refused FIFO reload is not in the audit log")
	}
}

// TestReloadHugeBadPolicy: a refused reload of a policy file just under
// the size limit with a problem on every item (here 300,000 relative
// exec paths) must not write an audit record the log's own reader
// refuses: the log still verifies, and the refusal is recorded.
func TestReloadHugeBadPolicy(t *testing.T) {
	dir := t.TempDir()
	pol := writePolicy(t, dir, "version: 1\n")
	log := filepath.Join(dir, "audit.jsonl")
	s, err := Open(Config{PolicyPath: pol, AuditPath: log, Stderr: &lockedBuffer{}, Reload: ReloadOnSIGHUP, Start: audit.Start{Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"version: 1\nexec:\n  allow: [" + strings.Repeat("a,", 300000) + "]\n",
		// one message quoting a name of nearly 1 MiB, twice over
		"version: 1\nallow:\n  - host: \"http://" + strings.Repeat("\u00e9", 400000) + "\"\n",
	} {
		writePolicy(t, dir, bad)
		if err := s.Reload(); err == nil {
			t.Fatal("a bad policy was accepted")
		}
	}
	s.Close(0)
	if _, _, err := audit.VerifyFile(log, nil); err != nil {
		t.Errorf("the log does not verify after a refused reload of a large bad file: %v", err)
	}
	data, _ := os.ReadFile(log)
	if n := strings.Count(string(data), `"action":"deny"`); n != 2 {
		t.Errorf("%d refused reloads recorded, want 2", n)
	}
	for i, l := range strings.Split(string(data), "\n") {
		if len(l) > 128<<10 {
			t.Errorf("record %d is %d bytes long", i+1, len(l))
		}
	}
}
