//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Docker, both ways docs/docker.md describes, each with a dockerd the
// test starts itself inside the sealed network namespace, with its own
// data root, exec root, pid file and socket under one temporary directory,
// so that nothing is shared with any other Docker on the machine:
//
//   - TestDocker (root only): a rootful dockerd (Debian's docker.io 20.10,
//     whose legacy builder has no BuildKit). docs/docker.md's commands, as
//     written: the prebuilt image is built, `nsgate lab` passes inside a
//     container, `nsgate run` inside a container refuses the metadata
//     address, and each container option the page lists is needed.
//   - TestDockerRootless (the test user): rootless dockerd, whose
//     RootlessKit runs nsgate as its slirp4netns: containers reach what
//     the policy allows and nothing else, and `docker run -p` publishes a
//     port through nsgate.
//
// No registry is reachable: images come from `docker import` of a root
// file system the test assembles from host files, and from the
// repository's Dockerfile (target prebuilt, FROM scratch).

// dockerPolicy approves app.test on 8080 (a static name for the app
// server) and the app server's address, for an `nsgate run` inside a
// container, whose gateway dials the address.
const dockerPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
  - cidr: 203.0.113.10/32
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
`

// dockerEnv is one dockerd of the test's own.
type dockerEnv struct {
	dir      string // everything lives here
	uid, gid int    // the daemon's and the CLI's user; -1: root
	sock     string
	env      []string  // the docker CLI's environment
	daemon   *exec.Cmd // unshare (rootful) or rootlesskit (rootless)
	exited   chan struct{}
	logPath  string
	cgroup   string // rootful: the cgroup parent of the containers
	stopped  bool
	auditDir string // rootless: NSGATE_AUDIT_DIR of the helper
}

// dockerTools fails (or skips) the test when the Docker packages are
// missing.
func dockerTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range append([]string{"docker", "dockerd", "containerd", "runc"}, tools...) {
		_, err := exec.LookPath(tool)
		need(t, tool+" (.ci/install installs docker.io and rootlesskit)", err)
	}
}

func newDockerDir(t *testing.T, uid, gid int) *dockerEnv {
	t.Helper()
	// Short: containerd's and the shims' socket paths live below it.
	dir, err := os.MkdirTemp("", "dk")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	d := &dockerEnv{dir: dir, uid: uid, gid: gid, exited: make(chan struct{})}
	for _, sub := range []string{"home", "data", "run", "tmp", "bin", "cli", "ctx"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "run"), 0o700)
	d.logPath = filepath.Join(dir, "dockerd.log")
	return d
}

// startRootful starts dockerd as root in a mount and PID namespace of its
// own (unshare): every mount it makes stays in that mount namespace, and
// every process it starts (containerd, the shims, the containers' first
// processes) is in the PID namespace, which dies with its init. A tmpfs
// over /run hides any system containerd from it. Its network namespace is
// the sealed one: no bridge (--bridge none), no iptables rules.
func startRootful(t *testing.T) *dockerEnv {
	t.Helper()
	dockerTools(t, "unshare", "docker-init")
	realRoot(t, "to start dockerd")
	d := newDockerDir(t, -1, -1)
	t.Cleanup(func() { d.cleanup(t) })
	d.sock = filepath.Join(d.dir, "docker.sock")
	d.cgroup = "nsgate-it-" + filepath.Base(d.dir)
	writeFile(t, d.dir, "daemon.json", "{}\n")
	initPath, _ := exec.LookPath("docker-init")
	args := []string{"--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc", "--kill-child",
		initPath, "--", "sh", "-c", `mount -t tmpfs -o mode=0755 tmpfs /run && exec dockerd "$@"`, "sh",
		"--config-file", filepath.Join(d.dir, "daemon.json"),
		"--data-root", filepath.Join(d.dir, "data"),
		"--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "docker.pid"),
		"-H", "unix://" + d.sock,
		"--bridge", "none", "--iptables=false",
		"--cgroup-parent", "/" + d.cgroup,
	}
	d.daemon = exec.Command("unshare", args...)
	d.daemon.Env = append(os.Environ(), "HOME="+filepath.Join(d.dir, "home"))
	d.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(d.dir, "home"),
		"DOCKER_HOST=unix://" + d.sock,
		"DOCKER_CONFIG=" + filepath.Join(d.dir, "cli"),
	}
	d.start(t)
	return d
}

// startRootless starts rootless dockerd as the test user, the way
// docs/docker.md says: dockerd-rootless.sh, RootlessKit's slirp4netns
// network driver and port driver, nsgate (a link named slirp4netns) as
// RootlessKit's slirp4netns binary, and the policy and audit directory in
// the environment. RootlessKit's own default for the helper's sandbox and
// seccomp ("auto") is kept: it passes --enable-sandbox --enable-seccomp.
func startRootless(t *testing.T) *dockerEnv {
	t.Helper()
	dockerTools(t, "rootlesskit", "newuidmap", "newgidmap")
	const script = "/usr/share/docker.io/contrib/dockerd-rootless.sh"
	_, err := os.Stat(script)
	need(t, script+" (package docker.io)", err)
	realRoot(t, "to run dockerd as the unprivileged test user")
	u, err := user.Lookup(testUserName())
	need(t, "the unprivileged test user "+testUserName()+" (.ci/run creates it)", err)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	d := newDockerDir(t, uid, gid)
	t.Cleanup(func() { d.cleanup(t) })
	run := filepath.Join(d.dir, "run")
	d.sock = filepath.Join(run, "docker.sock")
	d.auditDir = filepath.Join(d.dir, "audit")
	if err := os.Mkdir(d.auditDir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(d.dir, "bin", "slirp4netns")
	if err := os.Symlink(nsgateBin, link); err != nil {
		t.Fatal(err)
	}
	policy := writeFile(t, d.dir, "policy.yaml", dockerPolicy)
	if err := chownR(d.dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(d.dir, "home"),
		"XDG_RUNTIME_DIR=" + run,
		"TMPDIR=" + filepath.Join(d.dir, "tmp"), // RootlessKit's state directory
	}
	d.env = append(append([]string{}, base...),
		"DOCKER_HOST=unix://"+d.sock,
		"DOCKER_CONFIG="+filepath.Join(d.dir, "cli"))
	d.daemon = exec.Command(script, "--data-root", filepath.Join(d.dir, "data"), "--host", "unix://"+d.sock)
	d.daemon.Env = append(base,
		"DOCKERD_ROOTLESS_ROOTLESSKIT_NET=slirp4netns",
		"DOCKERD_ROOTLESS_ROOTLESSKIT_MTU=65520",
		"DOCKERD_ROOTLESS_ROOTLESSKIT_PORT_DRIVER=slirp4netns",
		"DOCKERD_ROOTLESS_ROOTLESSKIT_FLAGS=--slirp4netns-binary="+link,
		"NSGATE_POLICY="+policy,
		"NSGATE_AUDIT_DIR="+d.auditDir,
	)
	d.daemon.Dir = d.dir
	d.daemon.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)},
	}}
	d.start(t)
	return d
}

// start runs the daemon command and waits until dockerd answers.
func (d *dockerEnv) start(t *testing.T) {
	t.Helper()
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	d.daemon.Stdout, d.daemon.Stderr = logf, logf
	if d.daemon.SysProcAttr == nil {
		d.daemon.SysProcAttr = &syscall.SysProcAttr{}
	}
	d.daemon.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := d.daemon.Start(); err != nil {
		logf.Close()
		t.Fatalf("start dockerd: %v", err)
	}
	go func() {
		d.daemon.Wait()
		logf.Close()
		close(d.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cmd := d.cmd("version", "--format", "{{.Server.Version}}")
		out, err := cmd.Output()
		if err == nil {
			t.Logf("dockerd %s is up (%s)", strings.TrimSpace(string(out)), d.dir)
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("dockerd exited while starting:\n%s", d.logTail(30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd did not answer within 60 s:\n%s", d.logTail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *dockerEnv) logTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	return tailLines(string(b), n)
}

// cmd is a docker CLI command against this daemon, as its user.
func (d *dockerEnv) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command("docker", args...)
	cmd.Env = d.env
	cmd.Dir = d.dir
	if d.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(d.uid), Gid: uint32(d.gid), Groups: []uint32{uint32(d.gid)},
		}}
	}
	return cmd
}

// docker runs the docker CLI to completion (bounded) and logs it.
func (d *dockerEnv) docker(t *testing.T, args ...string) result {
	t.Helper()
	return d.dockerIn(t, nil, args...)
}

// dockerIn is docker with stdin.
func (d *dockerEnv) dockerIn(t *testing.T, stdin *strings.Reader, args ...string) result {
	t.Helper()
	cmd := d.cmd(args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	r := runBounded(t, cmd, 3*time.Minute, "docker "+strings.Join(args, " "), nil)
	t.Logf("docker %s -> %d (%s)\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code,
		r.elapsed.Round(time.Millisecond), tailLines(r.stdout, 40), tailLines(r.stderr, 20))
	return r
}

// importImage imports a root file system directory as image tag.
func (d *dockerEnv) importImage(t *testing.T, root, tag string) {
	t.Helper()
	tarball := root + ".tar"
	if out, err := exec.Command("tar", "--numeric-owner", "-C", root, "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	os.Chmod(tarball, 0o644)
	if r := d.docker(t, "import", tarball, tag); r.code != 0 {
		t.Fatalf("docker import: exit %d\n%s", r.code, r.stderr)
	}
}

// stop removes every container, ends dockerd and waits for it (SIGTERM,
// then SIGKILL after 30 s). It reports whether dockerd ended on SIGTERM.
func (d *dockerEnv) stop(t *testing.T) bool {
	if d.stopped || d.daemon == nil || d.daemon.Process == nil {
		return true
	}
	d.stopped = true
	if out, err := d.cmd("ps", "-aq").Output(); err == nil {
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			rm := d.cmd(append([]string{"rm", "-f"}, ids...)...)
			rm.Run()
		}
	}
	target := d.daemon.Process.Pid
	if d.uid < 0 {
		// unshare's child is the PID namespace's init (docker-init), which
		// passes SIGTERM on to dockerd.
		if kids := childPIDs(target); len(kids) == 1 {
			target = kids[0]
		}
	}
	syscall.Kill(target, syscall.SIGTERM)
	select {
	case <-d.exited:
		return true
	case <-time.After(30 * time.Second):
		d.daemon.Process.Kill()
		<-d.exited
		t.Errorf("dockerd did not end within 30 s of SIGTERM; killed:\n%s", d.logTail(20))
		return false
	}
}

// cleanup stops dockerd if the test has not, then checks that nothing is
// left: no process that names the directory (dockerd, containerd, a shim,
// RootlessKit, the nsgate helper, whose API socket lies below it), no
// RootlessKit port proxy of the test user, no mount below the directory,
// and no cgroup of the test's containers. Whatever is left is killed or
// removed, and the test fails.
func (d *dockerEnv) cleanup(t *testing.T) {
	d.stop(t)
	deadline := time.Now().Add(10 * time.Second)
	var left []string
	for {
		left = d.leftovers()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("dockerd left processes behind: %v", left)
		for _, p := range left {
			if pid, err := strconv.Atoi(strings.SplitN(p, " ", 2)[0]); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if m := mountsBelow(d.dir); len(m) > 0 {
		t.Errorf("dockerd left mounts behind: %v", m)
		for i := len(m) - 1; i >= 0; i-- {
			syscall.Unmount(m[i], syscall.MNT_DETACH)
		}
	}
	if d.cgroup != "" {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + d.cgroup)
		for _, c := range dirs {
			// The containers' own cgroups are gone with them; the parent
			// is dockerd's to create and ours to remove.
			if err := os.Remove(c); err != nil {
				t.Errorf("cgroup %s: %v", c, err)
			}
		}
	}
	os.RemoveAll(d.dir)
}

// leftovers lists the processes (as "PID cmdline") that belong to this
// set-up: any that names the directory on its command line, and the
// test user's RootlessKit port proxies.
func (d *dockerEnv) leftovers() []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		mine := strings.Contains(cmdline, d.dir)
		if !mine && d.uid >= 0 && strings.Contains(cmdline, "rootlesskit-docker-proxy") {
			var st syscall.Stat_t
			mine = syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == d.uid
		}
		if mine {
			out = append(out, fmt.Sprintf("%d %s", pid, cmdline))
		}
	}
	return out
}

// childPIDs lists the children of pid.
func childPIDs(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// mountsBelow lists our mount namespace's mount points at or below dir.
func mountsBelow(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// busyboxRoot assembles a root file system of static busybox (a shell) and
// the static nsgate binary (its hidden __probe is the client and server).
func busyboxRoot(t *testing.T, dir string) string {
	t.Helper()
	_, err := os.Stat("/bin/busybox")
	need(t, "a static /bin/busybox (package busybox-static) for the test image", err)
	root := filepath.Join(dir, "busybox-root")
	for _, sub := range []string{"bin", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"))
	installNsgate(t, filepath.Join(root, "bin"))
	for _, a := range []string{"sh", "cat", "sleep", "true"} {
		os.Symlink("busybox", filepath.Join(root, "bin", a))
	}
	return root
}

// userlandRoot assembles the smallest distribution-like root file system
// the lab needs, from the host's own files: dash as /bin/sh, a dynamically
// linked true, the C library and its loader (at the paths ldd names), and
// /tmp and /var/tmp. It stands in for a base image such as debian:12-slim,
// which cannot be pulled here.
func userlandRoot(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "userland-root")
	mk := func(p string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Join(root, p), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(root, p), mode)
	}
	mk("usr/bin", 0o755)
	mk("etc", 0o755)
	mk("tmp", os.ModeSticky|0o777)
	mk("var/tmp", os.ModeSticky|0o777)
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	progs := map[string]string{"/bin/dash": "usr/bin/dash", "/bin/true": "usr/bin/true"}
	for src, dst := range progs {
		copyFile(t, src, filepath.Join(root, dst))
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v (want a dynamically linked program)", src, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			var lib string
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				lib = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				lib = f[0] // the loader
			default:
				continue
			}
			p := filepath.Join(root, lib)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			copyFile(t, lib, p) // through links: the file itself
		}
	}
	if err := os.Symlink("dash", filepath.Join(root, "usr/bin/sh")); err != nil {
		t.Fatal(err)
	}
	return root
}

// The container options of docs/docker.md's `nsgate run` and `nsgate lab`
// commands, in its order.
var dockerRunOptions = []string{
	"--device", "/dev/net/tun",
	"--security-opt", "seccomp=unconfined",
	"--security-opt", "apparmor=unconfined",
	"--security-opt", "systempaths=unconfined",
}

// withoutOption returns dockerRunOptions less the pair whose value is v.
func withoutOption(v string) []string {
	var out []string
	for i := 0; i < len(dockerRunOptions); i += 2 {
		if dockerRunOptions[i+1] != v {
			out = append(out, dockerRunOptions[i], dockerRunOptions[i+1])
		}
	}
	return out
}

func TestDocker(t *testing.T) {
	needSealed(t)
	d := startRootful(t)
	t.Run("build-prebuilt", d.testBuild)
	if t.Failed() {
		t.Fatal("no nsgate image: the other subtests need it")
	}
	t.Run("run-refuses-metadata", d.testRun)
	t.Run("options-needed", d.testOptions)
	t.Run("lab", d.testLab)
	t.Run("stop", func(t *testing.T) {
		if !d.stop(t) {
			return
		}
		if left := d.leftovers(); len(left) > 0 {
			t.Errorf("processes outlived dockerd: %v", left)
		}
		if m := mountsBelow(d.dir); len(m) > 0 {
			t.Errorf("mounts outlived dockerd: %v", m)
		}
	})
}

// testBuild: docs/docker.md's `docker build --target prebuilt -t nsgate .`
// with the legacy builder, from a context holding the repository's
// Dockerfile, .dockerignore and bin/nsgate; the image prints nsgate's
// version and runs as 65532.
func (d *dockerEnv) testBuild(t *testing.T) {
	ctx := filepath.Join(d.dir, "ctx")
	if err := os.MkdirAll(filepath.Join(ctx, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "../Dockerfile", filepath.Join(ctx, "Dockerfile"))
	copyFile(t, "../.dockerignore", filepath.Join(ctx, ".dockerignore"))
	installNsgate(t, filepath.Join(ctx, "bin"))
	cmd := d.cmd("build", "--target", "prebuilt", "-t", "nsgate", ".")
	cmd.Dir = ctx
	r := runBounded(t, cmd, 3*time.Minute, "docker build", nil)
	t.Logf("docker build --target prebuilt -t nsgate . -> %d\n%s\n%s", r.code, tailLines(r.stdout, 12), r.stderr)
	if r.code != 0 {
		t.Fatalf("docker build --target prebuilt: exit %d", r.code)
	}
	if strings.Contains(r.stdout, "FROM ${GO_IMAGE}") || strings.Contains(r.stdout, " AS build") {
		t.Errorf("the legacy builder went through the build stage:\n%s", r.stdout)
	}
	r = d.docker(t, "run", "--rm", "--network", "none", "nsgate")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "nsgate ") {
		t.Errorf("docker run --rm nsgate: exit %d stdout %q, want nsgate's version line", r.code, r.stdout)
	}
	r = d.docker(t, "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", "nsgate")
	if got := strings.TrimSpace(r.stdout); got != `65532:65532 ["/usr/local/bin/nsgate"]` {
		t.Errorf("image user and entrypoint %q, want 65532:65532 and nsgate", got)
	}
}

// testRun: docs/docker.md's `nsgate run` command in the nsgate image. The
// container's network is the sealed namespace (--network host of a
// dockerd started there), where the fake servers are: the approved app
// answers, the metadata address is refused by nsgate (the worker sees the
// refusal, the fake metadata server sees nothing, the audit log holds
// the denial), and the log verifies.
func (d *dockerEnv) testRun(t *testing.T) {
	pdir := filepath.Join(d.dir, "nsgate-etc")
	adir := filepath.Join(d.dir, "nsgate-audit")
	for _, p := range []string{pdir, adir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	policy := writeFile(t, pdir, "policy.yaml", dockerPolicy)
	if err := os.Chown(adir, 65532, 65532); err != nil { // the image's user writes the log
		t.Fatal(err)
	}
	run := func(addr string) result {
		args := append([]string{"run", "--rm", "--network", "host"}, dockerRunOptions...)
		args = append(args,
			"-v", policy+":/etc/nsgate/policy.yaml:ro",
			"-v", adir+":/var/log/nsgate",
			"nsgate", "run", "--policy", "/etc/nsgate/policy.yaml", "--audit", "/var/log/nsgate/audit.jsonl",
			"--", "/usr/local/bin/nsgate", "__probe", "tcp", addr)
		return d.docker(t, args...)
	}
	hits := countContainerTargets()
	app := run("app.test:8080")
	if app.code != 0 || !strings.HasPrefix(app.stdout, "ok ") || !strings.Contains(app.stdout, " 200 ") {
		t.Errorf("approved app.test:8080: exit %d %q, want the app's 200", app.code, app.stdout)
	}
	meta := run(metadataV4 + ":80")
	if meta.code == 0 || !strings.HasPrefix(meta.stdout, "refused ") {
		t.Errorf("metadata address: exit %d %q, want the worker to see a refusal", meta.code, meta.stdout)
	}
	if !strings.Contains(meta.stderr, "rule=builtin:metadata") {
		t.Errorf("nsgate's stderr does not name the metadata refusal: %q", meta.stderr)
	}
	other := run(otherV4 + ":8080")
	if other.code == 0 || !strings.HasPrefix(other.stdout, "refused ") {
		t.Errorf("unapproved address: exit %d %q, want a refusal", other.code, other.stdout)
	}
	hits.check(t) // one connection at the app, none at the metadata or unapproved server
	for _, r := range []result{app, meta, other} {
		if strings.Contains(r.stderr, "running without proc") || strings.Contains(r.stderr, "warning") {
			t.Errorf("nsgate warned with the documented options: %q", r.stderr)
		}
	}

	log := filepath.Join(adir, "audit.jsonl")
	recs := readAudit(t, log)
	if rec, ok := findFlow(recs, "deny", metadataV4+":80"); !ok || rec.str("rule") != "builtin:metadata" {
		t.Errorf("no deny flow for %s:80 with rule builtin:metadata in %s", metadataV4, log)
	}
	if rec, ok := findFlow(recs, "deny", otherV4+":8080"); !ok || rec.str("rule") != "default" {
		t.Errorf("no deny flow for %s:8080 with rule default", otherV4)
	}
	var allowed bool
	for _, rec := range recs {
		if rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == "app.test" && rec.str("upstream") == appV4+":8080" {
			allowed = true
		}
	}
	if !allowed {
		t.Errorf("no allow flow for app.test in %s", log)
	}
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", log); v.code != 0 || !strings.HasPrefix(v.stdout, "ok: ") {
		t.Errorf("audit verify: exit %d %q %q", v.code, v.stdout, v.stderr)
	}
}

// testOptions: each option docs/docker.md lists is needed, and fails as
// the page says without it. AppArmor is checked only on a kernel that has
// it (Docker applies docker-default there); this one is said in the log.
func (d *dockerEnv) testOptions(t *testing.T) {
	probe := []string{"nsgate", "run", "--", "/usr/local/bin/nsgate", "__probe", "tcp", metadataV4 + ":80"}
	cases := []struct {
		option, want string
		code         int // nsgate's exit status, or 1 (the probe's, for a run that went ahead)
	}{
		{"/dev/net/tun", "open /dev/net/tun", 125},
		{"seccomp=unconfined", "seccomp=unconfined", 125},
		{"systempaths=unconfined", "running without proc", 1},
	}
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil && strings.TrimSpace(string(b)) == "Y" {
		cases = append(cases, struct {
			option, want string
			code         int
		}{"apparmor=unconfined", "", 125})
	} else {
		t.Logf("this kernel has no AppArmor: apparmor=unconfined is not checked here")
	}
	for _, tc := range cases {
		args := append(append([]string{"run", "--rm", "--network", "none"}, withoutOption(tc.option)...), probe...)
		r := d.docker(t, args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("without %s: exit %d stderr %q; want exit %d and %q", tc.option, r.code, r.stderr, tc.code, tc.want)
		}
	}
	// With all of them, nsgate goes ahead with its own /proc.
	r := d.docker(t, append(append([]string{"run", "--rm", "--network", "none"}, dockerRunOptions...), probe...)...)
	if r.code != 1 || !strings.HasPrefix(r.stdout, "refused ") || strings.Contains(r.stderr, "running without proc") {
		t.Errorf("with every option: exit %d stdout %q stderr %q; want the probe's refusal and no warning", r.code, r.stdout, r.stderr)
	}
}

// testLab: docs/docker.md's lab image (nsgate copied onto a base image
// with a userland; here the base is imported, as no registry is
// reachable) and its `nsgate lab` command: every attack blocked, every
// control through, and the evidence says so.
func (d *dockerEnv) testLab(t *testing.T) {
	d.importImage(t, userlandRoot(t, d.dir), "localhost/userland:it")
	lab := strings.NewReader(dockerfileLab)
	if r := d.dockerIn(t, lab, "build", "--build-arg", "BASE=localhost/userland:it", "-t", "nsgate-lab", "-"); r.code != 0 {
		t.Fatalf("docker build of the lab image: exit %d", r.code)
	}
	ev := filepath.Join(d.dir, "evidence")
	if err := os.Mkdir(ev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ev, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"run", "--rm", "--network", "none"}, dockerRunOptions...),
		"-v", ev+":/evidence", "nsgate-lab", "lab", "--evidence", "/evidence")
	r := d.docker(t, args...)
	if r.code != 0 || !strings.Contains(r.stdout, "PASS: every attack was blocked and every control succeeded") {
		t.Errorf("nsgate lab in Docker: exit %d, want 0 and PASS", r.code)
	}
	e := readEvidence(t, ev)
	for _, a := range e.Attempts {
		if !a.Pass {
			t.Errorf("%s (%s): expected %s, observed %s: %s", a.ID, a.Category, a.Expected, a.Observed, a.Why)
		}
	}
	s := e.Summary
	if e.Verdict != "pass" || s.AttacksThrough != 0 || s.ControlsFailed != 0 || s.Attacks < 100 || !e.Audit.Verified {
		t.Errorf("evidence: verdict %s, %+v, audit verified %v", e.Verdict, s, e.Audit.Verified)
	}
	if e.Environment.CallerUID != 65532 {
		t.Errorf("the lab ran as uid %d, want the image's 65532", e.Environment.CallerUID)
	}
}

// dockerfileLab is docs/docker.md's lab image.
const dockerfileLab = `ARG BASE=debian:12-slim
FROM ${BASE}
COPY --from=nsgate /usr/local/bin/nsgate /usr/local/bin/nsgate-init /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nsgate"]
`

func TestDockerRootless(t *testing.T) {
	needSealed(t)
	need(t, "a world-usable /dev/net/tun (chmod 0666)", tunUsable())
	d := startRootless(t)
	d.importImage(t, busyboxRoot(t, d.dir), "localhost/busybox-nsgate:it")
	t.Run("policy", d.testRootlessPolicy)
	t.Run("publish", d.testRootlessPublish)
	t.Run("helper-sandboxed", d.testRootlessHelper)
	t.Run("stop", d.testRootlessStop)
}

// rootlessAudit returns the helper's audit file (RootlessKit starts one
// helper, for its own network namespace: pid-<PID>.jsonl) and its records.
func (d *dockerEnv) rootlessAudit(t *testing.T) (string, []record) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(d.auditDir, "*.jsonl"))
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "pid-") {
		t.Fatalf("audit directory holds %v, want one pid-<PID>.jsonl", files)
	}
	return files[0], readAudit(t, files[0])
}

// testRootlessPolicy: a container of the rootless dockerd reaches the
// approved name and nothing else: the metadata address, an unapproved
// address and an unapproved name are refused, the fake servers behind
// them see nothing, and the helper's audit log holds each decision.
func (d *dockerEnv) testRootlessPolicy(t *testing.T) {
	hits := countContainerTargets()
	probes := containerProbes()
	r := d.docker(t, "run", "--rm", "localhost/busybox-nsgate:it", "sh", "-c", strings.Join(probeScript("nsgate", probes), "; ")+"; true")
	if r.code != 0 {
		t.Fatalf("docker run: exit %d\n%s", r.code, r.stderr)
	}
	checkProbes(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), probes, false)
	hits.check(t)

	file, recs := d.rootlessAudit(t)
	var allowed, nameDenied bool
	for _, rec := range recs {
		if rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == "app.test" && rec.str("upstream") == appV4+":8080" {
			allowed = true
		}
		if rec.str("event") == "dns" && rec.str("qname") == "evil.test" && rec.str("action") == "deny" {
			nameDenied = true
		}
	}
	if !allowed || !nameDenied {
		t.Errorf("%s: allow flow for app.test %v, dns deny for evil.test %v; want both", file, allowed, nameDenied)
	}
	for _, dn := range []struct{ dst, rule string }{{metadataV4 + ":80", "builtin:metadata"}, {otherV4 + ":8080", "default"}} {
		if rec, ok := findFlow(recs, "deny", dn.dst); !ok || rec.str("rule") != dn.rule {
			t.Errorf("no deny flow for %s with rule %s in %s", dn.dst, dn.rule, file)
		}
	}
	if recs[0].str("event") != "start" || !strings.Contains(fmt.Sprint(recs[0]["argv"]), "--enable-sandbox") {
		t.Errorf("the log does not start with the helper's start record, RootlessKit's --enable-sandbox in its argv: %v", recs[0])
	}
}

// testRootlessPublish: `docker run -p` publishes a container port; with
// RootlessKit's slirp4netns port driver the listener is nsgate's (an
// inbound forward, audited), and a client in the sealed namespace reaches
// the container's server. After `docker rm -f` the port is closed.
func (d *dockerEnv) testRootlessPublish(t *testing.T) {
	r := d.docker(t, "run", "-d", "-p", "18080:8080", "localhost/busybox-nsgate:it", "nsgate", "__probe", "serve", ":8080", "120")
	if r.code != 0 {
		t.Fatalf("docker run -d -p: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, err := httpGet("127.0.0.1:18080")
		if err == nil && strings.Contains(b, "hello from the worker") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page through 127.0.0.1:18080: %v %q", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The record is written by the helper's audit writer, in its own
	// time: wait for it a little.
	var file string
	var inbound bool
	for wait := time.Now().Add(5 * time.Second); !inbound && time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
		var recs []record
		file, recs = d.rootlessAudit(t)
		for _, rec := range recs {
			if rec.str("event") == "inbound" && rec.str("action") == "allow" && rec.str("listen") == "0.0.0.0:18080/tcp" &&
				strings.HasSuffix(rec.str("dst"), ":18080") {
				inbound = true
			}
		}
	}
	if !inbound {
		t.Errorf("no inbound record for the published port in %s", file)
	}
	if rm := d.docker(t, "rm", "-f", id); rm.code != 0 {
		t.Fatalf("docker rm -f: exit %d\n%s", rm.code, rm.stderr)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, err := httpGet("127.0.0.1:18080"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("127.0.0.1:18080 still answers after docker rm -f")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slirpHelpers lists the nsgate processes running as slirp4netns (called
// through a link of that name).
func slirpHelpers() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		argv0, _, _ := strings.Cut(string(b), "\x00")
		if strings.TrimSuffix(exe, " (deleted)") == nsgateBin && filepath.Base(argv0) == "slirp4netns" {
			out = append(out, pid)
		}
	}
	return out
}

// testRootlessHelper: RootlessKit passes --enable-sandbox --enable-seccomp
// and starts the helper as the unprivileged user, outside any user
// namespace. As slirp4netns does, nsgate's copy that does the work joins
// the user namespace of the target (RootlessKit's child) for a mount
// namespace of its own, and is confined there: CAP_NET_BIND_SERVICE only,
// no_new_privs, a seccomp filter, a root holding nothing but etc. The
// process RootlessKit holds only waits for it, and is confined too.
func (d *dockerEnv) testRootlessHelper(t *testing.T) {
	helpers := slirpHelpers()
	if len(helpers) != 2 {
		t.Fatalf("want two nsgate slirp4netns processes (the one RootlessKit holds, and its confined copy), found %v", helpers)
	}
	ns := func(pid int, kind string) string {
		s, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
		return s
	}
	root := func(pid int) string {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root", pid))
		if err != nil {
			return err.Error()
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, ",")
	}
	var targetNS string // the user namespace of RootlessKit's child, the helper's target
	for _, p := range childPIDs(d.daemon.Process.Pid) {
		if u := ns(p, "user"); u != ns(os.Getpid(), "user") {
			targetNS = u
		}
	}
	confined := 0
	for _, pid := range helpers {
		t.Logf("helper %d: CapEff %s, NoNewPrivs %s, Seccomp %s, uid %s, root [%s], userns %s (RootlessKit's child: %s)", pid,
			statusField(pid, "CapEff"), statusField(pid, "NoNewPrivs"), statusField(pid, "Seccomp"),
			statusField(pid, "Uid"), root(pid), ns(pid, "user"), targetNS)
		if statusField(pid, "NoNewPrivs") != "1" || statusField(pid, "Seccomp") != "2" {
			t.Errorf("helper %d runs without no_new_privs or seccomp", pid)
		}
		if root(pid) != "etc" {
			continue
		}
		confined = pid
		if statusField(pid, "CapEff") != "0000000000000400" {
			t.Errorf("the confined helper %d holds capabilities %s, want CAP_NET_BIND_SERVICE only", pid, statusField(pid, "CapEff"))
		}
		if targetNS == "" || ns(pid, "user") != targetNS {
			t.Errorf("the confined helper %d is in user namespace %s, want its target's %s (as slirp4netns)", pid, ns(pid, "user"), targetNS)
		}
		if strings.Fields(statusField(pid, "Uid") + " ?")[0] != strconv.Itoa(d.uid) {
			t.Errorf("the confined helper %d runs as %s, want the test user %d", pid, statusField(pid, "Uid"), d.uid)
		}
	}
	if confined == 0 {
		t.Errorf("no helper pivoted into a root holding only etc: %v", helpers)
	}
}

// testRootlessStop: stopping dockerd (SIGTERM to RootlessKit) ends every
// process, the helper included, and leaves no mount; the helper's records
// verify to the end. (RootlessKit ends the helper it holds with SIGKILL;
// the confined copy doing the work gets SIGTERM from its parent's death,
// so the log still ends with an exit record: verify has no warning.)
func (d *dockerEnv) testRootlessStop(t *testing.T) {
	file, _ := d.rootlessAudit(t)
	if !d.stop(t) {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(slirpHelpers()) > 0 || len(d.leftovers()) > 0 {
		if time.Now().After(deadline) {
			t.Errorf("left after dockerd stopped: helpers %v, processes %v", slirpHelpers(), d.leftovers())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m := mountsBelow(d.dir); len(m) > 0 {
		t.Errorf("mounts outlived dockerd: %v", m)
	}
	v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", file)
	if v.code != 0 || !strings.HasPrefix(v.stdout, "ok: ") || strings.TrimSpace(v.stderr) != "" {
		t.Errorf("audit verify %s: exit %d %q %q (want ok and no warning: the log closed with an exit record)", file, v.code, v.stdout, v.stderr)
	}
}
