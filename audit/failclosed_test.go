//go:build linux

package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The audit fails closed: a record that cannot be written makes
// the Logger failed; what was written stays verifiable; nothing blocks for
// longer than Options.Timeout.

// enospcWriter fails every write as a full disk does.
type enospcWriter struct{}

func (enospcWriter) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "/proc/self/fd/3", Err: syscall.ENOSPC}
}

// isClosed reports whether ch is closed, waiting at most d.
func isClosed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestWriteErrorFailsTheLog(t *testing.T) {
	l := newLogger(Options{Delay: -1})
	l.setOutput(enospcWriter{}, nil, zeroHash, 0)
	l.name = "audit.jsonl" // as Open names it: the path given
	go l.run()
	if isClosed(l.Failed(), 0) {
		t.Fatal("Failed is closed before anything went wrong")
	}
	if s := l.Log(Start{}); s != 1 {
		t.Fatalf("first seq %d", s)
	}
	if !isClosed(l.Failed(), 5*time.Second) {
		t.Fatal("a failed write did not close Failed")
	}
	want := "write audit.jsonl: no space left on device"
	if err := l.Err(); err == nil || err.Error() != want {
		t.Errorf("Err() = %v, want %q (the file and the cause, nothing more)", err, want)
	}
	// From now on nothing is queued or written.
	for _, ev := range []Event{Exit{}, denyFlow(1), allEvents[2], FlowEnd{FlowSeq: 1}} {
		if s := l.Log(ev); s != 0 {
			t.Errorf("Log(%s) after the failure = %d, want 0", ev.EventName(), s)
		}
	}
	start := time.Now()
	_, err := l.Close()
	if err == nil || err.Error() != want {
		t.Errorf("Close error %v, want %q", err, want)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close of a failed log took %v", took)
	}
}

// partialWriter writes at most room bytes in all, then fails like a full
// disk, the way write(2) does on one: a short write, then ENOSPC.
type partialWriter struct {
	f    *os.File
	room int
}

func (p *partialWriter) Write(b []byte) (int, error) {
	if len(b) <= p.room {
		n, err := p.f.Write(b)
		p.room -= n
		return n, err
	}
	n, _ := p.f.Write(b[:p.room])
	p.room -= n
	return n, &os.PathError{Op: "write", Path: p.f.Name(), Err: syscall.ENOSPC}
}

// openWith starts a Logger on the regular file at path whose writes go
// through w (which writes to the file).
func openWith(t *testing.T, path string, opts Options, wrap func(*os.File) io.Writer) *Logger {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	st, err := prepareFile(f, path, opts.Key, opts.LockWait)
	if err != nil {
		t.Fatal(err)
	}
	l := newLogger(opts)
	l.file = f
	l.setOutput(wrap(f), opts.Key, st.head, uint64(st.records))
	l.name, l.regular, l.size, l.head1 = path, true, st.size, openHeadFile(HeadFile(path))
	go l.run()
	return l
}

// TestShortWriteLeavesNoTornRecord: a write cut short mid-record (the disk
// filled up) leaves the file ending with the last whole record, which the
// head names, and the log verifies.
func TestShortWriteLeavesNoTornRecord(t *testing.T) {
	for _, room := range []int{0, 1, 150, 1000, 5000} {
		t.Run(strconv.Itoa(room), func(t *testing.T) {
			path := tempLog(t)
			l := openWith(t, path, Options{Key: testKey, Delay: -1}, func(f *os.File) io.Writer { return &partialWriter{f: f, room: room} })
			for i := 0; i < 50 && !isClosed(l.Failed(), 0); i++ {
				l.Log(Forward{Action: "add", Listen: fmt.Sprint(i), Dst: "d"})
				time.Sleep(time.Millisecond)
			}
			if !isClosed(l.Failed(), 5*time.Second) {
				t.Fatal("the log did not fail")
			}
			head, err := l.Close()
			if err == nil || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("Close error %v", err)
			}
			b, _ := os.ReadFile(path)
			if len(b) > room {
				t.Fatalf("%d bytes on disk, more than the %d the disk took", len(b), room)
			}
			if len(b) > 0 && b[len(b)-1] != '\n' {
				t.Fatalf("the file ends in a torn record: %q", b[max(0, len(b)-40):])
			}
			n, vhead, err := Verify(bytes.NewReader(b), testKey)
			if err != nil || vhead != head {
				t.Fatalf("Verify = %d, %s, %v; Close head %s", n, vhead, err, head)
			}
			if hf, _ := readHeadFile(HeadFile(path)); hf != head {
				t.Errorf("head file %s, want %s", hf, head)
			}
			t.Logf("disk room %d bytes: %d whole records kept (%d bytes)", room, n, len(b))
		})
	}
}

// TestFileSizeLimitIsAFailure runs in a child process with RLIMIT_FSIZE set:
// the kernel itself makes the short write and then fails with EFBIG, as a
// full disk would with ENOSPC (no root needed for this one).
func TestFileSizeLimitIsAFailure(t *testing.T) {
	path := os.Getenv("NSGATE_AUDIT_FSIZE_CHILD")
	if path != "" {
		// Go ignores SIGXFSZ, so the write fails with EFBIG.
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 10000, Max: 10000}); err != nil {
			fmt.Println("setrlimit:", err)
			os.Exit(3)
		}
		l, err := Open(path, Options{Delay: -1})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		for i := 0; i < 1000 && !isClosed(l.Failed(), 0); i++ {
			l.Log(Forward{Action: "add", ID: i + 1, Listen: "127.0.0.1:8080/tcp", Dst: "10.0.2.100:80"})
		}
		isClosed(l.Failed(), 5*time.Second)
		head, err := l.Close()
		fmt.Printf("head=%s err=%v\n", head, err)
		os.Exit(0)
	}
	path = tempLog(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileSizeLimitIsAFailure$")
	cmd.Env = append(os.Environ(), "NSGATE_AUDIT_FSIZE_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "file too large") {
		t.Fatalf("child: %s; want the write error (EFBIG)", out)
	}
	b, _ := os.ReadFile(path)
	if len(b) == 0 || len(b) > 10000 || b[len(b)-1] != '\n' {
		t.Fatalf("%d bytes, last %q: want whole records within the limit", len(b), b[max(0, len(b)-20):])
	}
	n, head, err := Verify(bytes.NewReader(b), nil)
	if err != nil || !strings.Contains(string(out), "head="+head) {
		t.Fatalf("Verify = %d, %s, %v; child: %s", n, head, err, out)
	}
	t.Logf("10000-byte limit: %d whole records kept in %d bytes; child: %s", n, len(b), strings.TrimSpace(string(out)))
}

