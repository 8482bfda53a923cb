//go:build linux

package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A log whose records land nowhere must fail, as a full disk does: a FIFO
// nobody reads, a FIFO whose reader went away, a file deleted or replaced
// while nsgate writes it. Each of these used to end "ok" with an audit head,
// its records gone.

// TestFIFOLogNeedsAReader: opening a FIFO log that nobody reads is refused
// at once. Opened read-write, nsgate was its own reader: up to 64 KiB of
// records went into the pipe and vanished at exit, and the run ended well.
func TestFIFOLogNeedsAReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.fifo")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{Timeout: 300 * time.Millisecond, Delay: -1})
	if err == nil {
		l.Log(Exit{})
		_, cerr := l.Close()
		t.Fatalf("Open of a FIFO nobody reads succeeded (Close: %v); want it refused", cerr)
	}
	if !strings.Contains(err.Error(), "nothing reads it") {
		t.Errorf("Open error %q; want it to say nothing reads the FIFO", err)
	}
}

// TestFIFOLogReaderGone: once the FIFO's reader has gone, the next record
// fails the log (the write has nowhere to go) instead of being buffered
// in a pipe only nsgate holds.
func TestFIFOLogReaderGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.fifo")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{Timeout: 300 * time.Millisecond, Delay: -1})
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	l.Log(denyFlow(1))
	buf := make([]byte, 4096)
	got := 0
	for deadline := time.Now().Add(5 * time.Second); got == 0 && time.Now().Before(deadline); {
		n, _ := r.Read(buf)
		got += max(n, 0)
		if got == 0 {
			sleepMS(10)
		}
	}
	if got == 0 {
		t.Fatal("the reader got no record")
	}
	r.Close()
	l.Log(denyFlow(2))
	if !isClosed(l.Failed(), 5*time.Second) {
		l.Close()
		t.Fatal("a record written after the FIFO's reader left did not fail the log")
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Err() = %v; want the FIFO named", err)
	}
	l.Close()
}

// TestDeletedLogFails: a log file removed, or replaced by a rename, while
// it is written fails the log at the next write: the records after it
// would go to a file no name reaches, and the run would end with a head
// nothing can be verified against.
func TestDeletedLogFails(t *testing.T) {
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			path := tempLog(t)
			l := mustOpen(t, path, Options{Delay: -1})
			l.Log(denyFlow(1))
			for l.Head() == zeroHash {
				sleepMS(5)
			}
			switch how {
			case "removed":
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			case "replaced":
				other := path + ".new"
				if err := os.WriteFile(other, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(other, path); err != nil {
					t.Fatal(err)
				}
			}
			l.Log(denyFlow(2))
			if !isClosed(l.Failed(), 5*time.Second) {
				l.Close()
				t.Fatalf("a record written after the log was %s did not fail the log", how)
			}
			if err := l.Err(); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("Err() = %v; want the log named", err)
			}
			l.Close()
		})
	}
}
