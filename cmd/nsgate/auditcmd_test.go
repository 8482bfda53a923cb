//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/audit"
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
