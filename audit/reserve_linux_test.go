package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallFS mounts a tmpfs of size bytes for the test (root only).
func smallFS(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func reserveFlow(i int) Flow {
	return Flow{Action: "allow", Proto: "tcp", Src: "10.0.0.2:40000", Dst: fmt.Sprintf("192.0.2.%d:%d", i%250+1, 1000+i), Rule: "r", Reason: "allowed by test"}
}

// TestReserveFullBeforeFailed fills a 48 KiB file system with distinct
// records: the log says Full before any write fails, and the records
// logged after it (the flows admitted before the gateway saw Full, the
// exit record) are all written, into the reserve, in a chain that
// verifies.
func TestReserveFullBeforeFailed(t *testing.T) {
	dir := smallFS(t, 48<<10)
	path := filepath.Join(dir, "audit.jsonl")
	l := mustOpen(t, path, Options{Key: testKey, Delay: -1, Burst: 1 << 20, Reserve: 16 << 10})
	if w := l.ReserveWarning(); w != nil {
		t.Fatalf("tmpfs supports fallocate, yet: %v", w)
	}
	logged := 0
fill:
	for i := 0; i < 10000; i++ {
		if l.Log(reserveFlow(i)) == 0 {
			t.Fatalf("flow %d dropped (err %v)", i, l.Err())
		}
		logged++
		for {
			select {
			case <-l.Full():
				break fill
			case <-l.Failed():
				t.Fatalf("the log failed before it said it was full, after %d records: %v", logged, l.Err())
			default:
			}
			if l.Head() != zeroHash && l.pendingLen() == 0 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if l.FullErr() == nil || !strings.Contains(l.FullErr().Error(), "no space") {
		t.Fatalf("FullErr = %v, want the file system's ENOSPC", l.FullErr())
	}
	// What a gateway still records once full: a few dozen flows already
	// past its check, and the exit record.
	const after = 30
	for i := 0; i < after; i++ {
		l.Log(reserveFlow(20000 + i))
	}
	l.Log(Exit{Code: 0, LogFull: l.FullErr().Error()})
	if _, err := l.Close(); err != nil {
		t.Fatalf("Close once full: %v (the reserve should have held %d more records)", err, after+1)
	}
	n, _, err := VerifyFile(path, testKey)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if want := logged + after + 1; n != want {
		t.Fatalf("the log holds %d records, want %d: every record logged once full must be there", n, want)
	}
	last := lastLine(t, path)
	if !strings.Contains(last, `"event":"exit"`) || !strings.Contains(last, `"log_full":"audit log`) {
		t.Fatalf("last record %s: want the exit record with log_full", last)
	}
	// The reserve is given back at Close: the file holds its size only.
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > st.Size+4096 {
		t.Errorf("after Close the log keeps %d bytes for a size of %d: the reserve was not released", st.Blocks*512, st.Size)
	}
}

// TestReserveRefusedAtOpen: a file system without room for the reserve
// refuses the log at start (fail closed), naming why.
func TestReserveRefusedAtOpen(t *testing.T) {
	dir := smallFS(t, 16<<10)
	_, err := Open(filepath.Join(dir, "audit.jsonl"), Options{Reserve: 64 << 10})
	if err == nil || !strings.Contains(err.Error(), "aside for the closing records") {
		t.Fatalf("Open with no room for the reserve: %v, want a refusal naming the reserve", err)
	}
}

// TestReserveNone: Reserve < 0 keeps no reserve, so a full disk fails the
// log at the write that hits it, as before.
func TestReserveNone(t *testing.T) {
	dir := smallFS(t, 16<<10)
	l := mustOpen(t, filepath.Join(dir, "audit.jsonl"), Options{Delay: -1, Burst: 1 << 20, Reserve: -1})
	for i := 0; i < 10000 && l.Err() == nil; i++ {
		l.Log(reserveFlow(i))
		time.Sleep(50 * time.Microsecond)
	}
	l.Close()
	if l.Err() == nil || l.FullErr() != nil {
		t.Fatalf("Err %v, FullErr %v: want a failed log and no full state", l.Err(), l.FullErr())
	}
}

func lastLine(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		last = sc.Text()
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(last), &m); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
	return last
}

func (l *Logger) pendingLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}
