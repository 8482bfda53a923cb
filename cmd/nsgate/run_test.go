package main

import (
	"strings"
	"testing"
)

// TestRunAuditFlags: --audit is the log, a second --audit its copy; a
// third, an empty one, or the same stream twice is refused, and the human
// lines stay off whenever the records are on stderr.
func TestRunAuditFlags(t *testing.T) {
	for _, tc := range []struct {
		audit          []string
		err            string
		log, copy      string
		recordsOnStder bool
	}{
		{audit: nil},
		{audit: []string{"a.jsonl"}, log: "a.jsonl"},
		{audit: []string{"-"}, log: "-", recordsOnStder: true},
		{audit: []string{"a.jsonl", "/dev/stdout"}, log: "a.jsonl", copy: "/dev/stdout"},
		{audit: []string{"a.jsonl", "-"}, log: "a.jsonl", copy: "-", recordsOnStder: true},
		{audit: []string{"a.jsonl", "/dev/stderr"}, log: "a.jsonl", copy: "/dev/stderr", recordsOnStder: true},
		{audit: []string{"a", "b", "c"}, err: "at most twice"},
		{audit: []string{"a.jsonl", ""}, err: "empty path"},
		{audit: []string{"-", "/dev/stderr"}, err: "given twice"},
		{audit: []string{"a.jsonl", "./a.jsonl"}, err: "given twice"},
	} {
		f := runFlags{audit: tc.audit, mtu: 65520, maxFlows: 1, execGuard: "strict"}
		err := f.validate()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--audit %q: %v, want %q", tc.audit, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("--audit %q: %v", tc.audit, err)
			continue
		}
		if f.auditAt(0) != tc.log || f.auditAt(1) != tc.copy || f.auditOnStderr() != tc.recordsOnStder {
			t.Errorf("--audit %q: log %q copy %q on stderr %v, want %q %q %v", tc.audit,
				f.auditAt(0), f.auditAt(1), f.auditOnStderr(), tc.log, tc.copy, tc.recordsOnStder)
		}
	}
}

func TestScratchSizeFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // worker.Config.ScratchSize
		err  string
	}{
		{in: "", want: 0},
		{in: "2G", want: 2 << 30},
		{in: "512M", want: 512 << 20},
		{in: "8MiB", want: 8 << 20},
		{in: "1048576", want: 1 << 20},
		{in: "64k", err: "at least 1M"},
		{in: "0", want: -1},
		{in: "-1G", err: "a number of bytes"},
		{in: "G", err: "a number of bytes"},
		{in: "2X", err: "a number of bytes"},
		{in: "2 G", err: "a number of bytes"},
		{in: "99999999999T", err: "a number of bytes"},
	} {
		f := runFlags{mtu: 65520, maxFlows: 1, execGuard: "strict", scratchSize: tc.in}
		err := f.validate()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--scratch-size %q: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("--scratch-size %q: %v", tc.in, err)
			continue
		}
		if got := f.scratchBytes(); got != tc.want {
			t.Errorf("--scratch-size %q: %d, want %d", tc.in, got, tc.want)
		}
	}
}
