package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxPathLen bounds a filesystem path (Linux's PATH_MAX).
const maxPathLen = 4096

// Filesystem is the policy's filesystem section with "~" expanded: what
// the worker may write on the host and what it must not see. Every path
// is absolute and cleaned, listed once, in file order.
type Filesystem struct {
	Write []string
	Hide  []string
}

// Filesystem returns the filesystem section with "~" and "~/x" expanded
// against home, the caller's home directory on the host (typically
// os.UserHomeDir). home is needed only when a path starts with "~"; then
// it must be an absolute path. The policy keeps the paths as written, so
// one file serves every user, and expanding does no I/O (nothing is
// resolved or checked on disk). It returns an error when a path needs home
// and home is not absolute, when a write or hide path expands to "/", and
// when a path is both written and hidden once expanded.
func (p *Policy) Filesystem(home string) (Filesystem, error) {
	var fs Filesystem
	var err error
	if fs.Write, err = expandPaths("filesystem.write", p.fsWrite, home); err != nil {
		return Filesystem{}, err
	}
	if fs.Hide, err = expandPaths("filesystem.hide", p.fsHide, home); err != nil {
		return Filesystem{}, err
	}
	for _, w := range fs.Write {
		if w == "/" {
			return Filesystem{}, errors.New("filesystem.write: ~ expands to /: the whole host cannot be writable")
		}
		if slices.Contains(fs.Hide, w) {
			return Filesystem{}, fmt.Errorf("filesystem: %s is both in write and in hide; a path is writable or hidden, not both", w)
		}
	}
	if slices.Contains(fs.Hide, "/") {
		return Filesystem{}, errors.New("filesystem.hide: ~ expands to /: the whole host cannot be hidden")
	}
	return fs, nil
}

func expandPaths(what string, raw []string, home string) ([]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(raw))
	for _, r := range raw {
		x := r
		if rest, ok := strings.CutPrefix(r, "~"); ok {
			if home == "" || !path.IsAbs(home) {
				return nil, fmt.Errorf("%s: %s needs the home directory, and %q is not an absolute path", what, r, home)
			}
			x = path.Join(path.Clean(home), rest)
		}
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out, nil
}

// filesystem parses the filesystem section.
func (ps *parser) filesystem(n *yaml.Node, p *Policy) {
	var write, hide []fsEntry
	ps.mapping(n, "filesystem", map[string]func(k, v *yaml.Node){
		"write": func(k, v *yaml.Node) { write = ps.fsPaths(v, "filesystem.write", true) },
		"hide":  func(k, v *yaml.Node) { hide = ps.fsPaths(v, "filesystem.hide", false) },
	})
	for _, h := range hide {
		if i := slices.IndexFunc(write, func(w fsEntry) bool { return w.path == h.path }); i >= 0 {
			ps.errf(h.node, "filesystem.hide: %s is also in filesystem.write (line %d); a path is writable or hidden, not both", h.path, write[i].node.Line)
		}
	}
	for _, w := range write {
		p.fsWrite = append(p.fsWrite, w.path)
	}
	for _, h := range hide {
		p.fsHide = append(p.fsHide, h.path)
	}
}

// fsEntry is one cleaned filesystem path and the node it came from.
type fsEntry struct {
	path string
	node *yaml.Node
}

// fsPaths parses filesystem.write or filesystem.hide: a list of paths,
// each absolute or starting with "~", cleaned, duplicates dropped.
func (ps *parser) fsPaths(n *yaml.Node, what string, write bool) []fsEntry {
	items, ok := ps.entries(n, what)
	if !ok {
		return nil
	}
	var out []fsEntry
	for i, it := range items {
		iw := what + "[" + strconv.Itoa(i) + "]"
		s, ok := ps.str(it, iw)
		if !ok {
			continue
		}
		c, err := cleanFSPath(s)
		if err != nil {
			ps.errf(it, "%s: %v", iw, err)
			continue
		}
		switch {
		case c == "/" && write:
			ps.errf(it, "%s: %q is the root: the whole host cannot be writable", iw, s)
			continue
		case c == "/":
			ps.errf(it, "%s: %q is the root: the whole host cannot be hidden", iw, s)
			continue
		case c == "~" && write:
			ps.warnf(it, "%s: ~ makes the whole home directory writable (~/.ssh, shell start-up files and all)", iw)
		}
		if !slices.ContainsFunc(out, func(e fsEntry) bool { return e.path == c }) {
			out = append(out, fsEntry{c, it})
		}
	}
	return out
}

// cleanFSPath checks and cleans a filesystem path as written: an absolute
// path, "~" or "~/rel" (home-relative, never above home).
func cleanFSPath(s string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", errors.New("path contains a NUL byte")
	}
	if len(s) > maxPathLen {
		return "", fmt.Errorf("path longer than %d bytes", maxPathLen)
	}
	if s == "~" {
		return "~", nil
	}
	if rest, ok := strings.CutPrefix(s, "~/"); ok {
		c := path.Clean(strings.TrimLeft(rest, "/"))
		switch {
		case c == ".":
			return "~", nil
		case c == ".." || strings.HasPrefix(c, "../"):
			return "", fmt.Errorf("%q leaves the home directory; write an absolute path", s)
		}
		return "~/" + c, nil
	}
	if strings.HasPrefix(s, "~") {
		return "", fmt.Errorf("%q: only ~ (your home) is expanded, not ~user; write an absolute path", s)
	}
	if !path.IsAbs(s) {
		return "", fmt.Errorf("%q is not an absolute path; start it with / or ~/", s)
	}
	return path.Clean(s), nil
}
