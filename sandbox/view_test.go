package sandbox

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// viewFixture is a host-like tree: a project with an exec-allowed tool, a
// home, and a folder for nsgate's own files.
type viewFixture struct {
	root, proj, home, own, tool string
}

func newViewFixture(t *testing.T) viewFixture {
	t.Helper()
	root := t.TempDir()
	f := viewFixture{
		root: root,
		proj: filepath.Join(root, "proj"),
		home: filepath.Join(root, "home"),
		own:  filepath.Join(root, "nsgate"),
		tool: filepath.Join(root, "bin", "tool"),
	}
	for _, d := range []string{f.proj, f.home, f.own, filepath.Dir(f.tool)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{f.tool, filepath.Join(f.own, "policy.yaml"), filepath.Join(f.proj, "audit.jsonl")} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestPlanViewRefuses(t *testing.T) {
	f := newViewFixture(t)
	for _, tc := range []struct {
		name, why, want string
		cfg             ViewConfig
	}{
		{name: "missing rw", why: "a writable path must exist: a typo must not silently give nothing",
			cfg: ViewConfig{Writable: []string{filepath.Join(f.root, "nope")}}, want: "no such file"},
		{name: "rw root", why: "the whole host writable would undo the view",
			cfg: ViewConfig{Writable: []string{"/"}}, want: "whole host"},
		{name: "own file in rw", why: "the worker could move the audit log and put its own in place",
			cfg: ViewConfig{Writable: []string{f.proj}, Own: []string{filepath.Join(f.proj, "audit.jsonl")}}, want: "lies in the writable path"},
		{name: "exec in rw", why: "the worker could replace a program it may run",
			cfg: ViewConfig{Writable: []string{filepath.Dir(f.tool)}, Exec: []string{f.tool}}, want: "could replace the program"},
		{name: "exec in --home", why: "--home is writable too",
			cfg: ViewConfig{Home: f.home, HomeDir: f.root, Exec: []string{f.tool}}, want: "could replace the program"},
		{name: "own in --home", why: "--home is writable too",
			cfg: ViewConfig{Home: f.home, HomeDir: f.own, Own: []string{filepath.Join(f.own, "policy.yaml")}}, want: "lies in the writable path"},
		{name: "--home a file", why: "a home is a directory",
			cfg: ViewConfig{Home: f.home, HomeDir: f.tool}, want: "not a directory"},
		{name: "--home without HOME", why: "there is no path to put it at",
			cfg: ViewConfig{HomeDir: f.own}, want: "no $HOME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlanView(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PlanView: err %v, want one containing %q (%s)", err, tc.want, tc.why)
			}
		})
	}
}

