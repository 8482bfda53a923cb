package audit

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCopyRefusesFilesAndMissingStreams: a second sink must be a stream
// that exists; a regular file, a directory, a missing path and a FIFO
// nobody reads are refused at Open, naming what is wrong, and no log file
// is left locked.
func TestCopyRefusesFilesAndMissingStreams(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "copy.jsonl")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "noreader.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ copy, want string }{
		{regular, "a regular file; a second --audit must be a stream"},
		{dir, "a directory"},
		{filepath.Join(dir, "missing"), "it must exist"},
		{fifo, "nothing reads it"},
	} {
		path := tempLog(t)
		l, err := Open(path, Options{Copy: tc.copy})
		if err == nil {
			l.Close()
			t.Errorf("copy %s: opened, want an error", tc.copy)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("copy %s: %v, want %q", tc.copy, err, tc.want)
		}
		// The log file was released: a second Open takes its lock.
		l2 := mustOpen(t, path, Options{})
		mustClose(t, l2)
	}
	if _, err := Open("", Options{Copy: "-"}); err == nil {
		t.Error("a copy without a log: opened, want an error")
	}
}

// TestCopyHoldsTheSameLines: every line of the log reaches the copy (a
// FIFO read by the test), byte for byte, in order.
func TestCopyHoldsTheSameLines(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "copy.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	path := tempLog(t)
	l := mustOpen(t, path, Options{Copy: fifo})
	// Read only once the copy is open: a FIFO without a writer reads as
	// at its end.
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	if !l.copyDeadline {
		t.Error("a FIFO copy should take write deadlines")
	}
	for i := range 500 {
		l.Log(Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: fmt.Sprintf("192.0.2.%d:%d", i%250, 1000+i), Rule: "default", Reason: strings.Repeat("r", i%300)})
	}
	mustClose(t, l) // closes the FIFO: the reader sees EOF
	var copied []byte
	select {
	case copied = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the copy was never closed")
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(splitLines(file)) != 500 {
		t.Fatalf("the log holds %d lines, want 500", len(splitLines(file)))
	}
	if !bytes.Equal(copied, file) {
		t.Errorf("the copy (%d bytes) differs from the log (%d bytes)", len(copied), len(file))
	}
}

// TestCopyWritesWholeLinesWithinPipeBuf: each write to the copy is whole
// lines, at most PIPE_BUF bytes unless one line alone is longer, so no
// other writer on the same pipe can cut a line. A SOCK_SEQPACKET pair
// keeps each write as one packet, so the test sees the writes.
func TestCopyWritesWholeLinesWithinPipeBuf(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, r := os.NewFile(uintptr(fds[0]), "w"), os.NewFile(uintptr(fds[1]), "r")
	defer r.Close()
	unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
	l := newLogger(Options{})
	l.copyOut, l.copyName = w, "audit copy on test"
	var lines [][]byte
	for i := range 40 {
		n := 200 + i*37
		if i == 17 {
			n = 9000 // one line longer than PIPE_BUF
		}
		lines = append(lines, append(bytes.Repeat([]byte{'a' + byte(i%26)}, n), '\n'))
	}
	done := make(chan error, 1)
	go func() { done <- l.writeCopy(bytes.Join(lines, nil)); w.Close() }()
	var packets [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Read(buf)
		if n == 0 || err != nil {
			break
		}
		packets = append(packets, append([]byte(nil), buf[:n]...))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var joined []byte
	for i, p := range packets {
		if p[len(p)-1] != '\n' {
			t.Errorf("write %d ends inside a line", i)
		}
		if len(p) > pipeBuf && bytes.Count(p, []byte{'\n'}) != 1 {
			t.Errorf("write %d is %d bytes of %d lines: over PIPE_BUF with more than one line", i, len(p), bytes.Count(p, []byte{'\n'}))
		}
		joined = append(joined, p...)
	}
	if !bytes.Equal(joined, bytes.Join(lines, nil)) {
		t.Error("the writes do not add up to the lines")
	}
	if len(packets) < 10 {
		t.Errorf("%d writes for %d bytes: the copy was not cut at PIPE_BUF", len(packets), len(joined))
	}
}

// TestCopyFailureFailsTheLog: a copy nobody reads any more fails the log
// (closed), naming the copy; the log file keeps what it wrote.
func TestCopyFailureFailsTheLog(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "copy.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := tempLog(t)
	l := mustOpen(t, path, Options{Copy: fifo, Delay: -1, Timeout: 300 * time.Millisecond})
	l.Log(Start{Version: "test"})
	r.Close() // the reader goes away: the next write gets EPIPE
	for i := 0; i < 100 && !isClosed(l.Failed(), 10*time.Millisecond); i++ {
		l.Log(Forward{Action: "add", ID: i + 1, Listen: "127.0.0.1:8080/tcp", Dst: "10.0.2.100:80"})
	}
	if !isClosed(l.Failed(), 5*time.Second) {
		t.Fatal("the log did not fail when its copy could not be written")
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "audit copy on "+fifo) {
		t.Errorf("Err() = %v, want the copy named", err)
	}
	l.Close()
	if n := len(readLines(t, path)); n == 0 {
		t.Error("the log file lost the records written before the copy failed")
	}
}