// TestDiskFullOnTmpfs fills a real 64 KiB tmpfs. It needs root (a mount in
// a private mount namespace); it skips otherwise (fails under
// NSGATE_REQUIRE_ALL=1, as the other privileged tests do).
func TestDiskFullOnTmpfs(t *testing.T) {
	if dir := os.Getenv("NSGATE_AUDIT_TMPFS_CHILD"); dir != "" {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			fmt.Println("mount:", err)
			os.Exit(3)
		}
		defer unix.Unmount(dir, 0)
		path := filepath.Join(dir, "audit.jsonl")
		l, err := Open(path, Options{Key: testKey})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		for i := 0; i < 100000 && !isClosed(l.Failed(), 0); i++ {
			l.Log(Forward{Action: "add", ID: i + 1, Listen: "127.0.0.1:8080/tcp", Dst: "10.0.2.100:80"})
			if i%100 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		isClosed(l.Failed(), 5*time.Second)
		head, cerr := l.Close()
		b, _ := os.ReadFile(path)
		n, vhead, verr := Verify(bytes.NewReader(b), testKey)
		hf, _ := readHeadFile(HeadFile(path))
		fmt.Printf("close=%v\nbytes=%d\nrecords=%d\nverify=%v\nhead=%s\nverified=%s\nheadfile=%s\n", cerr, len(b), n, verr, head, vhead, hf)
		os.Exit(0)
	}
	skip := func(why string) {
		if os.Getenv("NSGATE_REQUIRE_ALL") == "1" {
			t.Fatalf("%s (required: NSGATE_REQUIRE_ALL=1)", why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("needs root: mounts a 64 KiB tmpfs in a private mount namespace to fill it for real (TestShortWriteLeavesNoTornRecord and TestFileSizeLimitIsAFailure cover the same without root)")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFullOnTmpfs$")
	cmd.Env = append(os.Environ(), "NSGATE_AUDIT_TMPFS_CHILD="+dir)
	// A mount namespace of its own (Go makes its root private), so the
	// tmpfs is the child's alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(string(out), "close=") {
		skip(fmt.Sprintf("cannot mount a tmpfs in a private mount namespace here: %v %s", err, out))
	}
	if strings.HasPrefix(string(out), "mount:") {
		skip(fmt.Sprintf("cannot mount a tmpfs here: %s", out))
	}
	s := string(out)
	field := func(k string) string {
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(line, k+"="); ok {
				return v
			}
		}
		return ""
	}
	if c := field("close"); !strings.Contains(c, "no space left on device") || !strings.HasPrefix(c, "write ") {
		t.Errorf("Close error %q; want the write error naming the file", c)
	}
	if field("verify") != "<nil>" || field("head") != field("verified") || field("headfile") != field("head") {
		t.Errorf("after the disk filled up, the log and its head file must verify:\n%s", s)
	}
	t.Logf("64 KiB tmpfs: %s", strings.ReplaceAll(strings.TrimSpace(s), "\n", "; "))
}

// TestFIFOWithoutReader: a FIFO that its reader holds open but never reads
// fills up; the watch finds the writer asleep on it for the timeout, the
// log has failed, and the forced deadline gets the write back, within
// the bound. (A FIFO with no reader at all is refused by
// Open: TestFIFOLogNeedsAReader.)
func TestFIFOWithoutReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.fifo")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const timeout = 300 * time.Millisecond
	start := time.Now()
	l := mustOpen(t, path, Options{Timeout: timeout, Delay: -1})
	if !l.deadline {
		t.Fatal("a FIFO should take write deadlines")
	}
	// More than a pipe holds (64 KiB).
	for i := 0; i < 2000 && !isClosed(l.Failed(), 0); i++ {
		l.Log(Forward{Action: "add", ID: i + 1, Listen: "127.0.0.1:8080/tcp", Dst: "10.0.2.100:80"})
	}
	if !isClosed(l.Failed(), 5*time.Second) {
		t.Fatal("the log did not fail on a FIFO nobody reads")
	}
	failedAfter := time.Since(start)
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "write "+path+": blocked for") {
		t.Errorf("Err() = %v; want the FIFO named and \"blocked for\"", err)
	}
	cstart := time.Now()
	l.Close()
	closeTook := time.Since(cstart)
	if closeTook > 3*time.Second {
		t.Errorf("Close took %v", closeTook)
	}
	t.Logf("FIFO without reader: failed after %v (timeout %v); Close took %v", failedAfter.Round(time.Millisecond), timeout, closeTook.Round(time.Millisecond))
}

// blockingWriter blocks every write until release is closed; it is not a
// file, so no deadline reaches it (a stderr pipe nobody reads, a hung NFS
// server).
type blockingWriter struct {
	release chan struct{}
	once    sync.Once
	// entered, when set, gets a value each time a Write starts.
	entered chan struct{}
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	if b.entered != nil {
		select {
		case b.entered <- struct{}{}:
		default:
		}
	}
	<-b.release
	return len(p), nil
}

func (b *blockingWriter) unblock() { b.once.Do(func() { close(b.release) }) }

// TestCloseIsBoundedOnAStuckSink: Close returns within the timeout (plus a
// short grace) whatever the sink does, and says the log failed.
func TestCloseIsBoundedOnAStuckSink(t *testing.T) {
	for _, tc := range []struct {
		name string
		why  string
		open func(t *testing.T, timeout time.Duration) (*Logger, func())
	}{
		{"writer", "a writer that never returns: the watch fails the log", func(t *testing.T, timeout time.Duration) (*Logger, func()) {
			w := &blockingWriter{release: make(chan struct{})}
			return startMem(Options{Timeout: timeout, Delay: -1}, w), w.unblock
		}},
		{"human", "human lines to a stderr nobody reads", func(t *testing.T, timeout time.Duration) (*Logger, func()) {
			w := &blockingWriter{release: make(chan struct{})}
			return mustOpen(t, "", Options{Timeout: timeout, Delay: -1, Human: w}), w.unblock
		}},
		{"fifo", "a FIFO whose reader never reads: the deadline is forced at Close", func(t *testing.T, timeout time.Duration) (*Logger, func()) {
			path := filepath.Join(t.TempDir(), "audit.fifo")
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			return mustOpen(t, path, Options{Timeout: timeout, Delay: -1}), func() { r.Close() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 500 * time.Millisecond
			l, unblock := tc.open(t, timeout)
			defer unblock()
			var ev Event = Forward{Action: "add", Listen: strings.Repeat("s", 100), Dst: "d"}
			if tc.name == "human" {
				ev = Exec{Action: "deny", Path: "/bin/sh"}
			}
			for i := 0; i < 1000; i++ {
				l.Log(ev)
				if tc.name == "human" {
					ev = Exec{Action: "deny", Path: fmt.Sprintf("/bin/sh%d", i)}
				}
			}
			start := time.Now()
			_, err := l.Close()
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "blocked for") {
				t.Errorf("%s: Close error %v; want the stall reported", tc.why, err)
			}
			// The bound is timeout + closeGrace; the slack is for a
			// loaded machine, not for the design.
			if took > timeout+closeGrace+3*time.Second {
				t.Errorf("%s: Close took %v; the bound is %v + %v", tc.why, took, timeout, closeGrace)
			}
			t.Logf("%s: Close returned after %v (timeout %v): %v", tc.name, took.Round(time.Millisecond), timeout, err)
		})
	}
}

