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

// TestLooksLikeUserSpaceLoader: programs that load and run another ELF
// program themselves, without an execve the audit or Landlock would see,
// are refused like ld.so when invoked directly. Found by running a
// non-allowlisted binary as `valgrind.bin --tool=none PROG` under
// --exec-allow /usr: Landlock allowed the valgrind tool, the audit logged
// only it, and PROG ran.
func TestLooksLikeUserSpaceLoader(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
		why  string
	}{
		{"/usr/libexec/valgrind/none-amd64-linux", true, "valgrind's tool (Debian, Fedora)"},
		{"/usr/libexec/valgrind/memcheck-amd64-linux", true, "valgrind's default tool"},
		{"/usr/lib/x86_64-linux-gnu/valgrind/memcheck-amd64-linux", true, "valgrind's tool, multiarch"},
		{"/usr/lib/valgrind/lackey-arm64-linux", true, "valgrind's tool, older layout"},
		{"/usr/bin/qemu-x86_64", true, "qemu user mode runs any program of its architecture"},
		{"/usr/bin/qemu-aarch64-static", true, "qemu user mode, static build"},
		{"/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so", false, "a preload library, not a program"},
		{"/usr/libexec/valgrind/default.supp", false, "a data file"},
		{"/usr/bin/qemu-system-x86_64", false, "a whole-machine emulator runs a disk image, not a host program"},
		{"/usr/bin/qemu-img", false, "an image tool"},
		{"/usr/bin/valgrind-di-server", false, "not under a valgrind directory"},
		{"/usr/bin/true", false, "an ordinary program"},
	} {
		if got := looksLikeUserSpaceLoader(tc.path); got != tc.want {
			t.Errorf("%s: %v, want %v (%s)", tc.path, got, tc.want, tc.why)
		}
	}
}
