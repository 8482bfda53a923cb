// Package hostpath decides, once at start, every host path nsgate opens,
// without following anything the worker could have written.
//
// nsgate runs with the caller's rights on the host, and the worker may
// write some of the host's trees (--rw, --home, the policy's
// filesystem.write). A name that passes through such a tree can be
// re-pointed by the worker between nsgate's look and nsgate's open, or
// between one run and the next. So every path is resolved here by a walk
// of descriptors from the root, one component at a time, each opened with
// O_NOFOLLOW:
//
//   - a component that lies inside a tree the worker may write (compared
//     by device and inode, and by name for a tree not made yet) is refused;
//   - a symbolic link is followed only when it is owned by the caller or
//     root and does not itself lie in such a tree; its target is read once,
//     here, and the walk starts again from the root on the new path;
//   - an output's last component is never followed: a link there is
//     refused (a worker of an earlier run may have left it);
//   - the folder that holds the file stays open (Path), and every later
//     open goes through that descriptor, never through the name again: a
//     reload of the policy, the audit head file.
//
// Outputs are then created with O_CREAT|O_EXCL|O_NOFOLLOW, or, when they
// existed at resolve time, opened with O_NOFOLLOW and checked to be what
// they were: the same device and inode, of the kind asked (a regular file,
// or a FIFO for a log), owned by the caller.
package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the links one walk follows (Linux's own is 40).
const maxLinks = 40

// fileID names a file: its device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), uint64(st.Ino)} }

// root is a tree the worker may write.
type root struct {
	path string // absolute, cleaned, as the operator gave it
	real string // its target when it exists ("" if not)
	id   fileID
	ok   bool // id is set (the tree exists)
}

// Checker resolves paths against the trees the worker may write. Its
// methods are safe for concurrent use.
type Checker struct {
	uid int

	mu       sync.Mutex
	roots    []root
	resolved []*Path
}

// New returns a Checker for a worker that may write the given trees (files
// or folders; "" entries are skipped). A tree that does not exist yet is
// compared by name.
func New(writable ...string) (*Checker, error) {
	c := &Checker{uid: os.Getuid()}
	if err := c.AddWritable(writable...); err != nil {
		return nil, err
	}
	return c, nil
}

// Default is a Checker with no writable trees: links owned by other users
// and links in an output's last component are still refused.
func Default() *Checker { return &Checker{uid: os.Getuid()} }

// AddWritable adds trees the worker may write (the policy's
// filesystem.write, known once the policy is read) and checks every path
// resolved so far again: it returns an error naming the first that lies
// inside one of them.
func (c *Checker) AddWritable(paths ...string) error {
	var add []root
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("writable tree %s: %w", p, err)
		}
		r := root{path: abs}
		var st unix.Stat_t
		if err := unix.Stat(abs, &st); err == nil {
			r.id, r.ok = idOf(&st), true
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				r.real = real
			}
		}
		add = append(add, r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roots = append(c.roots, add...)
	for _, p := range c.resolved {
		if r, ok := c.insideLocked(p.chain, p.names); ok {
			return p.insideErr(r)
		}
	}
	return nil
}

// inside says whether a walk that visited ids and names (the absolute
// names of what it visited) entered a writable tree, and which.
func (c *Checker) insideLocked(ids []fileID, names []string) (string, bool) {
	for _, r := range c.roots {
		if r.ok {
			for _, id := range ids {
				if id == r.id {
					return r.path, true
				}
			}
		}
		for _, n := range names {
			if under(n, r.path) || (r.real != "" && under(n, r.real)) {
				return r.path, true
			}
		}
	}
	return "", false
}

// under says whether name is dir or lies below it (both absolute, clean).
func under(name, dir string) bool {
	return name == dir || dir == "/" || strings.HasPrefix(name, dir+"/")
}

// Path is a host path resolved by a Checker: the folder that holds it is
// open, and every open goes through that descriptor.
type Path struct {
	// Given is the path as the operator gave it (for messages).
	Given string
	// Real is the absolute path with every link resolved.
	Real string
	// Name is the last component, opened in the folder.
	Name string
	// Existed says the file was there when the path was resolved; id is
	// then its device and inode.
	Existed bool
	id      fileID
	mode    uint32

	c     *Checker
	mu    sync.Mutex
	dir   int // the folder's descriptor (O_PATH on Linux); -1 once closed
	chain []fileID
	names []string
}

func (p *Path) insideErr(tree string) error {
	return fmt.Errorf("%s (%s) lies inside %s, which the worker may write: it could re-point it; give a path outside the worker's writable trees", p.Given, p.Real, tree)
}

