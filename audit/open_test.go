package audit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenStderr runs the test binary again so that "-" writes to a stderr
// this test can read.
func TestOpenStderr(t *testing.T) {
	if os.Getenv("NSGATE_AUDIT_STDERR_CHILD") == "1" {
		l, err := Open("-", Options{Key: testKey})
		if err != nil {
			os.Exit(3)
		}
		l.Log(Start{Version: "child"})
		l.Log(Exit{Code: 0})
		head, err := l.Close()
		if err != nil {
			os.Exit(4)
		}
		os.Stdout.WriteString(head)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenStderr$")
	cmd.Env = append(os.Environ(), "NSGATE_AUDIT_STDERR_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v; stderr %s", err, stderr.String())
	}
	n, head, err := Verify(bytes.NewReader(stderr.Bytes()), testKey)
	if err != nil || n != 2 || head != stdout.String() {
		t.Errorf("stderr log: Verify = %d, %s, %v; child's head %s; stderr:\n%s", n, head, err, stdout.String(), stderr.String())
	}
}

func TestOpenNonRegularFile(t *testing.T) {
	// A device cannot be read back or locked: the chain starts afresh.
	l := mustOpen(t, os.DevNull, Options{})
	if s := l.Log(Exit{}); s != 1 {
		t.Errorf("seq %d, want 1", s)
	}
	if head := mustClose(t, l); len(head) != 64 || head == zeroHash {
		t.Errorf("head %q after one record", head)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		why  string
		path string
		want string
	}{
		{"a directory is not a log", dir, "open audit log"},
		{"a missing parent directory is reported", filepath.Join(dir, "no", "such", "audit.jsonl"), "no such file"},
	}
	for _, tc := range cases {
		l, err := Open(tc.path, Options{})
		if err == nil {
			l.Close()
			t.Errorf("%s: Open(%q) succeeded", tc.why, tc.path)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to contain %q", tc.why, err, tc.want)
		}
	}
}

func TestReopenKeyedLogWithoutKey(t *testing.T) {
	path := tempLog(t)
	l := mustOpen(t, path, Options{Key: testKey})
	l.Log(Start{})
	mustClose(t, l)
	// The chain can be checked without the key, so appending is allowed;
	// the new records carry no mac, and a keyed verify then says so.
	l = mustOpen(t, path, Options{})
	l.Log(Exit{})
	mustClose(t, l)
	if n, _, err := VerifyFile(path, nil); err != nil || n != 2 {
		t.Errorf("VerifyFile without key = %d, %v", n, err)
	}
	if _, _, err := VerifyFile(path, testKey); err == nil || !strings.Contains(err.Error(), ":2: mac is missing") {
		t.Errorf("VerifyFile with key = %v, want line 2 mac is missing", err)
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	raw := []byte{0x00, 0x0a, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0x0a}
	cases := []struct {
		why     string
		content []byte
		want    []byte
		err     string
	}{
		{"a text key loses its newline", []byte("c2VjcmV0LWtleS0wMTIzNDU2Nzg5\n"), []byte("c2VjcmV0LWtleS0wMTIzNDU2Nzg5"), ""},
		{"binary keys are used byte for byte, newlines included", raw, raw, ""},
		{"a short key is refused", []byte("short\n"), nil, "at least 16"},
		{"an empty key is refused", nil, nil, "has 0 bytes"},
	}
	for i, tc := range cases {
		path := filepath.Join(dir, "key"+string(rune('a'+i)))
		if err := os.WriteFile(path, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadKey(path)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: LoadKey = %q, %v; want error containing %q", tc.why, got, err, tc.err)
			}
		case err != nil || !bytes.Equal(got, tc.want):
			t.Errorf("%s: LoadKey = %q, %v; want %q", tc.why, got, err, tc.want)
		}
	}
	if _, err := LoadKey(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("LoadKey of a missing file succeeded")
	}
	// Not a file of bytes: refused at once, never read without end.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxKeyFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ why, path, err string }{
		{"a device streams forever", "/dev/zero", "not a regular file"},
		{"a FIFO with no writer would block", fifo, "not a regular file"},
		{"a large file is no key", big, "larger than"},
	} {
		done := make(chan error, 1)
		go func() { _, err := LoadKey(tc.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: LoadKey(%s) = %v, want an error containing %q", tc.why, tc.path, err, tc.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: LoadKey(%s) hangs", tc.why, tc.path)
		}
	}
}
