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

// Rootless Podman 5 with nsgate as its pasta,
// following docs/podman.md: containers.conf's helper_binaries_dir lists a
// folder holding a link called pasta to the nsgate binary, and the policy
// and audit directory reach the helper through Podman's environment.
//
// This machine's distribution ships Podman 4, so Podman 5 runs from a
// Debian 13 root (.ci/debian13-root builds it with debootstrap). A holder
// process enters it once, in a mount namespace of its own, with
// pivot_root (a chroot would forbid the user namespaces rootless Podman
// makes): proc, /sys and /dev from the host, tmpfs on /tmp and /run, and
// the test's directory on /mnt, with the test user's passwd, group,
// subuid and subgid entries bound over the root's. Each podman command
// then joins that mount namespace (nsenter) and drops to the test user.
// Everything stays in the sealed network namespace: it is the host side
// that nsgate pasta copies (no default route there, so the container
// gets pasta's fallback, slirp4netns's 10.0.2.100/24 via 10.0.2.2).

// debian13Root is where .ci/debian13-root leaves the root, unless
// NSGATE_DEBIAN13_ROOT says otherwise.
const debian13Root = "/var/cache/nsgate/debian13"

// podman5Env is one rootless Podman 5 set-up, shared by the subtests.
type podman5Env struct {
	root     string // the Debian 13 root
	dir      string // the test's directory, /mnt inside the root
	uid, gid int
	holder   *exec.Cmd // keeps the mount namespace, pivoted into root
}

func TestPodman5(t *testing.T) {
	needSealed(t)
	p5 := newPodman5Env(t)
	t.Run("policy", p5.testPolicy)
	t.Run("publish-and-rm", p5.testPublish)
	t.Run("pid-host", p5.testPIDHost)
	t.Run("credentials", p5.testCredentials)
	// Rootful Podman refuses pasta ("pasta networking is only supported
	// for rootless mode"); nsgate pasta as root is TestPastaStandalone's.
}

