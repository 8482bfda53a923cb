package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Attribute sets for the mounts init makes.
const (
	// attrWorkerWritable: what every mount the worker can write carries.
	attrWorkerWritable = unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	// attrReadOnly: host binds the worker may only read (and execute).
	attrReadOnly = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

// step is one mount placed at a path of the worker's view.
type step struct {
	path string
	// tree is a detached mount (open_tree clone) to attach at path; -1
	// for a fresh tmpfs of mode.
	tree int
	mode os.FileMode
	// file: the mount point is a file (created empty if missing).
	file bool
}

// applyView builds v in init's mount namespace, which must be init's own
// (CLONE_NEWNS) and not shared with anything else. It needs the new mount
// API (Linux 5.12: open_tree, move_mount, mount_setattr, fsopen). It
// returns the parts it could do without (a fresh /proc, which a container
// runtime's masked /proc can refuse: the worker then keeps the host's,
// read-only). On error the namespace may be half built and init must not
// start the worker.
func applyView(v *View) (degraded []string, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	// A detached tmpfs for the files init places in the view (the
	// resolv.conf, the empty file that hides files); it is never
	// attached, so nothing is left on disk, whatever happens to nsgate.
	stage, err := stagingTmpfs()
	if err != nil {
		return nil, fmt.Errorf("staging tmpfs: %w", err)
	}
	defer unix.Close(stage)

	// 1. Take every bind source from the host before anything covers it.
	var steps []step
	defer func() {
		for _, s := range steps {
			if s.tree >= 0 {
				unix.Close(s.tree)
			}
		}
	}()
	for _, w := range v.Writable {
		t, err := cloneTree(w, attrWorkerWritable, 0)
		if err != nil {
			return nil, fmt.Errorf("writable path %s: %w", w, err)
		}
		steps = append(steps, step{path: w, tree: t, file: !isDir(w)})
	}
	for _, r := range v.ReadOnly {
		t, err := cloneTree(r, attrReadOnly, 0)
		if err != nil {
			return nil, fmt.Errorf("read-only bind %s: %w", r, err)
		}
		steps = append(steps, step{path: r, tree: t, file: !isDir(r)})
	}
	// The private directories (scratch, a private home) are directories
	// of one detached tmpfs, so that ScratchSize bounds them together.
	private := make([]Scratch, 0, len(v.Scratch)+1)
	if v.Home != "" {
		if v.HomeFrom != "" {
			t, err := cloneTree(v.HomeFrom, attrWorkerWritable, 0)
			if err != nil {
				return nil, fmt.Errorf("home %s: %w", v.HomeFrom, err)
			}
			steps = append(steps, step{path: v.Home, tree: t})
		} else {
			private = append(private, Scratch{Path: v.Home, Mode: 0o700})
		}
	}
	private = append(private, v.Scratch...)
	if len(private) > 0 {
		scratch, err := scratchTmpfs(v.ScratchSize)
		if err != nil {
			return nil, fmt.Errorf("private directories' tmpfs: %w", err)
		}
		defer unix.Close(scratch)
		for i, p := range private {
			t, err := scratchDir(scratch, strconv.Itoa(i), unixMode(p.Mode))
			if err != nil {
				return nil, fmt.Errorf("private directory %s: %w", p.Path, err)
			}
			steps = append(steps, step{path: p.Path, tree: t})
		}
	}
	// The private /dev: a tmpfs, and the device nodes bound into it.
	steps = append(steps, step{path: devDir, tree: -1, mode: 0o755})
	for _, d := range devDevices {
		st, err := os.Stat(d)
		if err != nil {
			continue
		}
		t, err := cloneTree(d, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, 0) // not nodev: they are devices
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", d, err)
		}
		steps = append(steps, step{path: d, tree: t, file: !st.IsDir()})
	}

	// 2. The host, read-only: every mount of the tree at once.
	if !v.KeepHostWritable {
		ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &ro); err != nil {
			return nil, fmt.Errorf("make the host read-only: %w", err)
		}
	}

	// 3. The worker's own /proc (after step 2: it must stay writable for
	// the worker's /proc/self files).
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		degraded = append(degraded, "proc")
	} else if err := readOnlyProcPaths(); err != nil {
		return nil, err
	}

	// 4. Scratch, home, binds: outer paths first, so a bind below a
	// scratch directory lands on the new tmpfs. Mount points missing in
	// a tmpfs are created there.
	sort.SliceStable(steps, func(i, j int) bool { return depth(steps[i].path) < depth(steps[j].path) })
	for i := range steps {
		s := &steps[i]
		if err := mountPoint(s.path, s.file); err != nil {
			return nil, fmt.Errorf("mount point %s: %w", s.path, err)
		}
		if s.tree < 0 {
			opts := fmt.Sprintf("mode=%#o", unixMode(s.mode))
			if err := unix.Mount("tmpfs", s.path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
				return nil, fmt.Errorf("private tmpfs on %s: %w", s.path, err)
			}
			continue
		}
		if err := unix.MoveMount(s.tree, "", unix.AT_FDCWD, s.path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("bind %s: %w", s.path, err)
		}
		unix.Close(s.tree)
		s.tree = -1
	}

	// The private /dev's own terminals, its links, then it is made
	// read-only (its device binds, pts and shm are mounts of their own and
	// keep their flags).
	if err := os.Mkdir(devDir+"/pts", 0o755); err != nil {
		return nil, fmt.Errorf("private /dev: %w", err)
	}
	if err := unix.Mount("devpts", devDir+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,max="+strconv.Itoa(devptsMax)); err != nil {
		return nil, fmt.Errorf("private /dev/pts: %w", err)
	}
	for link, target := range devLinks {
		if err := os.Symlink(target, link); err != nil {
			return nil, fmt.Errorf("private /dev: %w", err)
		}
	}
	devRO := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, devDir, 0, &devRO); err != nil {
		return nil, fmt.Errorf("private /dev read-only: %w", err)
	}

	// 5. Hidden paths, last, so that one inside a writable path stays
	// hidden. A path the view does not have needs nothing.
	for _, h := range v.Hide {
		st, err := os.Lstat(h)
		if err != nil {
			continue
		}
		if err := hide(stage, h, st.IsDir()); err != nil {
			return nil, fmt.Errorf("hide %s: %w", h, err)
		}
	}

	// 6. The gateway's resolver.
	if v.ResolvConf != "" {
		if err := placeFile(stage, "resolv.conf", v.ResolvConf, 0o644, "/etc/resolv.conf"); err != nil {
			return nil, fmt.Errorf("bind resolv.conf: %w", err)
		}
	}

	// 6b. Files bound over the view's own (the CA bundle).
	for i, f := range v.Files {
		if f.Create {
			if err := createUnderTmp(f.Path); err != nil {
				return nil, fmt.Errorf("bind %s: %w", f.Path, err)
			}
		}
		if err := placeFile(stage, "file"+strconv.Itoa(i), f.Content, 0o644, f.Path); err != nil {
			return nil, fmt.Errorf("bind %s: %w", f.Path, err)
		}
	}

	// 6c. Files of the private home.
	if v.Home != "" && v.HomeFrom == "" {
		for _, f := range v.HomeFiles {
			rel := filepath.Clean(f.Rel)
			if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
				return nil, fmt.Errorf("home file %q: not inside the home", f.Rel)
			}
			p := filepath.Join(v.Home, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return nil, fmt.Errorf("home file %s: %w", rel, err)
			}
			if err := os.WriteFile(p, f.Data, 0o600); err != nil {
				return nil, fmt.Errorf("home file %s: %w", rel, err)
			}
		}
	}

	// 7. Enter the working directory again by name: the old one may be
	// covered now, and a descriptor into a covered directory would reach
	// what the view hides.
	for _, d := range []string{v.Cwd, v.Home, "/"} {
		if d != "" && unix.Chdir(d) == nil {
			break
		}
	}
	return degraded, nil
}

// procReadOnly are the parts of a fresh /proc that reach beyond the
// worker's own processes: the kernel's global settings (a worker of a root
// caller is uid 0, and /proc/sys checks only the uid: kernel.core_pattern
// would run a program as root on the host), the magic SysRq key, IRQ
// affinities, the PCI bus, file-system knobs. They are bound read-only
// onto themselves, as container runtimes do.
var procReadOnly = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}

// readOnlyProcPaths binds each existing procReadOnly path read-only onto
// itself.
func readOnlyProcPaths() error {
	for _, p := range procReadOnly {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		t, err := cloneTree(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0)
		if err != nil {
			return fmt.Errorf("read-only %s: %w", p, err)
		}
		err = unix.MoveMount(t, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(t)
		if err != nil {
			return fmt.Errorf("read-only %s: %w", p, err)
		}
	}
	return nil
}

// stagingTmpfs returns a detached tmpfs mount (a descriptor of its root).
func stagingTmpfs() (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	for k, val := range map[string]string{"mode": "0755", "size": "1m", "nr_inodes": "64"} {
		if err := unix.FsconfigSetString(fsfd, k, val); err != nil {
			return -1, fmt.Errorf("fsconfig %s: %w", k, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	m, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	fd, err := unix.Openat(m, hideEmpty, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(m)
		return -1, fmt.Errorf("create %s: %w", hideEmpty, err)
	}
	unix.Close(fd)
	return m, nil
}

// scratchTmpfs returns a detached tmpfs of size bytes (0: the kernel's
// default) and one inode per scratchInodeBytes of it, for the private
// directories.
func scratchTmpfs(size int64) (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	opts := [][2]string{{"mode", "0755"}}
	if size > 0 {
		opts = append(opts, [2]string{"size", strconv.FormatInt(size, 10)},
			[2]string{"nr_inodes", strconv.FormatInt(max(size/scratchInodeBytes, 64), 10)})
	}
	for _, o := range opts {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return -1, fmt.Errorf("fsconfig %s=%s: %w", o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	m, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return m, nil
}

// scratchDir makes the empty directory name of mode in the scratch tmpfs
// and returns a detached bind of it, noexec, nosuid and nodev.
func scratchDir(scratch int, name string, mode uint32) (int, error) {
	if err := unix.Mkdirat(scratch, name, 0o700); err != nil {
		return -1, err
	}
	// mkdir drops the sticky bit and applies the umask: set the mode.
	if err := unix.Fchmodat(scratch, name, mode, 0); err != nil {
		return -1, err
	}
	t, err := unix.OpenTree(scratch, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	a := unix.MountAttr{Attr_set: attrWorkerWritable}
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &a); err != nil {
		unix.Close(t)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return t, nil
}

// cloneTree returns a detached copy of the mount tree at path (with its
// submounts), with attrs set on every mount of it.
func cloneTree(path string, set, clr uint64) (int, error) {
	t, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	a := unix.MountAttr{Attr_set: set, Attr_clr: clr}
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &a); err != nil {
		unix.Close(t)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return t, nil
}

// placeFile writes content to name in the staging tmpfs and binds it,
// read-only, over target.
func placeFile(stage int, name, content string, mode uint32, target string) error {
	fd, err := unix.Openat(stage, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte(content))
	unix.Close(fd)
	if err != nil {
		return err
	}
	return bindFrom(stage, name, target)
}

// createUnderTmp makes an empty file at path, and its folders, when it is
// missing; path must be under /tmp (the view's private tmpfs, where
// nothing of the host's is).
func createUnderTmp(path string) error {
	clean := filepath.Clean(path)
	if !strings.HasPrefix(clean, "/tmp/") || clean != path {
		return fmt.Errorf("only a clean path under /tmp may be created")
	}
	if err := os.MkdirAll(filepath.Dir(clean), 0o755); err != nil {
		return err
	}
	fd, err := unix.Open(clean, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// bindFrom binds name of the staging tmpfs, read-only, over target.
func bindFrom(stage int, name, target string) error {
	t, err := unix.OpenTree(stage, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(t)
	a := unix.MountAttr{Attr_set: attrReadOnly | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &a); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return unix.MoveMount(t, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS)
}

// devptsMax is how many ptys the worker's devpts instance allows. Every
// instance but the host's shares kernel.pty.max less pty.reserve (3,072
// by default): without a bound of its own a worker could hold them all
// and leave other sandboxes and containers without a pty.
const devptsMax = 256

// hideEmpty is the staging file bound over hidden files: empty, mode 0.
const hideEmpty = "hidden"

// hide covers path: a directory with an empty read-only tmpfs of mode 0,
// a file with an empty file of mode 0.
func hide(stage int, path string, dir bool) error {
	if dir {
		return unix.Mount("tmpfs", path, "tmpfs",
			unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0,size=4k,nr_inodes=1")
	}
	return bindFrom(stage, hideEmpty, path)
}

// mountPoint makes sure path exists as a directory (or, with file, a
// file). Only a missing one is created, which works where the parent is
// writable: inside a private tmpfs.
func mountPoint(path string, file bool) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	if !file {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// unixMode turns a FileMode's permission and sticky bits into mode_t.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// errNoMountAPI explains a kernel without the new mount API.
var errNoMountAPI = errors.New("the worker's file system view needs Linux 5.12 or later (open_tree, move_mount, mount_setattr)")

// viewError adds the fix to an ENOSYS from the mount API.
func viewError(err error) error {
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%w: %v", errNoMountAPI, err)
	}
	return err
}

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