// TestLogNeverWaitsForever: with the writer stuck and the queue full, an
// event that must wait for room waits at most the timeout; then the log has
// failed and Log returns 0.
func TestLogNeverWaitsForever(t *testing.T) {
	const timeout = 300 * time.Millisecond
	w := &blockingWriter{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	defer w.unblock()
	// A long timeout for the write itself, so that it is the queue that
	// gives out.
	l := startMem(Options{QueueLen: 4, Timeout: timeout, Delay: -1}, w)
	l.watch = time.AfterFunc(time.Hour, func() {}) // no watch: only the queue bound
	l.watch.Stop()
	// The writer takes records as fast as they come and writes when the
	// queue is idle: wait until it is stuck in a write, so that the queue
	// fills behind it.
	l.Log(Forward{Action: "add", Listen: "first", Dst: "d"})
	select {
	case <-w.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer never wrote")
	}
	done := make(chan uint64, 1)
	start := time.Now()
	go func() {
		var last uint64
		for i := 0; i < 20; i++ {
			last = l.Log(Forward{Action: "add", Listen: fmt.Sprint(i), Dst: "d"})
		}
		done <- last
	}()
	select {
	case s := <-done:
		if s != 0 {
			t.Errorf("the last Log returned %d; want 0 once the log failed", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Log waited for room for 10 s")
	}
	took := time.Since(start)
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "waited") {
		t.Errorf("Err() = %v; want the full queue reported", err)
	}
	if took < timeout || took > timeout+3*time.Second {
		t.Errorf("Log gave up after %v; want about %v", took, timeout)
	}
	// Denials and other aggregated events never wait, even now.
	if s := l.Log(denyFlow(1)); s != 0 {
		t.Errorf("Log after failure = %d", s)
	}
	t.Logf("queue stuck: Log gave up after %v (timeout %v)", took.Round(time.Millisecond), timeout)
	w.unblock()
	l.Close()
}

// TestTornLogMessages: a log that ends in a torn line (an older build, a
// crash) is refused with a message that says what happened and what to do,
// by Open and by Check; doing what it says works.
func TestTornLogMessages(t *testing.T) {
	path := tempLog(t)
	l := mustOpen(t, path, Options{})
	for _, ev := range allEvents[:4] {
		l.Log(ev)
	}
	mustClose(t, l)
	whole, _ := os.ReadFile(path)
	os.Remove(HeadFile(path))
	if err := os.WriteFile(path, append(bytes.Clone(whole), `{"seq":5,"time":"2030-`...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who string
		err func() error
	}{
		{"Open", func() error {
			l, err := Open(path, Options{})
			if err == nil {
				l.Close()
			}
			return err
		}},
		{"Check", func() error { _, err := Check(path, nil, ""); return err }},
	} {
		err := tc.err()
		var ve *VerifyError
		if !errors.As(err, &ve) || !ve.Torn || ve.Line != 5 {
			t.Fatalf("%s: %v; want a torn record at line 5", tc.who, err)
		}
		for _, want := range []string{
			path + ":5: torn last record (no newline)",
			"the log was cut mid-write",
			"the 4 records before it verify",
			fmt.Sprintf("truncate -s %d %s", len(whole), path),
			"or move the file aside to start a new log",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q\nlacks %q", tc.who, err, want)
			}
		}
	}
	// Doing what it says: cut the torn bytes off, and the log continues.
	if err := os.Truncate(path, int64(len(whole))); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, path, Options{})
	if s := l.Log(Exit{}); s != 5 {
		t.Errorf("after the cut, the log continues at seq %d, want 5", s)
	}
	mustClose(t, l)
	if _, err := Check(path, nil, ""); err != nil {
		t.Errorf("Check after the cut: %v", err)
	}
}