func newPodman5Env(t *testing.T) *podman5Env {
	t.Helper()
	root := os.Getenv("NSGATE_DEBIAN13_ROOT")
	if root == "" {
		root = debian13Root
	}
	_, err := os.Stat(filepath.Join(root, ".nsgate-root-ok"))
	need(t, "a Debian 13 root with Podman 5 and pasta (.ci/debian13-root "+root+")", err)
	realRoot(t, "to enter the Debian 13 root and run Podman as the test user")
	u, err := user.Lookup(testUserName())
	need(t, "the unprivileged test user "+testUserName()+" (.ci/run creates it)", err)
	need(t, "a world-usable /dev/net/tun (chmod 0666)", tunUsable())
	for _, tool := range []string{"unshare", "nsenter", "runc", "tar"} {
		_, err := exec.LookPath(tool)
		need(t, tool+" on the host", err)
	}
	_, err = os.Stat("/bin/busybox")
	need(t, "a static /bin/busybox (package busybox-static) for the test image", err)

	dir, err := os.MkdirTemp("", "p5")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	p5 := &podman5Env{root: root, dir: dir}
	p5.uid, _ = strconv.Atoi(u.Uid)
	p5.gid, _ = strconv.Atoi(u.Gid)
	t.Cleanup(p5.cleanup)
	for _, d := range []string{"bin", "etc", "home", "config/containers", "data", "storage", "runroot"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The helper: a link named pasta to the nsgate binary; the runtime:
	// the host's runc (crun refuses this machine's hybrid cgroups).
	installNsgate(t, filepath.Join(dir, "bin"))
	if err := os.Symlink("nsgate", filepath.Join(dir, "bin/pasta")); err != nil {
		t.Fatal(err)
	}
	runc, _ := exec.LookPath("runc")
	copyFile(t, runc, filepath.Join(dir, "bin/runc"))
	p5.accounts(t, u.Username)
	writeFile(t, filepath.Join(dir, "config/containers"), "containers.conf", `[containers]
netns = "pasta"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
helper_binaries_dir = ["/mnt/bin", "/usr/lib/podman", "/usr/libexec/podman"]
[engine.runtimes]
runc = ["/mnt/bin/runc"]
`)
	writeFile(t, filepath.Join(dir, "config/containers"), "storage.conf", `[storage]
driver = "vfs"
graphroot = "/mnt/storage"
runroot = "/mnt/runroot"
`)
	writeFile(t, dir, "policy.yaml", podmanPolicy)
	pm := &podmanEnv{dir: dir}
	pm.rootfsTar(t)
	for _, d := range []string{"home", "config", "data", "storage", "runroot", "rootfs.tar"} {
		if err := chownR(filepath.Join(dir, d), p5.uid, p5.gid); err != nil {
			t.Fatal(err)
		}
	}
	p5.enter(t)
	if r := p5.run(t, "", "import", "/mnt/rootfs.tar", podmanImage); r.code != 0 {
		t.Fatalf("podman import: exit %d\n%s", r.code, r.stderr)
	}
	if r := p5.run(t, "", "version", "--format", "{{.Client.Version}}"); r.code != 0 || !strings.HasPrefix(r.stdout, "5.") {
		t.Fatalf("podman version: exit %d %q, want Podman 5", r.code, r.stdout)
	}
	return p5
}

// accounts writes the root's passwd, group, subuid and subgid with the
// test user added, to be bound over the root's own (which stay as
// debootstrap left them).
func (p5 *podman5Env) accounts(t *testing.T, name string) {
	t.Helper()
	add := map[string]string{
		"passwd": fmt.Sprintf("%s:x:%d:%d::/mnt/home:/bin/sh\n", name, p5.uid, p5.gid),
		"group":  fmt.Sprintf("%s:x:%d:\n", name, p5.gid),
		"subuid": fmt.Sprintf("%s:200000:65536\n", name),
		"subgid": fmt.Sprintf("%s:200000:65536\n", name),
	}
	for f, line := range add {
		b, _ := os.ReadFile(filepath.Join(p5.root, "etc", f))
		writeFile(t, filepath.Join(p5.dir, "etc"), f, string(b)+line)
	}
}

// enterScript makes the holder's mount namespace: run by `unshare
// --mount --propagation private` (so nothing propagates back), it mounts
// what Podman needs, pivots into the root and waits.
const enterScript = `set -eu
R=$1 W=$2 U=$3 G=$4
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mkdir -p "$R/run/user/$U" "$R/run/lock"
chown "$U:$G" "$R/run/user/$U"
chmod 700 "$R/run/user/$U"
mount --bind "$W" "$R/mnt"
for f in passwd group subuid subgid; do
	[ -e "$R/etc/$f" ] || : >"$R/etc/$f"
	mount --bind "$W/etc/$f" "$R/etc/$f"
done
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
umount -l /.oldroot
echo ready
exec sleep 1800
`

// enter starts the holder and waits until it is inside the root.
func (p5 *podman5Env) enter(t *testing.T) {
	t.Helper()
	script := writeFile(t, p5.dir, "enter.sh", enterScript)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", script,
		p5.root, p5.dir, strconv.Itoa(p5.uid), strconv.Itoa(p5.gid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("enter the Debian 13 root: %v", err)
	}
	p5.holder = cmd
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			p5.holder = nil
			t.Fatalf("enter the Debian 13 root: %q\n%s", s, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("entering the Debian 13 root hung\n%s", errb.String())
	}
}

// cmd builds a podman command run inside the root as the test user;
// auditDir, when set, becomes NSGATE_AUDIT_DIR (a path inside the root).
func (p5 *podman5Env) cmd(auditDir string, args ...string) *exec.Cmd {
	full := []string{"-t", strconv.Itoa(p5.holder.Process.Pid), "-m", "--",
		"setpriv", "--reuid=" + strconv.Itoa(p5.uid), "--regid=" + strconv.Itoa(p5.gid), "--init-groups", "--"}
	return p5.podman(full, auditDir, args...)
}

func (p5 *podman5Env) podman(enter []string, auditDir string, args ...string) *exec.Cmd {
	full := append(enter,
		"env", "-i", "--chdir=/mnt",
		"CONTAINERS_CONF=/mnt/config/containers/containers.conf",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/mnt/home",
		fmt.Sprintf("XDG_RUNTIME_DIR=/run/user/%d", p5.uid),
		"XDG_CONFIG_HOME=/mnt/config",
		"XDG_DATA_HOME=/mnt/data",
		"NSGATE_POLICY=/mnt/policy.yaml",
		"PODMAN_IGNORE_CGROUPSV1_WARNING=1", // this machine's cgroups are hybrid v1
	)
	if auditDir != "" {
		full = append(full, "NSGATE_AUDIT_DIR="+auditDir)
	}
	full = append(full, "podman")
	return exec.Command("nsenter", append(full, args...)...)
}

// run runs podman as the test user to completion (bounded) and logs what
// it did.
func (p5 *podman5Env) run(t *testing.T, auditDir string, args ...string) result {
	t.Helper()
	return p5.runCmd(t, p5.cmd(auditDir, args...), args)
}

func (p5 *podman5Env) runCmd(t *testing.T, cmd *exec.Cmd, args []string) result {
	t.Helper()
	r := runBounded(t, cmd, 90*time.Second, "podman "+strings.Join(args, " "), dropShareWarning)
	t.Logf("podman %s -> %d (%s)\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code,
		r.elapsed.Round(time.Millisecond), r.stdout, dropShareWarning(r.stderr))
	return r
}

// auditDir makes an empty audit directory the helper (the test user) may
// write; it returns its path inside the root and outside.
func (p5 *podman5Env) auditDir(t *testing.T, name string) (inside, outside string) {
	t.Helper()
	outside = filepath.Join(p5.dir, "audit-"+name)
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(outside, p5.uid, p5.gid); err != nil {
		t.Fatal(err)
	}
	return "/mnt/audit-" + name, outside
}

// cleanup removes the containers, stops Podman's pause process and any
// helper left (both started by this test, found by PID), ends the holder
// (its mount namespace goes with it) and deletes the directory.
func (p5 *podman5Env) cleanup() {
	if p5.holder != nil {
		p5.cmd("", "rm", "-a", "-f", "-t", "0").Run()
		pidFile := filepath.Join("/proc", strconv.Itoa(p5.holder.Process.Pid), "root/run/user", strconv.Itoa(p5.uid), "libpod/tmp/pause.pid")
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, pid := range pastaHelpers() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		syscall.Kill(-p5.holder.Process.Pid, syscall.SIGKILL)
		p5.holder.Wait()
	}
	os.RemoveAll(p5.dir)
}

// pastaHelpers returns the PIDs of running `nsgate pasta` background
// processes (their command line starts with "nsgate pasta").
func pastaHelpers() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.HasPrefix(string(b), "nsgate\x00pasta\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// testPolicy: the container reaches what the policy approves and nothing
// else, the host alias is host loopback under the policy, the container
// sees pasta's addresses, and its audit file says so.
func (p5 *podman5Env) testPolicy(t *testing.T) {
	adir, aout := p5.auditDir(t, "policy")
	hits := countContainerTargets()

	probes := append(containerProbes(),
		probe{"the host alias (--map-guest-addr) is host loopback, not allowed", "host.containers.internal:8080", "refused "})
	script := append(probeScript("nsgate", probes), "cat /etc/resolv.conf", "grep -w host.containers.internal /etc/hosts", "ip -4 addr", "ip -4 route")
	r := p5.run(t, adir, "run", "--rm", podmanImage, "sh", "-c", strings.Join(script, "; ")+"; true")
	if r.code != 0 {
		t.Fatalf("podman run: exit %d\n%s", r.code, r.stderr)
	}
	rest := strings.Join(checkProbes(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), probes, true), "\n")
	for _, want := range []string{"nameserver 169.254.1.1", "169.254.1.2", "inet 10.0.2.100/24", "default via 10.0.2.2"} {
		if !strings.Contains(rest, want) {
			t.Errorf("the container's resolv.conf, hosts, address and route lack %q:\n%s", want, rest)
		}
	}
	hits.check(t)

	// podman run --rm returns when the container is gone; the helper
	// notices its namespace went (it looks every 250 ms) and then writes
	// the exit record: wait for that, boundedly.
	file, recs := onlyAudit(t, aout)
	for deadline := time.Now().Add(10 * time.Second); recs[len(recs)-1].str("event") != "exit" && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		file, recs = onlyAudit(t, aout)
	}
	if _, ok := findAllow(recs, "app.test", appV4+":8080"); !ok {
		t.Errorf("no allow flow for app.test to %s:8080 in %s", appV4, file)
	}
	checkContainerAudit(t, file, recs, []denial{
		{metadataV4 + ":80", "builtin:metadata"},
		{otherV4 + ":8080", "default"},
		{"169.254.1.2:8080", "builtin:special-range"},
	})
}

