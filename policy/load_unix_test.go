//go:build unix

package policy

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadSpecialFiles: a FIFO without a writer and a device that never
// ends (/dev/zero) are refused at once, never read.
func TestLoadSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "policy.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		why  string
		path string
		want string
	}{
		{"a FIFO with no writer would block a plain open", fifo, "read policy " + fifo + ": a named pipe (FIFO), not a regular file"},
		{"/dev/zero would be read forever", "/dev/zero", "read policy /dev/zero: a character device, not a regular file"},
		{"/dev/null is not a policy either", "/dev/null", "read policy /dev/null: a character device, not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			if _, err := os.Lstat(tt.path); err != nil {
				t.Skipf("%s: %v", tt.path, err)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := Load(tt.path)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Load(%s) = %v, want an error containing %q", tt.path, err, tt.want)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("Load(%s) took %v", tt.path, d)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Load(%s) still running after 5s", tt.path)
			}
		})
	}
}
