package guard

import (
	"slices"
	"testing"
)

func TestLooksLikeELFInterpreter(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
		why  string
	}{
		{"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", true, "glibc on amd64"},
		{"/lib/ld-linux-aarch64.so.1", true, "glibc on arm64"},
		{"/lib/x86_64-linux-gnu/ld-2.31.so", true, "older glibc file name"},
		{"/lib/ld-musl-x86_64.so.1", true, "musl"},
		{"/lib64/ld64.so.2", true, "ppc64 glibc"},
		{"/usr/bin/ld.so", true, "glibc's ld.so helper"},
		{"/usr/bin/ld", false, "the linker is an ordinary program"},
		{"/usr/bin/ldd", false, "a shell script, not a loader"},
		{"/usr/lib/libc.so.6", false, "a library"},
		{"/usr/bin/old-ld-thing", false, "only the base name counts"},
	} {
		if got := looksLikeELFInterpreter(tc.path); got != tc.want {
			t.Errorf("%s: %v, want %v (%s)", tc.path, got, tc.want, tc.why)
		}
	}
}

func TestIsAnonTarget(t *testing.T) {
	for _, tc := range []struct {
		link string
		want bool
		why  string
	}{
		{"/usr/bin/true", false, "an ordinary file"},
		{"/memfd:x (deleted)", true, "a memfd"},
		{"/memfd:x", true, "a memfd, whatever its suffix"},
		{"anon_inode:[eventfd]", true, "an anonymous inode"},
		{"/tmp/#123 (deleted)", true, "an O_TMPFILE or deleted file"},
		{"socket:[123]", true, "a socket"},
	} {
		if got := isAnonTarget(tc.link); got != tc.want {
			t.Errorf("%q: %v, want %v (%s)", tc.link, got, tc.want, tc.why)
		}
	}
}

func TestSplitPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []string
		why  string
	}{
		{"/usr/bin/ls", []string{"usr", "bin", "ls"}, "absolute"},
		{"//usr/./bin//ls/", []string{"usr", "bin", "ls"}, "empty and . components go"},
		{"../x", []string{"..", "x"}, ".. stays: the walker resolves it"},
		{"/", nil, "the root has no components"},
		{"", nil, "empty"},
	} {
		if got := splitPath(tc.path); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q (%s)", tc.path, got, tc.want, tc.why)
		}
	}
}