// IsFIFO says the file was a named pipe when the path was resolved.
func (p *Path) IsFIFO() bool { return p.Existed && p.mode&unix.S_IFMT == unix.S_IFIFO }

// Close lets go of the folder.
func (p *Path) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir < 0 {
		return nil
	}
	err := unix.Close(p.dir)
	p.dir = -1
	return err
}

// Dir returns a duplicate of the folder's descriptor, which the caller
// closes: for files kept beside this one (the audit log's head file).
func (p *Path) Dir() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir < 0 {
		return -1, errors.New("hostpath: closed")
	}
	return unix.FcntlInt(uintptr(p.dir), unix.F_DUPFD_CLOEXEC, 0)
}

// Resolve resolves an input (the policy, the audit key): its last
// component may be a link, followed under the same rules as a folder.
func (c *Checker) Resolve(path string) (*Path, error) { return c.resolve(path, true) }

// ResolveOutput resolves an output (a log, a capture, a learned file): a
// link in its last component is refused.
func (c *Checker) ResolveOutput(path string) (*Path, error) { return c.resolve(path, false) }

func (c *Checker) resolve(given string, followLast bool) (*Path, error) {
	if given == "" {
		return nil, errors.New("empty path")
	}
	abs, err := filepath.Abs(given)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", given, err)
	}
	for links := 0; ; {
		p, next, err := c.walk(given, abs, followLast)
		if err != nil || p != nil {
			return p, err
		}
		if links++; links > maxLinks {
			return nil, &os.PathError{Op: "resolve", Path: given, Err: syscall.ELOOP}
		}
		abs = next
	}
}

// walk walks abs once from the root. It returns the Path, or the path to
// walk again after a link, or an error.
func (c *Checker) walk(given, abs string, followLast bool) (*Path, string, error) {
	comps := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	if abs == "/" {
		return nil, "", fmt.Errorf("%s: the root folder is not a file", given)
	}
	dir, err := unix.Open("/", pathFlag|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", &os.PathError{Op: "open", Path: "/", Err: err}
	}
	keep := false
	defer func() {
		if !keep {
			unix.Close(dir)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return nil, "", &os.PathError{Op: "stat", Path: "/", Err: err}
	}
	chain, names := []fileID{idOf(&st)}, []string{"/"}
	cur := "/"
	check := func(what string) error {
		c.mu.Lock()
		tree, in := c.insideLocked(chain, names)
		c.mu.Unlock()
		if in {
			return fmt.Errorf("%s: %s lies inside %s, which the worker may write: it could re-point it; give a path outside the worker's writable trees", given, what, tree)
		}
		return nil
	}
	if err := check("/"); err != nil {
		return nil, "", err
	}
	for i, comp := range comps {
		last := i == len(comps)-1
		name := filepath.Join(cur, comp)
		fd, err := unix.Openat(dir, comp, pathFlag|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && last {
			names = append(names, name)
			if err := check(name); err != nil {
				return nil, "", err
			}
			keep = true
			p := &Path{Given: given, Real: name, Name: comp, c: c, dir: dir, chain: chain, names: names}
			c.remember(p)
			return p, "", nil
		}
		if err != nil && !errors.Is(err, unix.ELOOP) {
			return nil, "", &os.PathError{Op: "open", Path: name, Err: err}
		}
		if err != nil { // ELOOP without O_PATH: a link
			fd = -1
			if err := unix.Fstatat(dir, comp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return nil, "", &os.PathError{Op: "stat", Path: name, Err: err}
			}
		} else if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, "", &os.PathError{Op: "stat", Path: name, Err: err}
		}
		chain = append(chain, idOf(&st))
		names = append(names, name)
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, lerr := readLink(fd, dir, comp, &st)
			if fd >= 0 {
				unix.Close(fd)
			}
			if err := check("the link " + name); err != nil {
				return nil, "", err
			}
			switch {
			case int(st.Uid) != c.uid && st.Uid != 0:
				return nil, "", fmt.Errorf("%s: %s is a symbolic link owned by uid %d, neither the caller (uid %d) nor root: not followed", given, name, st.Uid, c.uid)
			case last && !followLast:
				return nil, "", fmt.Errorf("%s: %s is a symbolic link: nsgate does not write through a link (it may have been left by a worker); remove it or give the file it points to", given, name)
			case lerr != nil:
				return nil, "", &os.PathError{Op: "readlink", Path: name, Err: lerr}
			}
			rest := filepath.Join(comps[i+1:]...)
			if filepath.IsAbs(target) {
				return nil, filepath.Join(target, rest), nil
			}
			return nil, filepath.Join(cur, target, rest), nil
		}
		if err := check(name); err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return nil, "", err
		}
		if last {
			if fd >= 0 {
				unix.Close(fd)
			}
			keep = true
			p := &Path{Given: given, Real: name, Name: comp, Existed: true, id: idOf(&st), mode: uint32(st.Mode), c: c, dir: dir, chain: chain, names: names}
			c.remember(p)
			return p, "", nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return nil, "", &os.PathError{Op: "open", Path: name, Err: unix.ENOTDIR}
		}
		unix.Close(dir)
		dir, cur = fd, name
	}
	return nil, "", fmt.Errorf("%s: nothing to resolve", given)
}

