package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "version: 1\nallow:\n  - {cidr: 203.0.113.0/24, ports: [443]}\n")
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 2*MaxFileSize); err != nil { // sparse
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		why  string
		path string
		want string // "" loads; else the error contains it
	}{
		{"a regular file loads", good, ""},
		{"a symbolic link to a regular file loads", link, ""},
		{"a missing file is a read error", filepath.Join(dir, "none.yaml"), "read policy: open " + dir + "/none.yaml: no such file or directory"},
		{"a directory is refused by name", dir, "read policy " + dir + ": a directory, not a regular file; give the path of a policy file"},
		{"an over-large file is refused before reading", big, "read policy " + big + ": 2097152 bytes, larger than the limit of 1048576 bytes (1 MiB)"},
		{"a bad file gives located errors", write("bad.yaml", "version: 1\nallow:\n  - {cidr: 10.0.0.1/8}\n"), "bad.yaml:3:12: allow[0].cidr: 10.0.0.1/8 is not canonical"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			p, err := Load(tt.path)
			if tt.want == "" {
				if err != nil || p == nil {
					t.Fatalf("Load = %v, %v", p, err)
				}
				if d := p.Decide(Flow{Proto: TCP, Addr: ip("203.0.113.9"), Port: 443}); d.Verdict != Allow {
					t.Errorf("loaded policy decides %v", d)
				}
				return
			}
			if err == nil || p != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load(%s) = %v, %v; want an error containing %q", tt.path, p != nil, err, tt.want)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "none.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v is not fs.ErrNotExist", err)
	}
	var errs *Errors
	if _, err := Load(filepath.Join(dir, "bad.yaml")); !errors.As(err, &errs) {
		t.Errorf("bad file: %T is not *Errors", err)
	}
}
