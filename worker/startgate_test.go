package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTakeSlot(t *testing.T) {
	dir := t.TempDir()
	// flock belongs to an open file description, so two opens in one
	// process compete as two processes would.
	a := takeSlot(dir, 2, 0, time.Second)
	b := takeSlot(dir, 2, 0, time.Second) // slot 0 is taken: the next one
	if a == nil || b == nil {
		t.Fatalf("two free slots, got %v and %v", a, b)
	}
	if a.Name() == b.Name() {
		t.Fatalf("both hold %s", a.Name())
	}
	if c := takeSlot(dir, 2, 1, 50*time.Millisecond); c != nil {
		c.Close()
		t.Fatalf("a third start got %s while both slots are held", c.Name())
	}
	// A waiter gets its slot once the holder lets go.
	got := make(chan bool)
	go func() {
		c := takeSlot(dir, 2, 0, 10*time.Second)
		got <- c != nil && c.Name() == a.Name()
		if c != nil {
			c.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond)
	a.Close()
	if !<-got {
		t.Error("the waiter did not get the slot given back")
	}
	b.Close()
	// The slot a waiter gave up on is free again once the late lock is
	// released.
	c := takeSlot(dir, 1, 0, time.Second)
	if c == nil {
		t.Fatal("a single free slot not taken")
	}
	if d := takeSlot(dir, 1, 0, 20*time.Millisecond); d != nil {
		t.Fatal("took a held slot")
	}
	c.Close()
	var d *os.File
	for range 100 {
		if d = takeSlot(dir, 1, 0, 100*time.Millisecond); d != nil {
			break
		}
	}
	if d == nil {
		t.Fatal("the slot stayed taken after its holder and the late waiter let go")
	}
	d.Close()
}

func TestGateDir(t *testing.T) {
	rt := t.TempDir()
	os.Chmod(rt, 0o700)
	t.Setenv("XDG_RUNTIME_DIR", rt)
	dir, err := gateDir()
	if err != nil || dir != filepath.Join(rt, "nsgate") {
		t.Fatalf("gateDir = %q, %v", dir, err)
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v", dir, st, err)
	}
	for name, setup := range map[string]func() string{
		"unset": func() string { return "" },
		"others may write": func() string {
			d := t.TempDir()
			os.Chmod(d, 0o777)
			return d
		},
		"a link": func() string {
			l := filepath.Join(t.TempDir(), "link")
			os.Symlink(rt, l)
			return l
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", setup())
			if d, err := gateDir(); err == nil {
				t.Errorf("gateDir = %q, want no gate", d)
			}
		})
	}
	// startSlot never fails a run: without a gate it gives a no-op.
	t.Setenv("XDG_RUNTIME_DIR", "")
	startSlot()()
	t.Setenv("XDG_RUNTIME_DIR", rt)
	t.Setenv(startSlotsEnv, "0")
	startSlot()()
}

// lockedBuffer is a bytes.Buffer safe for the gate's timer goroutine.
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

// A start that waits long for its slot says why, once; one that gets a
// slot at once says nothing.
func TestTakeSlotSaysItWaits(t *testing.T) {
	var out lockedBuffer
	oldOut, oldSay := gateOut, startGateSay
	gateOut, startGateSay = &out, 20*time.Millisecond
	t.Cleanup(func() { gateOut, startGateSay = oldOut, oldSay })
	dir := t.TempDir()
	a := takeSlot(dir, 1, 0, time.Second)
	if a == nil {
		t.Fatal("a free slot not taken")
	}
	if out.String() != "" {
		t.Fatalf("a start that waited for nothing said %q", out.String())
	}
	if b := takeSlot(dir, 1, 0, 200*time.Millisecond); b != nil {
		t.Fatal("took a held slot")
	}
	a.Close()
	if got := out.String(); strings.Count(got, "waiting for a start slot") != 1 || !strings.Contains(got, startSlotsEnv+"=0") {
		t.Fatalf("a start that waited 200ms said %q; want one line naming the wait and %s", got, startSlotsEnv)
	}
}