func (c *Checker) remember(p *Path) {
	c.mu.Lock()
	c.resolved = append(c.resolved, p)
	c.mu.Unlock()
}

// Kind is what an opened file may be.
type Kind int

const (
	// Regular allows a regular file only.
	Regular Kind = 1 << iota
	// FIFO allows a named pipe.
	FIFO
	// CharDevice allows a character device (a terminal).
	CharDevice
)

func (k Kind) allows(mode uint32) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return k&Regular != 0
	case unix.S_IFIFO:
		return k&FIFO != 0
	case unix.S_IFCHR:
		return k&CharDevice != 0
	}
	return false
}

// OpenRead opens the file for reading (O_NOFOLLOW, non-blocking) through
// the folder held open: at start, and at every reload, never by name. It
// refuses anything but a regular file.
func (p *Path) OpenRead() (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir < 0 {
		return nil, errors.New("hostpath: closed")
	}
	fd, err := openBeneath(p.dir, p.Name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p.Real, Err: noFollowErr(err)}
	}
	f := os.NewFile(uintptr(fd), p.Given)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: p.Real, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s: %s, not a regular file", p.Given, kindName(uint32(st.Mode)))
	}
	return f, nil
}

// OpenOutput opens the output for writing with flag (O_WRONLY or O_RDWR,
// O_APPEND, O_TRUNC, O_NONBLOCK). When it did not exist at resolve time it
// is created with O_CREAT|O_EXCL|O_NOFOLLOW and mode perm; when it did, it
// is opened with O_NOFOLLOW and must be the same file (device and inode),
// of a kind k allows, and owned by the caller (unless a character device,
// such as /dev/null or a terminal: nodes the worker cannot make).
func (p *Path) OpenOutput(flag int, perm os.FileMode, k Kind) (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir < 0 {
		return nil, errors.New("hostpath: closed")
	}
	flag |= unix.O_CLOEXEC
	if !p.Existed {
		fd, err := openBeneath(p.dir, p.Name, flag|unix.O_CREAT|unix.O_EXCL, uint32(perm.Perm()))
		if err != nil {
			return nil, &os.PathError{Op: "create", Path: p.Real, Err: noFollowErr(err)}
		}
		return os.NewFile(uintptr(fd), p.Given), nil
	}
	// O_TRUNC waits for the checks: the file is checked first, then cut.
	trunc := flag&unix.O_TRUNC != 0
	fd, err := openBeneath(p.dir, p.Name, (flag&^unix.O_TRUNC)|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p.Real, Err: noFollowErr(err)}
	}
	f := os.NewFile(uintptr(fd), p.Given)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: p.Real, Err: err}
	}
	switch {
	case idOf(&st) != p.id:
		f.Close()
		return nil, fmt.Errorf("%s: the file changed since nsgate looked at it (another file is there now): refused", p.Given)
	case !k.allows(uint32(st.Mode)):
		f.Close()
		return nil, fmt.Errorf("%s: %s, which nsgate does not write to here", p.Given, kindName(uint32(st.Mode)))
	case int(st.Uid) != p.c.uid && st.Mode&unix.S_IFMT != unix.S_IFCHR:
		// (A device node cannot be made by the worker, nor re-pointed.)
		f.Close()
		return nil, fmt.Errorf("%s: owned by uid %d, not the caller (uid %d): nsgate writes only its caller's own files", p.Given, st.Uid, p.c.uid)
	}
	if trunc {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, &os.PathError{Op: "truncate", Path: p.Real, Err: err}
		}
	}
	return f, nil
}

func noFollowErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return errors.New("a symbolic link is there now: not followed")
	}
	return err
}

func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return "a special file"
}
