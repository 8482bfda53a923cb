package hostpath

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, p *Path) string {
	t.Helper()
	f, err := p.OpenRead()
	if err != nil {
		t.Fatalf("OpenRead %s: %v", p.Given, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPlainAndLinkedInputs(t *testing.T) {
	d := t.TempDir()
	write(t, filepath.Join(d, "pol"), "one")
	if err := os.Symlink("pol", filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	c := Default()
	for _, name := range []string{"pol", "link"} {
		p, err := c.Resolve(filepath.Join(d, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := readAll(t, p); got != "one" {
			t.Errorf("%s read %q, want one", name, got)
		}
		if p.Real != filepath.Join(d, "pol") {
			t.Errorf("%s: Real %s, want %s", name, p.Real, filepath.Join(d, "pol"))
		}
		p.Close()
	}
}

func TestInsideWritableTreeRefused(t *testing.T) {
	d := t.TempDir()
	rw := filepath.Join(d, "rw")
	safe := filepath.Join(d, "safe")
	os.Mkdir(rw, 0o700)
	os.Mkdir(safe, 0o700)
	write(t, filepath.Join(safe, "pol"), "real")
	// the file is a link inside the tree, and a folder on the path is.
	os.Symlink(filepath.Join(safe, "pol"), filepath.Join(rw, "pol"))
	os.Symlink(safe, filepath.Join(rw, "dir"))
	c, err := New(rw)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(rw, "pol"), filepath.Join(rw, "dir", "pol"), filepath.Join(rw, "new")} {
		if _, err := c.Resolve(p); err == nil || !strings.Contains(err.Error(), "which the worker may write") {
			t.Errorf("Resolve %s: %v, want refused as inside %s", p, err, rw)
		}
	}
	// A link outside the tree that points into it is refused too.
	os.Symlink(filepath.Join(rw, "x"), filepath.Join(safe, "into"))
	if _, err := c.ResolveOutput(filepath.Join(safe, "into")); err == nil {
		t.Error("an output whose last component is a link was accepted")
	}
	if p, err := c.Resolve(filepath.Join(safe, "pol")); err != nil {
		t.Errorf("a plain file outside the tree: %v", err)
	} else {
		p.Close()
	}
	// A tree that does not exist yet is compared by name.
	c2, _ := New(filepath.Join(d, "later"))
	if _, err := c2.ResolveOutput(filepath.Join(d, "later")); err == nil {
		t.Error("an output named like a writable tree not made yet was accepted")
	}
}

func TestAddWritableChecksAgain(t *testing.T) {
	d := t.TempDir()
	write(t, filepath.Join(d, "pol"), "x")
	c := Default()
	p, err := c.Resolve(filepath.Join(d, "pol"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := c.AddWritable(filepath.Join(t.TempDir(), "elsewhere")); err != nil {
		t.Errorf("an unrelated tree: %v", err)
	}
	if err := c.AddWritable(d); err == nil {
		t.Error("a tree holding a resolved path was added without an error")
	}
}

func TestOutputLinkRefusedTargetUnchanged(t *testing.T) {
	d := t.TempDir()
	victim := filepath.Join(d, "authorized_keys")
	write(t, victim, "ssh-ed25519 good\n")
	os.Symlink(victim, filepath.Join(d, "capture.pcap"))
	c := Default()
	if _, err := c.ResolveOutput(filepath.Join(d, "capture.pcap")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("ResolveOutput through a planted link: %v, want refused", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "ssh-ed25519 good\n" {
		t.Errorf("the link's target changed: %q", b)
	}
}

func TestOutputs(t *testing.T) {
	d := t.TempDir()
	c := Default()
	// new: created exclusively
	p, err := c.ResolveOutput(filepath.Join(d, "new.log"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.OpenOutput(os.O_WRONLY, 0o600, Regular)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("a")
	f.Close()
	// existing own regular file: opened, truncated on asking
	q, err := c.ResolveOutput(filepath.Join(d, "new.log"))
	if err != nil {
		t.Fatal(err)
	}
	f, err = q.OpenOutput(os.O_WRONLY|os.O_TRUNC, 0o600, Regular)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(d, "new.log")); len(b) != 0 {
		t.Errorf("O_TRUNC left %q", b)
	}
	// a link swapped in after the look: refused, target unchanged
	victim := filepath.Join(d, "victim")
	write(t, victim, "keep")
	r, err := c.ResolveOutput(filepath.Join(d, "swap"))
	if err != nil {
		t.Fatal(err)
	}
	os.Symlink(victim, filepath.Join(d, "swap"))
	if _, err := r.OpenOutput(os.O_WRONLY|os.O_TRUNC, 0o600, Regular); err == nil {
		t.Error("a link made after the look was written through")
	}
	// another file renamed over the existing one: refused
	write(t, filepath.Join(d, "old"), "o")
	s, err := c.ResolveOutput(filepath.Join(d, "old"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "other"), "p")
	os.Rename(filepath.Join(d, "other"), filepath.Join(d, "old"))
	if _, err := s.OpenOutput(os.O_WRONLY|os.O_TRUNC, 0o600, Regular); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("another file in its place: %v, want refused", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim changed: %q", b)
	}
	// a directory is not a regular file
	os.Mkdir(filepath.Join(d, "dir"), 0o700)
	u, err := c.ResolveOutput(filepath.Join(d, "dir"))
	if err == nil {
		if _, err := u.OpenOutput(os.O_WRONLY, 0o600, Regular); err == nil {
			t.Error("a directory was opened as an output")
		}
	}
}

// The folder stays open: renaming it away and putting a link in its
// place changes nothing for later opens (a reload).
func TestReadThroughHeldFolder(t *testing.T) {
	d := t.TempDir()
	os.Mkdir(filepath.Join(d, "etc"), 0o700)
	write(t, filepath.Join(d, "etc", "pol"), "old")
	os.Mkdir(filepath.Join(d, "evil"), 0o700)
	write(t, filepath.Join(d, "evil", "pol"), "evil")
	c := Default()
	p, err := c.Resolve(filepath.Join(d, "etc", "pol"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	os.Rename(filepath.Join(d, "etc"), filepath.Join(d, "moved"))
	os.Symlink(filepath.Join(d, "evil"), filepath.Join(d, "etc"))
	if got := readAll(t, p); got != "old" {
		t.Errorf("read %q after the folder's name was re-pointed, want old", got)
	}
	// A link put in the file's own place is not followed.
	os.Rename(filepath.Join(d, "moved", "pol"), filepath.Join(d, "moved", "pol.bak"))
	os.Symlink(filepath.Join(d, "evil", "pol"), filepath.Join(d, "moved", "pol"))
	if f, err := p.OpenRead(); err == nil {
		b, _ := io.ReadAll(f)
		f.Close()
		t.Errorf("read %q through a link put in the file's place", b)
	}
}

func TestForeignLinkRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make a link owned by another user")
	}
	d := t.TempDir()
	write(t, filepath.Join(d, "pol"), "x")
	l := filepath.Join(d, "link")
	os.Symlink("pol", l)
	if err := unix.Lchown(l, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := Default().Resolve(l); err == nil || !strings.Contains(err.Error(), "owned by uid 12345") {
		t.Errorf("a link owned by uid 12345: %v, want refused", err)
	}
}

func TestLoopRefused(t *testing.T) {
	d := t.TempDir()
	os.Symlink("b", filepath.Join(d, "a"))
	os.Symlink("a", filepath.Join(d, "b"))
	if _, err := Default().Resolve(filepath.Join(d, "a")); err == nil {
		t.Error("a loop of links resolved")
	}

}
