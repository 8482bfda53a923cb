package worker

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/policy"
)

func mustParse(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReloadSaysFixedSections: a reload whose exec.allow differs from the
// one the worker started with is said, as one whose filesystem differs is:
// a user who removed a program from exec.allow and sent SIGHUP must not
// believe the worker can no longer run it (the exec guard is fixed at
// start). A reload that changes only the network rules says nothing.
func TestReloadSaysFixedSections(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	start := mustParse(t, "version: 1\nexec:\n  allow: [/usr/bin/curl]\n")
	for _, tc := range []struct {
		name, src, want string
	}{
		{"network only", "version: 1\nexec:\n  allow: [/usr/bin/curl]\nallow:\n  - {cidr: 203.0.113.0/24, ports: [443]}\n", ""},
		{"exec narrowed", "version: 1\n", "exec.allow"},
		{"exec widened", "version: 1\nexec:\n  allow: [/usr/bin/curl, /usr/bin/wget]\n", "exec.allow"},
		{"filesystem", "version: 1\nexec:\n  allow: [/usr/bin/curl]\nfilesystem:\n  hide: [/etc/hostname]\n", "filesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := &run{stderr: &buf}
			r.setFixed(start, policy.Filesystem{})
			r.onReload(mustParse(t, tc.src))
			got := buf.String()
			if tc.want == "" && got != "" {
				t.Errorf("a network-only reload said %q", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("stderr %q does not name %s", got, tc.want)
			}
		})
	}
}
