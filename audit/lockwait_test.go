package audit

import (
	"strings"
	"testing"
	"time"
)

// TestLockWaitContinuesChain: a second writer that waits for the lock
// (a container engine's next helper for the same network namespace)
// opens the log once the first has closed it, continues its chain, and
// the whole file verifies against its head file. Without a wait the
// second writer is refused at once, as before.
func TestLockWaitContinuesChain(t *testing.T) {
	path := tempLog(t)
	first := mustOpen(t, path, Options{})
	first.Log(Start{Version: "first"})

	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second writer without LockWait: %v, want refused as in use", err)
	}

	opened := make(chan *Logger, 1)
	failed := make(chan error, 1)
	go func() {
		l, err := Open(path, Options{LockWait: time.Minute})
		if err != nil {
			failed <- err
			return
		}
		opened <- l
	}()
	// The waiting writer must not get the log while the first holds it.
	select {
	case l := <-opened:
		l.Close()
		t.Fatal("second writer opened the log while the first still held it")
	case err := <-failed:
		t.Fatalf("second writer: %v", err)
	case <-time.After(10 * lockPoll):
	}
	first.Log(Exit{Code: 0})
	mustClose(t, first)

	var second *Logger
	select {
	case second = <-opened:
	case err := <-failed:
		t.Fatalf("second writer after the first closed: %v", err)
	}
	if s := second.Log(Start{Version: "second"}); s != 3 {
		t.Errorf("second writer's first seq %d, want 3 (the chain goes on)", s)
	}
	second.Log(Exit{Code: 0})
	head := mustClose(t, second)

	sum, err := Check(path, nil, "")
	if err != nil {
		t.Fatalf("verify the shared log: %v", err)
	}
	if sum.Records != 4 || sum.Head != head {
		t.Errorf("shared log: %d records, head %s; want 4 and %s", sum.Records, sum.Head, head)
	}
}

// TestLockWaitGivesUp: a writer that holds the lock longer than the wait
// keeps the log; the waiting one is refused with the wait in the error.
func TestLockWaitGivesUp(t *testing.T) {
	path := tempLog(t)
	first := mustOpen(t, path, Options{})
	defer first.Close()
	_, err := Open(path, Options{LockWait: 5 * lockPoll})
	if err == nil || !strings.Contains(err.Error(), "in use by another process for") {
		t.Fatalf("Open = %v, want refused after the wait", err)
	}
}
