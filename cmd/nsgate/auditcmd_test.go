//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
)

// writeLog writes one run to a new log in dir: start, a record, and exit
// when closed. It returns the log's path and head.
func writeLog(t *testing.T, dir string, key []byte, closed bool) (string, string) {
	t.Helper()
	path := filepath.Join(dir, "audit.jsonl")
	l, err := audit.Open(path, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(audit.Start{Version: "t"})
	l.Log(audit.Exec{Action: "deny", Path: "/bin/sh"})
	if closed {
		l.Log(audit.Exit{Code: 0})
	}
	head, err := l.Close()
	if err != nil {
		t.Fatal(err)
	}
	return path, head
}

// TestAuditVerifyOutput: the exit status and the lines of `nsgate audit
// verify` for what the chain alone cannot tell.
func TestAuditVerifyOutput(t *testing.T) {
	key := []byte("auditcmd-test-key-0123456789")
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, key, 0o600)
	cases := []struct {
		name   string
		why    string
		setup  func(t *testing.T, dir string) []string // the arguments after "audit verify"
		code   int
		stdout []string
		stderr []string
	}{
		{"good", "a closed run with its head file: ok and anchored, nothing else",
			func(t *testing.T, dir string) []string { p, _ := writeLog(t, dir, nil, true); return []string{p} },
			0, []string{"ok: 3 records, head ", "anchored: the head matches "}, nil},
		{"not closed", "no exit record: still ok (the records are authentic), with a warning",
			func(t *testing.T, dir string) []string { p, _ := writeLog(t, dir, nil, false); return []string{p} },
			0, []string{"ok: 2 records, head "}, []string{"warning: ", ": not closed: the last run (from line 1) has no exit record"}},
		{"macs not checked", "a keyed log without --key: says the MACs were not checked",
			func(t *testing.T, dir string) []string { p, _ := writeLog(t, dir, key, true); return []string{p} },
			0, []string{"ok: 3 records"}, []string{"3 of 3 records carry a MAC, but no --key was given: MACs not checked (only the hash chain was)"}},
		{"macs checked", "with --key, the MACs are checked and it says so",
			func(t *testing.T, dir string) []string {
				p, _ := writeLog(t, dir, key, true)
				return []string{"--key", keyFile, p}
			},
			0, []string{"ok: 3 records", "MACs checked: all 3 records"}, nil},
		{"truncated", "the last record removed: the head file catches it (exit 1, FILE:LINE)",
			func(t *testing.T, dir string) []string {
				p, _ := writeLog(t, dir, nil, true)
				b, _ := os.ReadFile(p)
				lines := bytes.SplitAfter(b, []byte("\n"))
				os.WriteFile(p, bytes.Join(lines[:2], nil), 0o600)
				return []string{p}
			},
			1, nil, []string{"audit.jsonl:2: no record has the head", "records were removed from the end"}},
		{"torn", "a torn last line: exit 1 and what to do",
			func(t *testing.T, dir string) []string {
				p, _ := writeLog(t, dir, nil, true)
				b, _ := os.ReadFile(p)
				os.WriteFile(p, b[:len(b)-5], 0o600)
				return []string{p}
			},
			1, nil, []string{"audit.jsonl:3: torn last record (no newline): the log was cut mid-write", "truncate -s "}},
		{"--head", "--head must match",
			func(t *testing.T, dir string) []string {
				p, _ := writeLog(t, dir, nil, true)
				return []string{"--head", strings.Repeat("ab", 32), p}
			},
			1, nil, []string{"audit.jsonl:3: head ", "does not match the anchored head abab"}},
		{"--head bad", "a --head that is no head is a usage error",
			func(t *testing.T, dir string) []string {
				p, _ := writeLog(t, dir, nil, true)
				return []string{"--head", "xyz", p}
			},
			2, nil, []string{"--head \"xyz\": want 64 lower-case hex digits"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"audit", "verify"}, tc.setup(t, t.TempDir())...)
			code, stdout, stderr := runMain(t, args...)
			if code != tc.code {
				t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", tc.why, code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("%s: stdout %q lacks %q", tc.why, stdout, w)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("%s: stderr %q lacks %q", tc.why, stderr, w)
				}
			}
			if tc.stderr == nil && stderr != "" {
				t.Errorf("%s: unexpected stderr %q", tc.why, stderr)
			}
		})
	}
}

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestAuditIntactEndsAsBefore: with the log intact, the run ends with the
// head line and the worker's status, and the worker is left alone.
func TestAuditIntactEndsAsBefore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	l, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	w := watchAudit(l, path)
	w.worker(func() { close(killed) })
	var stderr bytes.Buffer
	e := env{stdout: &bytes.Buffer{}, stderr: &stderr}
	if code := w.finish(e, 3); code != 3 || !strings.HasPrefix(stderr.String(), "nsgate: audit head ") {
		t.Errorf("intact log: status %d, stderr %q; want 3 and the head", code, stderr.String())
	}
	select {
	case <-killed:
		t.Error("the worker was ended though the log did not fail")
	default:
	}
}