func TestPlanView(t *testing.T) {
	f := newViewFixture(t)
	policy := filepath.Join(f.own, "policy.yaml")
	audit := filepath.Join(f.proj, "audit.jsonl")
	work := filepath.Join(f.root, "work")
	link := filepath.Join(f.root, "link")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(work, link); err != nil {
		t.Fatal(err)
	}
	v, err := PlanView(ViewConfig{
		Writable: []string{link, work},
		ReadOnly: []string{f.root},
		Home:     f.home,
		Exec:     []string{"/usr/bin/true", f.tool},
		Own:      []string{policy, audit},
		Hide:     []string{filepath.Join(f.home, ".ssh")},
		Cwd:      f.proj,
		UID:      os.Getuid(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.Writable, []string{work}) {
		t.Errorf("Writable = %q, want the link resolved and deduplicated: %q", v.Writable, work)
	}
	if v.Home != f.home || v.HomeFrom != "" {
		t.Errorf("Home = %q from %q, want a private %q", v.Home, v.HomeFrom, f.home)
	}
	// t.TempDir lies below /tmp, a scratch directory: the tool must be
	// bound read-only, /usr/bin/true needs nothing.
	if !slices.Contains(v.ReadOnly, f.tool) || slices.Contains(v.ReadOnly, "/usr/bin/true") {
		t.Errorf("ReadOnly = %q, want %q (in a private /tmp) and not /usr/bin/true", v.ReadOnly, f.tool)
	}
	// The fixture is shown (--ro), so the folders of nsgate's files are
	// hidden whole, the audit log's too although it is the working
	// directory (the worker then starts in its home).
	for _, want := range []string{policy, f.own, audit, f.proj, filepath.Join(f.home, ".ssh")} {
		if !slices.Contains(v.Hide, want) {
			t.Errorf("Hide = %q, missing %q", v.Hide, want)
		}
	}
	var scratch []string
	for _, s := range v.Scratch {
		scratch = append(scratch, s.Path)
	}
	if !slices.Contains(scratch, "/tmp") {
		t.Errorf("Scratch = %q, want /tmp", scratch)
	}
}

// TestPlanViewOwnFiles: where the folder of one of nsgate's files can be
// hidden, it is; where the worker needs it, the file alone is and PlanView
// warns; below a private directory nothing needs hiding.
func TestPlanViewOwnFiles(t *testing.T) {
	f := newViewFixture(t)
	policy := filepath.Join(f.own, "policy.yaml")
	// Below the private /tmp and not shown: no folder to hide.
	v, err := PlanView(ViewConfig{Own: []string{policy}, UID: os.Getuid()})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(v.Hide, f.own) {
		t.Errorf("Hide = %q: %q is below the private /tmp, nothing to hide", v.Hide, f.own)
	}
	// The folder is shown and holds a path the worker reads: only the file
	// can be covered, and PlanView says so.
	for _, cfg := range []ViewConfig{
		{Own: []string{policy}, ReadOnly: []string{f.own}, UID: os.Getuid()},
		{Own: []string{policy}, ReadOnly: []string{f.root}, Exec: []string{filepath.Join(f.own, "tool")}, UID: os.Getuid()},
	} {
		v, err = PlanView(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "folder of their own") || slices.Contains(v.Hide, f.own) || !slices.Contains(v.Hide, policy) {
			t.Errorf("policy in a folder the worker needs: Hide %q, warnings %q; want the file hidden and one warning", v.Hide, v.Warnings)
		}
	}
	// Shown, and nothing the worker needs is in it: hidden whole.
	v, err = PlanView(ViewConfig{Own: []string{policy}, ReadOnly: []string{f.root}, UID: os.Getuid()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(v.Hide, f.own) {
		t.Errorf("Hide = %q, want the folder %q", v.Hide, f.own)
	}
}

func TestPlanViewHomeDir(t *testing.T) {
	f := newViewFixture(t)
	v, err := PlanView(ViewConfig{Home: f.home, HomeDir: f.proj, Exec: []string{f.tool}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Home != f.home || v.HomeFrom != f.proj {
		t.Errorf("Home = %q from %q, want %q from %q", v.Home, v.HomeFrom, f.home, f.proj)
	}
}

// TestPrivateRuntimeDir: only a directory the caller owns, mode 0700, is
// taken for a runtime directory (the XDG specification's requirements);
// anything else is left as the host has it.
func TestPrivateRuntimeDir(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	rt := mk("rt", 0o700)
	open := mk("open", 0o755)
	link := filepath.Join(root, "link")
	if err := os.Symlink(rt, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o600)
	uid := os.Getuid()
	for _, tc := range []struct {
		dir  string
		uid  int
		want string
	}{
		{rt, uid, rt},
		{link, uid, rt},
		{rt, uid + 1, ""}, // another user's
		{open, uid, ""},   // others may enter
		{file, uid, ""},
		{filepath.Join(root, "missing"), uid, ""},
		{"relative", uid, ""},
		{"", uid, ""},
		{"/", 0, ""},
	} {
		if got := privateRuntimeDir(tc.dir, tc.uid); got != tc.want {
			t.Errorf("privateRuntimeDir(%q, %d) = %q, want %q", tc.dir, tc.uid, got, tc.want)
		}
	}
}

func TestSessionBusPaths(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{"", nil},
		{"unix:path=/run/user/1000/bus", []string{"/run/user/1000/bus"}},
		{"unix:path=/srv/rt/bus,guid=0123abcd", []string{"/srv/rt/bus"}},
		{"unix:guid=0123,path=/a%20b/bus", []string{"/a b/bus"}},
		{"unix:abstract=/tmp/dbus-x;unix:path=/srv/bus;tcp:host=localhost,port=1", []string{"/srv/bus"}},
		{"unix:tmpdir=/tmp", nil},
		{"unix:dir=/srv", nil},
		{"unix:path=relative/bus", nil},
		{"unix:path=/bad%zz", nil},
		{"unixexec:path=/usr/bin/prog", nil},
		{"unix:path=/srv/x/../bus", []string{"/srv/bus"}},
	} {
		if got := SessionBusPaths(tc.addr); !slices.Equal(got, tc.want) {
			t.Errorf("SessionBusPaths(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestPlanViewRuntimeDir: the caller's runtime directory becomes a
// private tmpfs wherever it lies (here below a --ro path in /tmp, which
// would show it again), unless the caller made it writable; the session
// bus socket is hidden wherever it lies.
func TestPlanViewRuntimeDir(t *testing.T) {
	f := newViewFixture(t)
	rt := filepath.Join(f.root, "rt")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	bus := filepath.Join(f.proj, "bus")
	scratch := func(v View) []string {
		var out []string
		for _, s := range v.Scratch {
			out = append(out, s.Path)
		}
		return out
	}
	agent := filepath.Join(f.proj, "agent.sock")
	v, err := PlanView(ViewConfig{ReadOnly: []string{f.root}, Home: f.home, UID: os.Getuid(), RuntimeDir: rt, SessionBus: "unix:path=" + bus + ",guid=00", SSHAgent: agent})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(scratch(v), rt) {
		t.Errorf("Scratch = %q, want the runtime directory %q", scratch(v), rt)
	}
	if !slices.Contains(v.Hide, bus) || !slices.Contains(v.Hide, agent) {
		t.Errorf("Hide = %q, want the session bus %q and the SSH agent %q", v.Hide, bus, agent)
	}
	v, err = PlanView(ViewConfig{Writable: []string{rt}, Home: f.home, UID: os.Getuid(), RuntimeDir: rt})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(scratch(v), rt) {
		t.Errorf("Scratch = %q: the runtime directory the caller made writable (--rw) became private", scratch(v))
	}
	// Not private (open to others), but its bus and systemd's socket are
	// hidden all the same.
	os.Chmod(rt, 0o755)
	v, err = PlanView(ViewConfig{Home: f.home, UID: os.Getuid(), RuntimeDir: rt})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(scratch(v), rt) {
		t.Errorf("Scratch = %q: a runtime directory of mode 0755 became private", scratch(v))
	}
	for _, s := range []string{"bus", "systemd/private"} {
		if !slices.Contains(v.Hide, filepath.Join(rt, s)) {
			t.Errorf("Hide = %q, missing %s", v.Hide, filepath.Join(rt, s))
		}
	}
	// Directories are never taken for sockets: "/" would cover the host.
	v, err = PlanView(ViewConfig{Home: f.home, UID: os.Getuid(), SessionBus: "unix:path=/", SSHAgent: f.proj})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(v.Hide, "/") || slices.Contains(v.Hide, f.proj) {
		t.Errorf("Hide = %q: a directory named as a socket was hidden", v.Hide)
	}
}

func TestEngineSocketPaths(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{"", nil},
		{"unix:///var/run/docker.sock", []string{"/var/run/docker.sock"}},
		{"unix:/run/podman/podman.sock", []string{"/run/podman/podman.sock"}},
		{"unix:///run/x/../docker.sock", []string{"/run/docker.sock"}},
		{"/run/containerd/containerd.sock", []string{"/run/containerd/containerd.sock"}},
		{"tcp://127.0.0.1:2375", nil},
		{"ssh://user@host.test/run/podman/podman.sock", nil},
		{"npipe:////./pipe/docker_engine", nil},
		{"unix://relative.sock", nil},
		{"docker.sock", nil},
	} {
		if got := EngineSocketPaths(tc.addr); !slices.Equal(got, tc.want) {
			t.Errorf("EngineSocketPaths(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestPlanViewHostDaemons: the sockets the container-engine variables and
// DBUS_SYSTEM_BUS_ADDRESS name are hidden, and so are the engines' places
// in a runtime directory left as the host has it: a directory whole,
// unless the worker needs a path in it; then each socket it holds.
func TestPlanViewHostDaemons(t *testing.T) {
	f := newViewFixture(t)
	rt := filepath.Join(f.root, "rt")
	podman := filepath.Join(rt, "podman")
	if err := os.MkdirAll(podman, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(rt, 0o755) // not private: the view leaves it as it is
	sock := filepath.Join(podman, "podman.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	docker := filepath.Join(rt, "docker.sock")
	if err := os.WriteFile(docker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	named := []string{filepath.Join(f.proj, "d.sock"), filepath.Join(f.proj, "c.sock"), filepath.Join(f.proj, "k.sock"), filepath.Join(f.proj, "sys.sock")}
	v, err := PlanView(ViewConfig{
		Home: f.home, UID: os.Getuid(), RuntimeDir: rt,
		EngineHosts: []string{"unix://" + named[0], "unix:" + named[1], named[2], "tcp://127.0.0.1:2375"},
		SystemBus:   "unix:path=" + named[3],
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append(named, podman, docker) {
		if !slices.Contains(v.Hide, want) {
			t.Errorf("Hide = %q, missing %s", v.Hide, want)
		}
	}
	// A program the worker may run lies in the engine's directory: the
	// directory stays, its socket is hidden.
	tool := filepath.Join(podman, "tool")
	if err := os.WriteFile(tool, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err = PlanView(ViewConfig{Home: f.home, UID: os.Getuid(), RuntimeDir: rt, Exec: []string{tool}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(v.Hide, podman) || !slices.Contains(v.Hide, sock) {
		t.Errorf("Hide = %q, want %s and not %s", v.Hide, sock, podman)
	}
	if len(v.Warnings) == 0 {
		t.Errorf("no warning that sockets made later in %s stay visible", podman)
	}
}

// TestPlanViewSocketDir: the directory of a socket hidden one by one is
// hidden too when it holds sockets alone (a daemon's restart would undo
// the cover of the socket), and left when it holds anything else.
func TestPlanViewSocketDir(t *testing.T) {
	f := newViewFixture(t)
	alone := filepath.Join(f.root, "eng")
	mixed := filepath.Join(f.root, "srv")
	for _, d := range []string{alone, mixed} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", filepath.Join(d, "d.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
	}
	if err := os.WriteFile(filepath.Join(mixed, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Shown read-only (--ro): the temporary directory is private in a view.
	v, err := PlanView(ViewConfig{ReadOnly: []string{f.root}, Home: f.home, UID: os.Getuid(),
		EngineHosts: []string{"unix://" + filepath.Join(alone, "d.sock"), filepath.Join(mixed, "d.sock")}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(v.Hide, alone) {
		t.Errorf("Hide = %q, want the directory %s, which holds the socket alone", v.Hide, alone)
	}
	if slices.Contains(v.Hide, mixed) || !slices.Contains(v.Hide, filepath.Join(mixed, "d.sock")) {
		t.Errorf("Hide = %q, want %s/d.sock and not the directory, which holds a file too", v.Hide, mixed)
	}
}

// TestPlanViewPrograms: the places nsgate starts programs from on the
// host must not be writable for the worker, also where no file is yet
// (nsgate-init in ../libexec/nsgate), through a link, or by --home.
func TestPlanViewPrograms(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bin", "libexec", "other", "proj"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "proj"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	progs := []string{filepath.Join(root, "bin", "nsgate"), filepath.Join(root, "bin", "nsgate-init"), filepath.Join(root, "bin", "..", "libexec", "nsgate", "nsgate-init")}
	linked := []string{filepath.Join(root, "link", "nsgate", "nsgate-init")} // below a link into proj, not made yet
	// nsgate-init beside nsgate as a link to a build in proj, as a
	// developer might install it.
	if err := os.WriteFile(filepath.Join(root, "proj", "nsgate-init"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "proj", "nsgate-init"), filepath.Join(root, "other", "nsgate-init")); err != nil {
		t.Fatal(err)
	}
	toProj := []string{filepath.Join(root, "other", "nsgate"), filepath.Join(root, "other", "nsgate-init")}
	for _, c := range []struct {
		name  string
		cfg   ViewConfig
		progs []string
		bad   bool
	}{
		{"rw beside", ViewConfig{Writable: []string{filepath.Join(root, "bin")}}, progs, true},
		{"rw above", ViewConfig{Writable: []string{root}}, progs, true},
		{"rw libexec, not made", ViewConfig{Writable: []string{filepath.Join(root, "libexec")}}, progs, true},
		{"home", ViewConfig{Home: "/home/x", HomeDir: filepath.Join(root, "bin")}, progs, true},
		{"through a link", ViewConfig{Writable: []string{filepath.Join(root, "proj")}}, linked, true},
		{"a link to a writable path", ViewConfig{Writable: []string{filepath.Join(root, "proj")}}, toProj, true},
		{"the file itself", ViewConfig{Writable: []string{filepath.Join(root, "proj", "nsgate-init")}}, toProj, true},
		{"elsewhere", ViewConfig{Writable: []string{filepath.Join(root, "other")}}, progs, false},
		{"below the directory", ViewConfig{Writable: []string{filepath.Join(root, "proj")}}, []string{filepath.Join(root, "nsgate")}, false},
	} {
		c.cfg.Programs = c.progs
		_, err := PlanView(c.cfg)
		if c.bad && (err == nil || !strings.Contains(err.Error(), "outside the sandbox")) {
			t.Errorf("%s: err %v; want a refusal (the worker could write where nsgate starts programs from)", c.name, err)
		}
		if !c.bad && err != nil {
			t.Errorf("%s: %v; want no refusal", c.name, err)
		}
	}
}

func TestPlanViewScratchSize(t *testing.T) {
	for _, tc := range []struct {
		in, want int64
		err      bool
	}{{0, DefaultScratchSize, false}, {-1, 0, false}, {8 << 20, 8 << 20, false}, {4096, 0, true}} {
		v, err := PlanView(ViewConfig{ScratchSize: tc.in})
		if (err != nil) != tc.err || v.ScratchSize != tc.want {
			t.Errorf("ScratchSize %d: %d, %v; want %d (error %v)", tc.in, v.ScratchSize, err, tc.want, tc.err)
		}
	}
}

// TestDefaultQuotaNested: inside a nested user namespace /proc/sys/user
// shows that namespace's limits (no limit, by default); the worker's share
// is still half of the host's.
func TestDefaultQuotaNested(t *testing.T) {
	host := readSysctl("fs/inotify/max_user_instances")
	if host <= 1 {
		t.Fatalf("the host's inotify limit reads %d", host)
	}
	q := DefaultQuota(64, 0)
	if got := q.Sysctl["user/max_inotify_instances"]; got <= 0 || got > host/2 {
		t.Errorf("max_inotify_instances %d, want at most half of the host's %d", got, host)
	}
	if q.Procs == 0 || q.Procs > 64 {
		t.Errorf("Procs %d, want at most 64", q.Procs)
	}
}

// TestPlanViewHostSockets: with HostSockets (--allow-unix), every bound
// host socket the view would show is hidden, except one the user named
// itself with --ro; a path that is no socket (any more) is left alone.
func TestPlanViewHostSockets(t *testing.T) {
	f := newViewFixture(t)
	// Outside /tmp, /var/tmp and $HOME, which the view makes private
	// anyway: in the checkout, unless that lies in one of them (CI clones
	// under /tmp), then, as root, in /srv.
	d, err := hostSocketDir()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if d, err = filepath.Abs(d); err != nil {
		t.Fatal(err)
	}
	var socks []string
	for _, n := range []string{"app.sock", "shared.sock"} {
		p := filepath.Join(d, n)
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		socks = append(socks, p)
	}
	plain := filepath.Join(d, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := PlanView(ViewConfig{Home: f.home, UID: os.Getuid(), HostSockets: append(socks, plain, filepath.Join(d, "gone.sock")), ReadOnly: []string{socks[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(v.Hide, socks[0]) {
		t.Errorf("Hide = %q, missing the host socket %s", v.Hide, socks[0])
	}
	if slices.Contains(v.Hide, socks[1]) || slices.Contains(v.Hide, plain) {
		t.Errorf("Hide = %q: a socket named with --ro, or a plain file, is hidden", v.Hide)
	}
}

func TestParseNetUnix(t *testing.T) {
	const s = `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 24018 /run/systemd/private
0000000000000000: 00000002 00000000 00010000 0001 01 24019 @/tmp/.X11-unix/X0
0000000000000000: 00000003 00000000 00000000 0001 03 24020
0000000000000000: 00000002 00000000 00010000 0001 01 24021 /run/a b.sock
0000000000000000: 00000002 00000000 00010000 0001 01 24022 /run/systemd/private
0000000000000000: 00000002 00000000 00010000 0001 01 24023 rel.sock
`
	got := parseNetUnix(s)
	if want := []string{"/run/systemd/private", "/run/a b.sock"}; !slices.Equal(got, want) {
		t.Errorf("parseNetUnix = %q, want %q", got, want)
	}
	if _, err := HostSocketPaths(); err != nil {
		t.Errorf("HostSocketPaths: %v", err)
	}
}

// hostSocketDir makes a folder that the view shows from the host.
func hostSocketDir() (string, error) {
	cands := []string{"."}
	if os.Getuid() == 0 {
		cands = append(cands, "/srv", "/opt")
	}
	home, _ := os.UserHomeDir()
	for _, c := range cands {
		a, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if a, err = filepath.EvalSymlinks(a); err != nil {
			continue
		}
		private := false
		for _, p := range []string{"/tmp", "/var/tmp", "/dev/shm", "/run/user", home} {
			if p != "" && (a == p || strings.HasPrefix(a, p+"/")) {
				private = true
			}
		}
		if private {
			continue
		}
		if d, err := os.MkdirTemp(a, "nsgate-hostsockets-"); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no folder the view shows from the host can be made here (the checkout lies in a private tree and this is not root)")
}
