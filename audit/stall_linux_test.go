package audit

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestThreadRunnable reads real thread states: a thread that spins is
// runnable; one whose goroutine waits on a pipe nobody writes sleeps (a
// write stuck on a full pipe waits the same way, for the poller).
func TestThreadRunnable(t *testing.T) {
	var stop atomic.Bool
	defer stop.Store(true)
	spin := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		spin <- gettid()
		for !stop.Load() {
		}
	}()
	tid := <-spin
	if !eventually(func() bool { return threadRunnable(tid) }) {
		t.Errorf("a spinning thread (%d) is not runnable", tid)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	asleep := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		asleep <- gettid()
		r.Read(make([]byte, 1)) // until w closes
	}()
	tid = <-asleep
	if !eventually(func() bool { return !threadRunnable(tid) }) {
		t.Errorf("a thread waiting on an empty pipe (%d) is runnable", tid)
	}
	if threadRunnable(0) || threadRunnable(-1) {
		t.Error("no thread is runnable")
	}
}

// eventually reports whether cond held within ten seconds of looks.
func eventually(cond func() bool) bool {
	for range 1000 {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