// TestAuditWatchEndsTheWorker: a log that fails ends the worker at once, or
// when it is attached if the log failed before; the run ends with one line
// naming the cause and status 125.
func TestAuditWatchEndsTheWorker(t *testing.T) {
	r, wpipe, _ := os.Pipe()
	r.Close() // a write to wpipe now fails with EPIPE
	defer wpipe.Close()
	old := os.Stderr
	os.Stderr = wpipe
	l, err := audit.Open("-", audit.Options{Delay: -1})
	os.Stderr = old
	if err != nil {
		t.Fatal(err)
	}
	w := watchAudit(l, "-")
	killed := make(chan struct{})
	w.worker(func() { close(killed) })
	l.Log(audit.Start{})
	select {
	case <-killed:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker was not ended when the log failed")
	}
	var stderr bytes.Buffer
	code := w.finish(env{stdout: &bytes.Buffer{}, stderr: &stderr}, 137)
	want := "nsgate: audit log failed: write stderr: broken pipe; the worker was stopped\n"
	if code != exitFailure || stderr.String() != want {
		t.Errorf("status %d, stderr %q; want %d and %q", code, stderr.String(), exitFailure, want)
	}
	// Attached after the failure: ended at once.
	again := make(chan struct{})
	w2 := &auditWatch{log: l}
	w2.worker(func() { close(again) })
	select {
	case <-again:
	default:
		t.Error("a worker attached after the failure was not ended")
	}
}

// TestExecAuditRefusesOnceFailed: with the log failed, an exec the server
// would let through is stopped by ending its caller.
func TestExecAuditRefusesOnceFailed(t *testing.T) {
	r, wpipe, _ := os.Pipe()
	r.Close()
	defer wpipe.Close()
	old := os.Stderr
	os.Stderr = wpipe
	l, err := audit.Open("-", audit.Options{Delay: -1})
	os.Stderr = old
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := newExecAudit(l, guard.Plan{})
	caller := exec.Command("sleep", "30")
	if err := caller.Start(); err != nil {
		t.Skipf("no sleep(1): %v", err)
	}
	defer caller.Process.Kill()
	a.record(guard.ExecEvent{Allow: true, Path: "/usr/bin/true", PID: caller.Process.Pid})
	// The log has not failed yet (nothing was written): the caller lives.
	if err := caller.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the caller was ended while the log was intact: %v", err)
	}
	select {
	case <-l.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the log did not fail")
	}
	a.record(guard.ExecEvent{Allow: true, Path: "/usr/bin/true", PID: caller.Process.Pid})
	done := make(chan error, 1)
	go func() { done <- caller.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the caller ended with %v; want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an exec was let through after the audit log failed")
	}
}
