//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runMain runs one command line with a time bound, so that a command that
// would block (reading a FIFO) fails the test instead of hanging it.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(args, strings.NewReader(""), &out, &errb) }()
	select {
	case code = <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("nsgate %s still running after 5s", strings.Join(args, " "))
	}
	return code, out.String(), errb.String()
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	t.Setenv("HOME", home)
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "policy.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	good := write("good.yaml", `version: 1
allow:
  - {cidr: 0.0.0.0/0, ports: [443]}
  - {cidr: 10.0.2.2/32, ports: [80]}
filesystem:
  write: ["~/proj"]
  hide: ["~/.ssh", /etc/shadow]
`)
	tests := []struct {
		why    string
		args   []string
		code   int
		stdout []string // substrings
		stderr []string
	}{
		{
			why:  "a good policy: summary, warnings, filesystem expanded for the caller",
			args: []string{"check", good},
			code: 0,
			stdout: []string{
				"filesystem:\n  write:\n    - \"~/proj\"\n  hide:\n    - \"~/.ssh\"\n    - \"/etc/shadow\"\n",
				"# the gateway's own addresses (10.0.2.0/24, fd00::/64, 198.18.0.0/15, fd6e:7367:6174::/64) always denied: no rule opens them\n",
				"# filesystem write: " + home + "/proj\n",
				"# filesystem hide: " + home + "/.ssh\n# filesystem hide: /etc/shadow\n",
			},
			stderr: []string{
				"warning: " + good + ":3:12: allow[0].cidr: 0.0.0.0/0 does not open the special ranges inside it (0.0.0.0/8, 10.0.0.0/8",
				"warning: " + good + ":4:12: allow[1].cidr: 10.0.2.2/32 overlaps 10.0.2.0/24, the gateway's own addresses: flows there stay denied",
			},
		},
		{
			why:    "a hexadecimal port is refused at its place",
			args:   []string{"check", write("hex.yaml", "version: 1\nallow:\n  - {host: a.test, ports: [0x1BB]}\n")},
			code:   exitUsage,
			stderr: []string{"hex.yaml:3:28: allow[0].ports[0]: port must be a decimal number 1-65535, not \"0x1BB\"\n"},
		},
		{
			why:    "a FIFO is refused at once",
			args:   []string{"check", fifo},
			code:   exitUsage,
			stderr: []string{"nsgate: read policy " + fifo + ": a named pipe (FIFO), not a regular file"},
		},
		{
			why:    "/dev/zero is refused at once",
			args:   []string{"check", "/dev/zero"},
			code:   exitUsage,
			stderr: []string{"nsgate: read policy /dev/zero: a character device, not a regular file"},
		},
		{
			why:    "explain: a broad cidr does not open a private address",
			args:   []string{"explain", "--policy", good, "10.1.2.3:443"},
			code:   1,
			stdout: []string{"deny rule=builtin:special-range reason=10.1.2.3 is in 10.0.0.0/8 (private); allow it with a cidr rule inside that range or dns.hosts (allow[0] 0.0.0.0/0 is broader than the range and does not open it)\n"},
		},
		{
			why:    "explain: a rule inside the gateway's subnet does not open the gateway",
			args:   []string{"explain", "--policy", good, "10.0.2.2:80"},
			code:   1,
			stdout: []string{"deny rule=builtin:special-range reason=10.0.2.2 is in 10.0.2.0/24 (the gateway's own addresses)"},
		},
		{
			why:    "explain: a fake-IP pool address is never dialled",
			args:   []string{"explain", "--policy", good, "198.18.0.5:443"},
			code:   1,
			stdout: []string{"deny rule=builtin:special-range reason=198.18.0.5 is in 198.18.0.0/15 (the gateway's own addresses)"},
		},
		{
			why:    "explain: the public internet is allowed",
			args:   []string{"explain", "--policy", good, "203.0.113.9:443"},
			code:   0,
			stdout: []string{"allow rule=allow[0]"},
		},
		{
			why:    "explain: a FIFO is refused at once",
			args:   []string{"explain", "--policy", fifo, "203.0.113.9:443"},
			code:   exitUsage,
			stderr: []string{"a named pipe (FIFO), not a regular file"},
		},
		{
			why:    "explain without a policy denies",
			args:   []string{"explain", "203.0.113.9:443"},
			code:   1,
			stdout: []string{"deny rule=default"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			if tt.args[1] == "/dev/zero" {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip(err)
				}
			}
			t.Setenv("NSGATE_POLICY", "")
			code, stdout, stderr := runMain(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