func findAllow(recs []record, host, upstream string) (record, bool) {
	for _, rec := range recs {
		if rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == host && rec.str("upstream") == upstream {
			return rec, true
		}
	}
	return nil, false
}

// testPublish: -p reaches the container through nsgate pasta's -t
// forward (audited inbound), one helper runs per container, and `podman
// rm -f` leaves none behind.
func (p5 *podman5Env) testPublish(t *testing.T) {
	adir, aout := p5.auditDir(t, "publish")
	const hostPort = "18085"
	r := p5.run(t, adir, "run", "-d", "-p", "127.0.0.1:"+hostPort+":8080", podmanImage, "nsgate", "__probe", "serve", ":8080", "120")
	if r.code != 0 {
		t.Fatalf("podman run -d: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if len(id) != 64 {
		t.Fatalf("podman run -d printed %q, want a container id", id)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := httpGet("127.0.0.1:" + hostPort)
		if err == nil && strings.Contains(b, "hello from the worker") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page through 127.0.0.1:%s: %v %q", hostPort, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h := pastaHelpers(); len(h) != 1 {
		t.Errorf("want one nsgate pasta helper while the container runs, found %v", h)
	} else {
		t.Logf("helper %d: CapEff %s, NoNewPrivs %s, Seccomp %s", h[0], statusField(h[0], "CapEff"),
			statusField(h[0], "NoNewPrivs"), statusField(h[0], "Seccomp"))
		if statusField(h[0], "NoNewPrivs") != "1" || statusField(h[0], "Seccomp") != "2" {
			t.Errorf("helper %d is not confined (no_new_privs, seccomp)", h[0])
		}
	}
	if rm := p5.run(t, "", "rm", "-f", "-t", "0", id); rm.code != 0 {
		t.Fatalf("podman rm -f: exit %d\n%s", rm.code, rm.stderr)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(pastaHelpers()) > 0 {
		if time.Now().After(deadline) {
			left := pastaHelpers()
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("nsgate pasta outlived podman rm -f: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := httpGet("127.0.0.1:" + hostPort); err == nil {
		t.Errorf("127.0.0.1:%s still answers after podman rm -f", hostPort)
	}
	_, recs := onlyAudit(t, aout)
	var inbound bool
	for _, rec := range recs {
		if rec.str("event") == "inbound" && rec.str("action") == "allow" &&
			rec.str("listen") == "127.0.0.1:"+hostPort+"/tcp" && rec.str("dst") == "10.0.2.100:8080" {
			inbound = true
		}
	}
	if !inbound {
		t.Errorf("no inbound record for the published port: %v", recs)
	}
	if recs[len(recs)-1].str("event") != "exit" {
		t.Errorf("audit log of the removed container does not end with exit")
	}
}

// testPIDHost: a --pid=host container (Podman's default capabilities, no
// SYS_PTRACE) finds its nsgate pasta helper in the host's PID namespace
// and cannot open its memory, read its environment, or name or reopen its
// descriptors (the audit log, the TAP, host sockets), as TestPodman's
// pid-host checks for nsgate slirp4netns; the audit log still runs from
// start to exit and verifies.
func (p5 *podman5Env) testPIDHost(t *testing.T) {
	adir, aout := p5.auditDir(t, "pidhost")
	script := `for d in /proc/[0-9]*; do
  tr '\0' ' ' <$d/cmdline 2>/dev/null | grep -q '^nsgate pasta ' || continue
  echo "found $d"
  if ( exec 5<>$d/mem ) 2>/dev/null; then echo "mem-open $d"; fi
  if cat $d/environ 2>/dev/null | grep -q NSGATE_; then echo "environ-read $d"; fi
  if ls $d/root/ 2>/dev/null | grep -q .; then echo "root-listed $d"; fi
  for f in $d/fd/*; do
    l=$(busybox readlink $f 2>/dev/null)
    [ -n "$l" ] && echo "fd-named $f $l"
    if ( exec 6>>$f ) 2>/dev/null; then echo "fd-open $f"; fi
  done
done; true`
	r := p5.run(t, adir, "run", "--rm", "--pid=host", podmanImage, "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("podman run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "found ") {
		t.Fatalf("the container did not find its nsgate pasta helper in the host's PID namespace: %q", r.stdout)
	}
	for _, bad := range []string{"mem-open", "environ-read", "root-listed", "fd-named", "fd-open"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("a --pid=host container got at its nsgate pasta helper (%s):\n%s", bad, r.stdout)
		}
	}
	file, recs := onlyAudit(t, aout)
	for deadline := time.Now().Add(10 * time.Second); recs[len(recs)-1].str("event") != "exit" && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		file, recs = onlyAudit(t, aout)
	}
	if recs[0].str("event") != "start" || recs[len(recs)-1].str("event") != "exit" {
		t.Errorf("audit log %s should run from start to exit", file)
	}
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", file); v.code != 0 {
		t.Errorf("audit verify %s: exit %d %s", file, v.code, v.stderr)
	}
}

// testCredentials is TestPodman/credentials through nsgate as pasta: the
// helper writes the CA certificate, the bundle and the placeholders into
// a folder the container mounts, before it says it is ready.
func (p5 *podman5Env) testCredentials(t *testing.T) {
	up := startCredUpstream(t)
	adir, aout := p5.auditDir(t, "creds")
	cdir := filepath.Join(p5.dir, "creds")
	out := filepath.Join(cdir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cdir, "upstream-ca.pem", string(up.ca.PEM()))
	writeFile(t, cdir, "policy.yaml", credPolicy("/mnt/creds/upstream-ca.pem"))
	if err := chownR(cdir, p5.uid, p5.gid); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--rm", "-v", "/mnt/creds/out:/nsgate:ro", podmanImage, "sh", "-c", credContainerScript()}
	cmd := p5.cmd(adir, args...)
	// The helper's environment: env -i's list, before "podman".
	for i, a := range cmd.Args {
		if a == "podman" && i > 0 && strings.Contains(cmd.Args[i-1], "=") {
			extra := credHelperEnv("/mnt/creds/policy.yaml", "/mnt/creds/out")
			cmd.Args = append(cmd.Args[:i:i], append(extra, cmd.Args[i:]...)...)
			break
		}
	}
	r := p5.runCmd(t, cmd, args)
	checkCredContainer(t, r, up, out)
	_, recs := onlyAudit(t, aout)
	for deadline := time.Now().Add(10 * time.Second); recs[len(recs)-1].str("event") != "exit" && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		_, recs = onlyAudit(t, aout)
	}
	checkCredRecords(t, recs)
}
