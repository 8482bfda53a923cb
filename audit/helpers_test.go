package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is an injectable clock safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// tempLog returns a path for a log in a fresh test directory.
func tempLog(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "audit.jsonl")
}

// mustOpen opens a Logger or fails the test.
func mustOpen(t testing.TB, path string, opts Options) *Logger {
	t.Helper()
	l, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	return l
}

// mustClose closes l and returns its head.
func mustClose(t testing.TB, l *Logger) string {
	t.Helper()
	head, err := l.Close()
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	return head
}

// readLines returns the file's lines without newlines.
func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return splitLines(b)
}

func splitLines(b []byte) [][]byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return nil
	}
	return bytes.Split(b, []byte("\n"))
}

func joinLines(lines [][]byte) []byte {
	var out []byte
	for _, l := range lines {
		out = append(out, l...)
		out = append(out, '\n')
	}
	return out
}

func hashHex(line []byte) string {
	s := sha256.Sum256(line)
	return hex.EncodeToString(s[:])
}

// memberNames returns the top-level member names of a JSON object in order.
func memberNames(t testing.TB, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.(string))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// decode unmarshals one line into a map.
func decode(t testing.TB, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return m
}

// startMem starts a Logger whose JSON goes to w, without a file.
func startMem(opts Options, w io.Writer) *Logger {
	l := newLogger(opts)
	l.setOutput(w, opts.Key, zeroHash, 0)
	go l.run()
	return l
}

// denyFlow is a typical refused flow; port varies the source port.
func denyFlow(port int) Flow {
	return Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:" + itoa(port), Dst: "169.254.169.254:80",
		Rule: "builtin:metadata", Reason: "169.254.169.254 is a cloud metadata address"}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func sleepMS(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }
