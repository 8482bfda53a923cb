package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// View is the worker's file system, as init builds it in the worker's
// mount namespace (applyView):
//
//   - the host's whole mount tree, read-only (recursively);
//   - a fresh /proc for the worker's PID namespace;
//   - Scratch directories as private, empty directories of one tmpfs of
//     ScratchSize bytes (shared by all of them);
//   - Home as another such directory, or HomeFrom bound read-write at Home;
//   - Writable host paths bound read-write at their own paths (also when
//     they lie below a scratch directory or Home);
//   - ReadOnly host paths (--ro paths and programs the worker may run
//     that lie in a scratch directory or Home) bound read-only at their
//     own paths;
//   - Hide paths covered: a directory by an empty, read-only tmpfs that
//     nobody may list, a file by an empty, unreadable file;
//   - a private /dev: a read-only tmpfs holding only devDevices (bound
//     from the host's), a devpts of its own, /dev/shm and the usual links,
//     so that no
//     other device node (a raw disk a root caller's worker could open)
//     exists for the worker;
//   - /etc/resolv.conf replaced by ResolvConf.
//
// Every mount the worker can write to is noexec, nosuid and nodev. The
// sources of the binds are taken before anything is covered, so a path
// below a scratch directory or Home still comes from the host.
//
// View is plain data (it travels to init as JSON). Build it with
// PlanView, which checks the paths on the host.
type View struct {
	Writable []string `json:",omitempty"`
	Scratch  []Scratch
	Home     string `json:",omitempty"`
	HomeFrom string `json:",omitempty"`
	// ScratchSize is the size in bytes of the one tmpfs that holds the
	// scratch directories and the private home, with one inode per 4 KiB
	// of it; 0: the kernel's default (half of RAM).
	ScratchSize int64    `json:",omitempty"`
	ReadOnly    []string `json:",omitempty"`
	Hide        []string `json:",omitempty"`
	// ResolvConf is the content bound over /etc/resolv.conf ("" leaves it).
	ResolvConf string `json:",omitempty"`
	// Files are bound read-only over existing files of the view (the
	// system CA bundle with the run's CA); a Path that does not exist is
	// an error, unless the File may Create it.
	Files []File `json:",omitempty"`
	// HomeFiles are written into a private home once it exists (the NSS
	// database that browsers read the run's CA from), at paths relative
	// to Home; with HomeFrom (the caller's own directory) they are not
	// written.
	HomeFiles []HomeFile `json:",omitempty"`
	// Cwd is the worker's working directory, entered once the view is
	// built; when it does not exist there, Home, else "/".
	Cwd string `json:",omitempty"`
	// Warnings are what PlanView could not do as well as it should; the
	// caller says them. They do not travel to init.
	Warnings []string `json:"-"`
	// KeepHostWritable skips the read-only remount of the host (only for
	// tests that show the Landlock write rules hold alone).
	KeepHostWritable bool `json:",omitempty"`
}

// File is content bound read-only over a file of the view.
type File struct {
	Path    string
	Content string
	// Create makes Path (and its folders, 0755) first when it is missing;
	// only a path under /tmp, the view's private tmpfs, may be created.
	Create bool `json:",omitempty"`
}

// HomeFile is a file written into the private home: Rel is relative to
// Home ("a/b"), Data its content, mode 0600, directories 0700.
type HomeFile struct {
	Rel  string
	Data []byte
}

// Scratch is a directory that becomes a private tmpfs.
type Scratch struct {
	Path string
	Mode fs.FileMode // permission bits and sticky bit of the tmpfs root
}

// ViewConfig is what PlanView builds a View from: what the user asked for
// and what nsgate must keep to itself.
type ViewConfig struct {
	// Writable are host paths the worker may write (--rw, the policy's
	// filesystem.write). Each must exist.
	Writable []string
	// ReadOnly are host paths the worker may read even where the view
	// would not show them (below a scratch directory or the private home;
	// --ro). Each must exist. Elsewhere they change nothing: the host is
	// read-only anyway.
	ReadOnly []string
	// Home is the worker's $HOME path (the caller's); "" or "/": none.
	Home string
	// HomeDir, when set, is a host directory to be the worker's home,
	// read-write (--home DIR); otherwise Home is a private tmpfs.
	HomeDir string
	// ScratchSize bounds, in bytes, what the worker may keep in its
	// private directories (the scratch directories and a private home) all
	// together: 0 means DefaultScratchSize, a negative value the kernel's
	// default for a tmpfs (half of RAM).
	ScratchSize int64
	// UID is the caller's uid on the host, for /run/user/UID.
	UID int
	// RuntimeDir is the caller's $XDG_RUNTIME_DIR. Where it is not
	// /run/user/UID it becomes private too (when it is what the XDG
	// specification asks of one: a directory the caller owns, mode 0700):
	// it holds the session bus ($XDG_RUNTIME_DIR/bus), the Wayland,
	// PipeWire and agent sockets, which a worker allowed AF_UNIX could
	// otherwise connect to.
	RuntimeDir string
	// SessionBus is the caller's $DBUS_SESSION_BUS_ADDRESS: each unix
	// socket path it names is hidden (see SessionBusPaths).
	SessionBus string
	// SSHAgent is the caller's $SSH_AUTH_SOCK: the socket is hidden, so
	// that the worker cannot sign with the caller's keys.
	SSHAgent string
	// SystemBus is the caller's $DBUS_SYSTEM_BUS_ADDRESS: each unix socket
	// path it names is hidden, like the system bus's usual place (see
	// hostDaemonPlaces).
	SystemBus string
	// HostSockets are the paths of the unix sockets bound on the host
	// (HostSocketPaths: /proc/net/unix of nsgate's network namespace),
	// given when the worker may create unix sockets (--allow-unix): each
	// one the view would show is hidden, unless the user named that very
	// socket with --ro or --rw. So the worker can connect to none of the
	// host's listening sockets that exist at start (abstract ones belong
	// to the host's network namespace and are out of reach anyway).
	HostSockets []string
	// EngineHosts are the values of the variables that tell container
	// clients where their engine listens ($DOCKER_HOST, $CONTAINER_HOST,
	// $CONTAINERD_ADDRESS, $BUILDKIT_HOST): each unix socket they name is
	// hidden (see EngineSocketPaths).
	EngineHosts []string
	// Exec are the canonical files and directories the worker may execute
	// (the exec guard's allowlist).
	Exec []string
	// Own are nsgate's own files (policy, audit log, its key, the pcap,
	// the lab's evidence folder): hidden, with the directory that holds
	// each file where hiding it takes nothing from the worker (see
	// PlanView), and refused when they lie in a writable path.
	Own []string
	// Programs are the programs nsgate starts outside the sandbox
	// (Programs): refused when one, or the directory that holds it, lies
	// in a writable path, where the worker could replace it or put one
	// where none is yet.
	Programs []string
	// Hide are further paths to hide (the policy's filesystem.hide).
	Hide []string
	// ResolvConf is the worker's /etc/resolv.conf content.
	ResolvConf string
	// Cwd is the caller's working directory.
	Cwd string
}

// devDir is the directory the view replaces with a private /dev.
const devDir = "/dev"

// devDevices are the device nodes the private /dev holds, bound from the
// host's /dev; the ones the host lacks are left out. Its /dev/pts is a
// devpts instance of its own (the host's would let the worker open the
// caller's other terminals), with /dev/ptmx a link into it.
var devDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// WritePaths returns where the view lets the worker create, change and
// remove files (the writable binds, the scratch directories, the home),
// and where it may only write existing files (the devices of the private
// /dev, its pts, and its own /proc): what the exec guard's Landlock write
// rules grant.
func (v View) WritePaths() (paths, devices []string) {
	paths = append(paths, v.Writable...)
	for _, s := range v.Scratch {
		paths = append(paths, s.Path)
	}
	if v.Home != "" {
		paths = append(paths, v.Home)
	}
	devices = append(append(devices, devDevices...), devDir+"/pts", "/proc")
	return paths, devices
}

// devLinks are the symbolic links of the private /dev.
var devLinks = map[string]string{
	"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
	"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
	"/dev/ptmx": "pts/ptmx",
}

// DefaultScratchSize is the default budget of the worker's private
// directories: what it writes there is memory (unswappable without swap)
// that no process is charged for, so the OOM killer cannot free it by
// killing the worker. With the kernel's default, half of RAM for each of
// four or five tmpfs mounts, a worker could pin twice the machine's memory.
const DefaultScratchSize int64 = 2 << 30

// scratchInodeBytes: the private tmpfs gets one inode per this many bytes
// of its size (the kernel's own default ratio: one per page), so that empty
// files cannot pin kernel memory without bound either.
const scratchInodeBytes = 4096

// scratchDirs are the directories that become private tmpfs mounts, with
// the mode of their new root; /run/user/UID is added by PlanView.
var scratchDirs = []Scratch{
	{Path: "/tmp", Mode: fs.ModeSticky | 0o777},
	{Path: "/var/tmp", Mode: fs.ModeSticky | 0o777},
	{Path: "/dev/shm", Mode: fs.ModeSticky | 0o777},
}

// PlanView checks cfg against the host and returns the View to apply, with
// warnings in View.Warnings. It refuses (with an error naming the path and
// the fix):
//   - a writable path that does not exist, or "/";
//   - nsgate's own files inside a writable path or the --home directory
//     (the worker could move or replace them);
//   - an exec allowlist entry inside a writable path or the --home
//     directory (the worker could replace the program it is allowed to
//     run).
//
// Exec entries inside a scratch directory or the private home are bound
// read-only at their paths, so the worker still finds them and cannot
// change them.
func PlanView(cfg ViewConfig) (View, error) {
	var v View
	switch {
	case cfg.ScratchSize == 0:
		v.ScratchSize = DefaultScratchSize
	case cfg.ScratchSize > 0:
		if cfg.ScratchSize < 1<<20 {
			return View{}, fmt.Errorf("scratch size %d bytes: want at least 1 MiB", cfg.ScratchSize)
		}
		v.ScratchSize = cfg.ScratchSize
	}
	for _, w := range cfg.Writable {
		c, err := canonicalExisting(w)
		if err != nil {
			return View{}, fmt.Errorf("writable path %s: %w", w, err)
		}
		if c == "/" {
			return View{}, fmt.Errorf("writable path %s: the whole host cannot be writable", w)
		}
		v.Writable = append(v.Writable, c)
	}
	v.Writable = uniqueSorted(v.Writable)
	var readOnly []string
	for _, r := range cfg.ReadOnly {
		c, err := canonicalExisting(r)
		if err != nil {
			return View{}, fmt.Errorf("read-only path %s: %w", r, err)
		}
		readOnly = append(readOnly, c)
	}

	for _, s := range scratchDirs {
		if isDir(s.Path) {
			v.Scratch = append(v.Scratch, s)
		}
	}
	if run := "/run/user/" + strconv.Itoa(cfg.UID); isDir(run) {
		v.Scratch = append(v.Scratch, Scratch{Path: run, Mode: 0o700})
	}
	if h := filepath.Clean(cfg.Home); cfg.Home != "" && h != "/" {
		// Home keeps its path even when it is a link: $HOME names it.
		v.Home = h
		if c, err := filepath.EvalSymlinks(h); err == nil {
			v.Home = c
		}
	}
	// The runtime directory, also where the view would not show it
	// anyway (below /tmp), since a --ro path may show it again.
	if rt := privateRuntimeDir(cfg.RuntimeDir, cfg.UID); rt != "" && rt != v.Home && !slices.Contains(v.Writable, rt) && !v.isScratch(rt) {
		v.Scratch = append(v.Scratch, Scratch{Path: rt, Mode: 0o700})
	}
	writable := append([]string(nil), v.Writable...)
	if cfg.HomeDir != "" {
		if v.Home == "" {
			return View{}, errors.New("--home: there is no $HOME to put it at (set HOME)")
		}
		c, err := canonicalExisting(cfg.HomeDir)
		if err != nil {
			return View{}, fmt.Errorf("--home %s: %w", cfg.HomeDir, err)
		}
		if !isDir(c) {
			return View{}, fmt.Errorf("--home %s: not a directory", cfg.HomeDir)
		}
		if c == "/" {
			return View{}, fmt.Errorf("--home %s: the whole host cannot be writable", cfg.HomeDir)
		}
		v.HomeFrom = c
		writable = append(writable, c)
	}

	// Places that are private to the worker: exec entries there are bound
	// read-only from the host.
	private := []string{devDir}
	for _, s := range v.Scratch {
		private = append(private, s.Path)
	}
	if v.Home != "" {
		private = append(private, v.Home)
	}
	for _, r := range readOnly {
		if within(r, private) != "" && within(r, writable) == "" {
			v.ReadOnly = append(v.ReadOnly, r)
		}
	}
	for _, e := range cfg.Exec {
		if w := within(e, writable); w != "" {
			return View{}, fmt.Errorf("the worker may execute %s, which lies in the writable path %s: it could replace the program; move the program out of %s or do not make %s writable", e, w, w, w)
		}
		if within(e, private) != "" {
			v.ReadOnly = append(v.ReadOnly, e)
		}
	}
	v.ReadOnly = uniqueSorted(v.ReadOnly)

	// nsgate's programs: the worker must not choose what a later start
	// (or this run's helpers) executes on the host. The directory counts:
	// there the worker could rename another file over the program, or
	// make the nsgate-init that nsgate would take before itself.
	for _, p := range cfg.Programs {
		// Where the name is, and where a link there leads: the
		// directory, and the file itself (a --rw of the file alone).
		dirs := []string{canonicalPrefix(filepath.Dir(p))}
		if c, err := canonicalExisting(p); err == nil {
			dirs = append(dirs, filepath.Dir(c), c)
		}
		for _, d := range dirs {
			w := within(d, writable)
			if w == "" {
				continue
			}
			return View{}, fmt.Errorf("nsgate starts %s outside the sandbox, and it lies in the writable path %s: the worker could put a program of its own there that a later nsgate run executes on the host; install nsgate (and nsgate-init) outside the paths the worker may write, or do not make %s writable", p, w, w)
		}
	}

	// nsgate's own files: refused in a writable path; otherwise the
	// directory holding each is hidden whole wherever the worker would see
	// it. A mount over the file alone would not do: when the host replaces
	// the file (an editor's rename, a key rotated), the kernel detaches
	// every mount on the old file in every namespace, and the worker would
	// read the new one. A directory the worker needs (a --ro, --rw or
	// --home path, a program it may run or a private directory lies in
	// it, or "/") cannot be hidden: then the file alone is covered and
	// PlanView warns (inside a container a policy bound at /policy.yaml is
	// the usual case, and the host's replacement of the file does not
	// reach a bind mount).
	var needed []string
	needed = append(needed, writable...)
	needed = append(needed, readOnly...)
	needed = append(needed, private...)
	needed = append(needed, cfg.Exec...)
	for _, o := range cfg.Own {
		c := canonicalOrClean(o)
		if w := within(c, writable); w != "" {
			return View{}, fmt.Errorf("%s lies in the writable path %s: the worker could move or replace it; keep nsgate's files outside the paths the worker may write", o, w)
		}
		v.Hide = append(v.Hide, c)
		d := c
		if !isDir(c) {
			d = filepath.Dir(c)
		}
		if !v.shows(d) {
			continue // below a private directory: the worker never sees it
		}
		if d == "/" || holdsAny(d, needed) {
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s lies in %s, which the worker sees: the file is hidden, but if it is replaced while the worker runs (an editor's save, a rename), the worker can read the new one; keep nsgate's files (policy, audit log, key, pcap) in a folder of their own", o, d))
			continue
		}
		v.Hide = append(v.Hide, d)
	}
	for _, h := range cfg.Hide {
		v.Hide = append(v.Hide, canonicalOrClean(h))
	}
	// The session bus, wherever it is: through it `systemd --user` or
	// D-Bus activation would start any command outside the sandbox.
	// A socket is never a directory: a path that names one (a mistake in
	// the environment, "/" even) is left alone rather than covered.
	var sockets []string // hidden one by one
	hideSocket := func(p string) {
		if c := canonicalOrClean(p); !isDir(c) {
			v.Hide = append(v.Hide, c)
			sockets = append(sockets, c)
		}
	}
	for _, b := range SessionBusPaths(cfg.SessionBus) {
		hideSocket(b)
	}
	// Where D-Bus clients look without DBUS_SESSION_BUS_ADDRESS, and
	// `systemd --user`'s own socket, also in a runtime directory that is
	// not private (not the caller's, or open to others).
	if filepath.IsAbs(cfg.RuntimeDir) {
		for _, s := range runtimeSockets {
			hideSocket(filepath.Join(cfg.RuntimeDir, s))
		}
	}
	if filepath.IsAbs(cfg.SSHAgent) {
		hideSocket(cfg.SSHAgent)
	}
	// The host's daemons that run a command for whoever connects (a
	// container engine starts a privileged container; systemd, over the
	// system bus or its private socket, a unit of uid 0's) or write what
	// they get into the host's logs: their usual places and where the
	// environment says they are. Hidden with or without --allow-unix:
	// without it, a socketpair(2) datagram socket still reaches the
	// datagram ones before Landlock ABI 9.
	for _, b := range SessionBusPaths(cfg.SystemBus) {
		hideSocket(b)
	}
	for _, h := range cfg.EngineHosts {
		for _, p := range EngineSocketPaths(h) {
			hideSocket(p)
		}
	}
	places := hostDaemonPlaces
	if filepath.IsAbs(cfg.RuntimeDir) && cfg.RuntimeDir != "/" {
		for _, p := range runtimeDaemonPlaces {
			places = append(places, filepath.Join(cfg.RuntimeDir, p))
		}
	}
	for _, p := range places {
		c, err := canonicalExisting(p)
		if err != nil || c == "/" {
			continue // nothing there: nothing to hide
		}
		// A directory is covered whole (the sockets a daemon makes in
		// it change names), unless the worker needs something in it;
		// then the sockets it holds, one by one.
		if !isDir(c) {
			v.Hide = append(v.Hide, c)
			sockets = append(sockets, c)
			continue
		}
		if !holdsAny(c, needed) {
			v.Hide = append(v.Hide, c)
			continue
		}
		socks, _ := socketsIn(c)
		v.Hide = append(v.Hide, socks...)
		sockets = append(sockets, socks...)
		v.Warnings = append(v.Warnings, fmt.Sprintf("%s holds a host daemon's sockets and a path the worker needs: the sockets in it now are hidden, not those made later", c))
	}
	for _, p := range cfg.HostSockets {
		c, err := canonicalExisting(p)
		if err != nil || !isSocket(c) || !v.shows(c) || slices.Contains(cfg.ReadOnly, p) || slices.Contains(cfg.Writable, p) ||
			slices.Contains(readOnly, c) || slices.Contains(writable, c) {
			continue
		}
		v.Hide = append(v.Hide, c)
		sockets = append(sockets, c)
	}
	// A cover over a socket goes when the socket is unlinked (the kernel
	// detaches every mount on it, in every namespace): a daemon that
	// makes its socket again while the worker runs (a restart) would show
	// the new one. The directory that holds a hidden socket is covered
	// too where that takes nothing else from the worker: it holds
	// sockets alone and nothing the worker needs.
	for _, c := range sockets {
		if d := filepath.Dir(c); d != "/" && v.shows(d) && !holdsAny(d, needed) && onlySockets(d) {
			v.Hide = append(v.Hide, d)
		}
	}
	v.Hide = uniqueSorted(v.Hide)
	v.ResolvConf = cfg.ResolvConf
	v.Cwd = cfg.Cwd
	return v, nil
}

// isScratch reports whether p is a scratch directory of v.
func (v View) isScratch(p string) bool {
	for _, s := range v.Scratch {
		if s.Path == p {
			return true
		}
	}
	return false
}

// runtimeSockets are the sockets in a runtime directory through which a
// client would have the caller's session run a command: the session bus
// and the private socket of `systemd --user`.
var runtimeSockets = []string{"bus", "systemd/private"}

// hostDaemonPlaces are the usual places of the sockets through which a
// host daemon runs what a client asks outside the sandbox, or writes it
// into the host's logs: the container engines' (Docker, Podman, containerd
// and its shims, BuildKit, CRI-O, k3s, cri-dockerd), the system bus's,
// systemd's private and notify sockets, and journald's directory (its
// native, syslog and stdout sockets). A directory is covered whole.
var hostDaemonPlaces = []string{
	"/run/docker.sock", "/var/run/docker.sock", "/run/docker", "/var/run/docker",
	"/run/dockershim.sock", "/run/cri-dockerd.sock",
	"/run/podman", "/var/run/podman",
	"/run/containerd", "/var/run/containerd",
	"/run/buildkit", "/var/run/buildkit",
	"/run/crio", "/var/run/crio",
	"/run/k3s", "/var/run/k3s",
	"/run/dbus", "/var/run/dbus",
	"/run/systemd/private", "/run/systemd/notify", "/run/systemd/journal",
	"/var/run/systemd/private", "/var/run/systemd/notify", "/var/run/systemd/journal",
}

// runtimeDaemonPlaces are the same in a runtime directory (rootless
// engines, the GnuPG agent), for one that stays as the host has it.
var runtimeDaemonPlaces = []string{
	"docker.sock", "docker", "podman", "containerd", "containerd-rootless", "buildkit", "gnupg",
}

// onlySockets reports whether dir holds at least one entry, and unix
// sockets alone.
func onlySockets(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		return false
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSocket == 0 {
			return false
		}
	}
	return true
}

// socketsIn returns the unix sockets below dir.
func socketsIn(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type()&fs.ModeSocket != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// EngineSocketPaths returns the unix socket path a container client's
// engine address names: "unix:///path" or "unix:/path" ($DOCKER_HOST,
// $CONTAINER_HOST, $BUILDKIT_HOST) or a plain absolute path
// ($CONTAINERD_ADDRESS). Other transports (tcp, ssh, npipe) name no local
// socket.
func EngineSocketPaths(addr string) []string {
	if filepath.IsAbs(addr) {
		return []string{filepath.Clean(addr)}
	}
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "unix" {
		return nil
	}
	for _, p := range []string{u.Path, u.Opaque} {
		if filepath.IsAbs(p) {
			return []string{filepath.Clean(p)}
		}
	}
	return nil
}

// privateRuntimeDir returns the canonical path of the runtime directory
// dir when the view should make it private: an absolute path to a
// directory (not "/") that uid owns and nobody else may enter, as the XDG
// base directory specification requires of $XDG_RUNTIME_DIR. Anything
// else ("" when unset) is not a runtime directory and is left as the host
// has it; its session bus is still hidden through SessionBusPaths.
func privateRuntimeDir(dir string, uid int) string {
	if dir == "" || !filepath.IsAbs(dir) {
		return ""
	}
	c, err := canonicalExisting(dir)
	if err != nil || c == "/" {
		return ""
	}
	fi, err := os.Stat(c)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return ""
	}
	if owner, ok := fileOwner(fi); !ok || owner != uid {
		return ""
	}
	return c
}

// SessionBusPaths returns the unix socket paths a D-Bus address (the
// value of DBUS_SESSION_BUS_ADDRESS: addresses separated by ';', each
// "transport:key=value,..." with %-escaped values) names with "path=".
// Abstract sockets ("abstract=") belong to the host's network namespace
// and are out of the worker's reach anyway; "dir=" and "tmpdir=" are
// where a server makes its socket, never where a client connects. A
// malformed escape drops that path: nothing to hide.
func SessionBusPaths(addr string) []string {
	var out []string
	for _, a := range strings.Split(addr, ";") {
		transport, params, ok := strings.Cut(a, ":")
		if !ok || transport != "unix" {
			continue
		}
		for _, kv := range strings.Split(params, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || k != "path" {
				continue
			}
			if p, err := url.PathUnescape(val); err == nil && filepath.IsAbs(p) {
				out = append(out, filepath.Clean(p))
			}
		}
	}
	return out
}

// shows reports whether the worker's view shows the host's path p: true
// unless the deepest place of the view that holds p is a private tmpfs
// (a scratch directory, or the home without --home).
func (v View) shows(p string) bool {
	best, private := -1, false
	consider := func(place string, isPrivate bool) {
		if within(p, []string{place}) != "" && depth(place) >= best {
			best, private = depth(place), isPrivate
		}
	}
	consider(devDir, true)
	for _, s := range v.Scratch {
		consider(s.Path, true)
	}
	if v.Home != "" {
		consider(v.Home, v.HomeFrom == "")
	}
	for _, w := range v.Writable {
		consider(w, false)
	}
	for _, r := range v.ReadOnly {
		consider(r, false)
	}
	return !private
}

// canonicalExisting returns the absolute path of p with every symlink
// resolved; p must exist.
func canonicalExisting(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	c, err := filepath.EvalSymlinks(a)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", errors.New("no such file or directory")
		}
		return "", err
	}
	return c, nil
}

// canonicalOrClean resolves p if it exists, else returns it absolute and
// clean (a path that does not exist yet cannot be hidden, and init skips
// it, but it still must not be written: see PlanView).
func canonicalOrClean(p string) string {
	if c, err := canonicalExisting(p); err == nil {
		return c
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	return a
}

// canonicalPrefix is p, absolute and clean, with the links of the
// longest part of it that exists resolved: where p would be once made.
func canonicalPrefix(p string) string {
	p = canonicalOrClean(p)
	var rest []string
	for d := p; ; d = filepath.Dir(d) {
		if c, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(append([]string{c}, rest...)...)
		}
		if d == filepath.Dir(d) {
			return p
		}
		rest = append([]string{filepath.Base(d)}, rest...)
	}
}

func isSocket(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode()&fs.ModeSocket != 0
}

// HostSocketPaths returns the paths of the pathname unix sockets bound in
// this process's network namespace, from /proc/net/unix (its last
// column; abstract ones, "@name", are left out). Paths are as their
// binders gave them; relative ones are left out.
func HostSocketPaths() ([]string, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	return parseNetUnix(string(b)), nil
}

// parseNetUnix reads the paths of /proc/net/unix's text.
func parseNetUnix(s string) []string {
	var out []string
	for i, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if i == 0 || len(f) < 8 {
			continue // the header, or an unbound socket (no path)
		}
		if p := strings.Join(f[7:], " "); strings.HasPrefix(p, "/") && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// within returns the entry of dirs that p is or lies below ("" if none).
func within(p string, dirs []string) string {
	for _, d := range dirs {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return d
		}
	}
	return ""
}

// holdsAny reports whether any of paths is dir or lies below it.
func holdsAny(dir string, paths []string) bool {
	for _, p := range paths {
		if within(p, []string{dir}) != "" {
			return true
		}
	}
	return false
}

func uniqueSorted(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// depth is the number of components of a clean absolute path ("/" is 0).
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
