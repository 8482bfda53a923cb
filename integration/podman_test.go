//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
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

// Rootless Podman 4 with nsgate as its slirp4netns,
// following docs/podman.md: containers.conf's network_cmd_path names a
// link called slirp4netns to the nsgate binary, and the policy and audit
// directory reach the helper through Podman's environment.
//
// Podman runs as the unprivileged test user inside the sealed network
// namespace (the host side of the helper), with its own storage, config
// and runtime directories under one short temporary directory, so runs
// never share state. The image is static busybox plus the nsgate binary,
// imported from a tarball (no registry is reachable); nsgate's hidden
// __probe command is the HTTP client and server inside the container.

// podmanPolicy approves app.test (a static name for the harness's app
// server) on port 8080, and the app server's address itself (for an
// `nsgate run` inside a container, whose own gateway dials the address),
// and nothing else.
const podmanPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
  - cidr: 203.0.113.10/32
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
`

const podmanImage = "localhost/nsgate-it:latest"

// podmanEnv is one rootless Podman set-up, shared by the subtests.
type podmanEnv struct {
	dir      string // everything lives here; short, for the API socket path
	uid, gid int
	podman   string
	policy   string
}

func TestPodman(t *testing.T) {
	needSealed(t)
	pm := newPodmanEnv(t)
	t.Run("policy", pm.testPolicy)
	t.Run("publish-and-rm", pm.testPublish)
	t.Run("dockerfile", pm.testDockerfile)
	t.Run("pid-host", pm.testPIDHost)
	t.Run("credentials", pm.testCredentials)
}

// testCredentials follows docs/podman.md, "Terminated hosts and
// credentials": the helper writes the run's CA certificate, the bundle
// and the placeholders into a folder the container mounts read-only
// before it says it is ready; the container's client (Go's crypto/tls
// through SSL_CERT_FILE, no flag that trusts anything else) reaches the
// terminated fake upstream, which gets the real secret while the
// container sees only the placeholder; without SSL_CERT_FILE the
// handshake fails closed. The CA's key is in none of the files.
func (pm *podmanEnv) testCredentials(t *testing.T) {
	up := startCredUpstream(t)
	adir := pm.auditDir(t, "creds")
	cdir := filepath.Join(pm.dir, "creds")
	out := filepath.Join(cdir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	caFile := writeFile(t, cdir, "upstream-ca.pem", string(up.ca.PEM()))
	pol := writeFile(t, cdir, "policy.yaml", credPolicy(caFile))
	if err := chownR(cdir, pm.uid, pm.gid); err != nil {
		t.Fatal(err)
	}
	cmd := pm.cmd(adir, "run", "--rm", "--network", "slirp4netns", "-v", out+":/nsgate:ro", podmanImage, "sh", "-c", credContainerScript())
	cmd.Env = append(cmd.Env, credHelperEnv(pol, out)...)
	r := runBounded(t, cmd, 90*time.Second, "podman run (credentials)", dropShareWarning)
	t.Logf("podman run (credentials) -> %d\nstdout: %s\nstderr: %s", r.code, r.stdout, dropShareWarning(r.stderr))
	checkCredContainer(t, r, up, out)
	_, recs := onlyAudit(t, adir)
	checkCredRecords(t, recs)
}

// credContainerScript is the container's side of the credential tests:
// source the placeholders, then GET the terminated host's echo trusting
// the mounted bundle, the mounted CA alone, and nothing.
func credContainerScript() string {
	u := fmt.Sprintf("https://api.example.test:%d/echo", credPort)
	return strings.Join([]string{
		"set -a; . /nsgate/placeholders.env; set +a",
		"SSL_CERT_FILE=/nsgate/bundle.pem nsgate __probe https " + u + " API_TOKEN",
		"SSL_CERT_FILE=/nsgate/ca.pem nsgate __probe https " + u + " API_TOKEN",
		"nsgate __probe https " + u + " API_TOKEN; echo noca=$?",
	}, "; ")
}

// credHelperEnv is the helper's environment for the credential tests
// (paths as the helper sees them): the policy, the secret, and the files
// it writes into out.
func credHelperEnv(pol, out string) []string {
	return []string{"NSGATE_POLICY=" + pol, "NSGATE_IT_SECRET=" + credSecret,
		"NSGATE_CA_CERT=" + out + "/ca.pem", "NSGATE_CA_BUNDLE=" + out + "/bundle.pem",
		"NSGATE_PLACEHOLDERS=" + out + "/placeholders.env"}
}

// checkCredContainer checks the container's output, the upstream's
// record and the files the helper wrote (out, on the host).
func checkCredContainer(t *testing.T, r result, up *credUpstream, out string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("podman run: exit %d", r.code)
	}
	if strings.Count(r.stdout, "https 200 echo HTTP/2.0 Bearer nsgph") != 2 {
		t.Errorf("the container did not get two echoes of the placeholder:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "https error:") || !strings.Contains(r.stdout, "noca=1") {
		t.Errorf("without SSL_CERT_FILE the handshake should fail closed:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, credSecret) {
		t.Errorf("the container saw the secret")
	}
	auths, _, _ := up.seen()
	if len(auths) != 2 || auths[0] != "Bearer "+credSecret || auths[1] != "Bearer "+credSecret {
		t.Errorf("upstream got Authorization %q, want the secret twice", auths)
	}
	for _, n := range []string{"ca.pem", "bundle.pem", "placeholders.env"} {
		b, err := os.ReadFile(filepath.Join(out, n))
		if err != nil || strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), credSecret) {
			t.Errorf("%s: %v; holds a key or the secret: %v", n, err, err == nil)
		}
	}
}

// checkCredRecords wants a request allow record for the echo.
func checkCredRecords(t *testing.T, recs []record) {
	t.Helper()
	var allowed int
	for _, rec := range recs {
		if rec.str("event") == "request" && rec.str("action") == "allow" && rec.str("path") == "/echo" {
			allowed++
		}
	}
	if allowed == 0 {
		t.Errorf("no request allow record for /echo in the helper's log")
	}
}

func newPodmanEnv(t *testing.T) *podmanEnv {
	t.Helper()
	podman, err := exec.LookPath("podman")
	need(t, "podman (.ci/run installs podman, uidmap, runc, catatonit, busybox-static)", err)
	for _, tool := range []string{"newuidmap", "newgidmap", "runc"} {
		_, err := exec.LookPath(tool)
		need(t, tool+" for rootless Podman", err)
	}
	realRoot(t, "to run rootless Podman as the test user")
	u, err := user.Lookup(testUserName())
	need(t, "the unprivileged test user "+testUserName()+" (.ci/run creates it)", err)
	need(t, "a world-usable /dev/net/tun (chmod 0666)", tunUsable())
	_, err = os.Stat("/bin/busybox")
	need(t, "a static /bin/busybox (package busybox-static) for the test image", err)

	// Podman's API socket is $XDG_RUNTIME_DIR/libpod/tmp/<64 hex>.net and
	// must fit in 107 bytes: keep the directory name short.
	dir, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	pm := &podmanEnv{dir: dir, podman: podman}
	pm.uid, _ = strconv.Atoi(u.Uid)
	pm.gid, _ = strconv.Atoi(u.Gid)
	t.Cleanup(pm.cleanup)
	os.Chmod(dir, 0o755)
	for _, d := range []string{"home", "config/containers", "data", "storage", "runroot", "run", "bin"} {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "run"), 0o700)
	// The helper: a link named slirp4netns to the nsgate binary (nsgate
	// acts as the drop-in when called by that name).
	if err := os.Symlink(nsgateBin, filepath.Join(dir, "bin", "slirp4netns")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "config/containers"), "containers.conf", fmt.Sprintf(`[containers]
netns = "slirp4netns"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
network_cmd_path = %q
`, filepath.Join(dir, "bin", "slirp4netns")))
	writeFile(t, filepath.Join(dir, "config/containers"), "storage.conf", fmt.Sprintf(`[storage]
driver = "vfs"
graphroot = %q
runroot = %q
`, filepath.Join(dir, "storage"), filepath.Join(dir, "runroot")))
	pm.policy = writeFile(t, dir, "policy.yaml", podmanPolicy)
	tarball := pm.rootfsTar(t)
	for _, d := range []string{"home", "config", "data", "storage", "runroot", "run"} {
		if err := chownR(filepath.Join(dir, d), pm.uid, pm.gid); err != nil {
			t.Fatal(err)
		}
	}
	if r := pm.run(t, "", "import", tarball, podmanImage); r.code != 0 {
		t.Fatalf("podman import: exit %d\n%s", r.code, r.stderr)
	}
	return pm
}

// rootfsTar writes the test image's root file system: static busybox (a
// shell), the static nsgate binary (the probe), /etc and /tmp.
func (pm *podmanEnv) rootfsTar(t *testing.T) string {
	t.Helper()
	root := filepath.Join(pm.dir, "rootfs")
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"))
	installNsgate(t, filepath.Join(root, "bin"))
	for _, a := range []string{"sh", "ip", "cat", "grep", "ls", "sleep", "true"} {
		os.Symlink("busybox", filepath.Join(root, "bin", a))
	}
	tarball := filepath.Join(pm.dir, "rootfs.tar")
	if out, err := exec.Command("tar", "-C", root, "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	os.Chmod(tarball, 0o644)
	return tarball
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// installNsgate copies nsgate and nsgate-init, as built together for the
// tests, into dir, as make build leaves them in bin/.
func installNsgate(t *testing.T, dir string) {
	t.Helper()
	copyFile(t, nsgateBin, filepath.Join(dir, "nsgate"))
	copyFile(t, filepath.Join(filepath.Dir(nsgateBin), "nsgate-init"), filepath.Join(dir, "nsgate-init"))
}

func chownR(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// auditDir makes an empty audit directory for one subtest, writable by the
// test user (the helper runs as that user).
func (pm *podmanEnv) auditDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(pm.dir, "audit-"+name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, pm.uid, pm.gid); err != nil {
		t.Fatal(err)
	}
	return d
}

// cmd builds a podman command run as the test user with the set-up's
// environment; auditDir, when set, becomes NSGATE_AUDIT_DIR.
func (pm *podmanEnv) cmd(auditDir string, args ...string) *exec.Cmd {
	full := append([]string{"--root", filepath.Join(pm.dir, "storage"), "--runroot", filepath.Join(pm.dir, "runroot")}, args...)
	cmd := exec.Command(pm.podman, full...)
	cmd.Dir = pm.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(pm.uid), Gid: uint32(pm.gid), Groups: []uint32{uint32(pm.gid)},
	}}
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(pm.dir, "home"),
		"XDG_RUNTIME_DIR=" + filepath.Join(pm.dir, "run"),
		"XDG_CONFIG_HOME=" + filepath.Join(pm.dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(pm.dir, "data"),
		"NSGATE_POLICY=" + pm.policy,
	}
	if auditDir != "" {
		cmd.Env = append(cmd.Env, "NSGATE_AUDIT_DIR="+auditDir)
	}
	return cmd
}

// run runs podman to completion (bounded) and logs what it did.
func (pm *podmanEnv) run(t *testing.T, auditDir string, args ...string) result {
	t.Helper()
	r := runBounded(t, pm.cmd(auditDir, args...), 90*time.Second, "podman "+strings.Join(args, " "), dropShareWarning)
	t.Logf("podman %s -> %d (%s)\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code,
		r.elapsed.Round(time.Millisecond), r.stdout, dropShareWarning(r.stderr))
	return r
}

// dropShareWarning removes the harmless warning rootless Podman prints
// when / is not a shared mount.
func dropShareWarning(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, `is not a shared mount`) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// cleanup removes the containers, stops Podman's pause process (it keeps
// the user namespace alive) and deletes the directory.
func (pm *podmanEnv) cleanup() {
	cmd := pm.cmd("", "rm", "-a", "-f", "-t", "0")
	cmd.Run()
	if b, err := os.ReadFile(filepath.Join(pm.dir, "run/libpod/tmp/pause.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	os.RemoveAll(pm.dir)
}

// onlyAudit returns the single audit file in dir (one container, one
// network namespace, one file) and its records.
func onlyAudit(t *testing.T, dir string) (string, []record) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("audit directory %s holds %v, want one netns-<id>.jsonl", dir, files)
	}
	if !strings.HasPrefix(filepath.Base(files[0]), "netns-") {
		t.Errorf("audit file %s is not named after Podman's network namespace", files[0])
	}
	return files[0], readAudit(t, files[0])
}

// testPolicy: the container reaches what the policy approves and nothing
// else, and its audit file says so.
func (pm *podmanEnv) testPolicy(t *testing.T) {
	adir := pm.auditDir(t, "policy")
	hits := countContainerTargets()

	probes := containerProbes()
	r := pm.run(t, adir, "run", "--rm", "--network", "slirp4netns", podmanImage,
		"sh", "-c", strings.Join(probeScript("nsgate", probes), "; ")+"; true")
	if r.code != 0 {
		t.Fatalf("podman run: exit %d\n%s", r.code, r.stderr)
	}
	checkProbes(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), probes, false)
	hits.check(t)

	file, recs := onlyAudit(t, adir)
	var allowed bool
	for _, rec := range recs {
		if rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == "app.test" &&
			rec.str("upstream") == appV4+":8080" && rec.str("rule") == "allow[0]" {
			allowed = true
		}
	}
	if !allowed {
		t.Errorf("no allow flow for app.test to %s:8080 in %s", appV4, file)
	}
	checkContainerAudit(t, file, recs, []denial{
		{metadataV4 + ":80", "builtin:metadata"},
		{otherV4 + ":8080", "default"},
	})
}

// denial is a flow a container's audit log must refuse, by rule.
type denial struct{ dst, rule string }

// checkContainerAudit checks the audit log of one container's network
// helper: a deny flow record with its rule for each of denials, a DNS
// denial of evil.test, a log that runs from start to exit (the helper ends
// with its container), and a chain that verifies.
func checkContainerAudit(t *testing.T, file string, recs []record, denials []denial) {
	t.Helper()
	for _, d := range denials {
		rec, ok := findFlow(recs, "deny", d.dst)
		if !ok {
			t.Errorf("no deny flow for %s", d.dst)
		} else if rec.str("rule") != d.rule {
			t.Errorf("deny %s: rule %q, want %q (%s)", d.dst, rec.str("rule"), d.rule, rec.str("reason"))
		}
	}
	var nameDenied bool
	for _, rec := range recs {
		if rec.str("event") == "dns" && rec.str("qname") == "evil.test" && rec.str("action") == "deny" {
			nameDenied = true
		}
	}
	if !nameDenied {
		t.Errorf("no dns deny for evil.test in %s", file)
	}
	if recs[0].str("event") != "start" || recs[len(recs)-1].str("event") != "exit" {
		t.Errorf("audit log should run from start to exit (the helper ends with its container): first %q, last %q",
			recs[0].str("event"), recs[len(recs)-1].str("event"))
	}
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", file); v.code != 0 {
		t.Errorf("audit verify %s: exit %d %s", file, v.code, v.stderr)
	}
}

// testPublish: -p with port_handler=slirp4netns goes through the helper's
// API socket; the API answers bad requests as slirp4netns does; and
// `podman rm -f` leaves no nsgate process behind.
func (pm *podmanEnv) testPublish(t *testing.T) {
	adir := pm.auditDir(t, "publish")
	r := pm.run(t, adir, "run", "-d", "--network", "slirp4netns:port_handler=slirp4netns",
		"-p", "127.0.0.1:18080:8080", podmanImage, "nsgate", "__probe", "serve", ":8080", "120")
	if r.code != 0 {
		t.Fatalf("podman run -d: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if len(id) != 64 {
		t.Fatalf("podman run -d printed %q, want a container id", id)
	}

	// A host-side client reaches the container's server.
	var page string
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := httpGet("127.0.0.1:18080")
		if err == nil && strings.Contains(b, "hello from the worker") {
			page = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page through 127.0.0.1:18080: %v %q", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("published page: %q", page)

	// The API socket Podman used answers in slirp4netns's JSON.
	sock := filepath.Join(pm.dir, "run/libpod/tmp", id+".net")
	for _, tc := range []struct{ why, req, want string }{
		{"Podman's forward is listed with the guest address filled in", `{"execute":"list_hostfwd"}`,
			`{"entries":[{"id":1,"proto":"tcp","host_addr":"127.0.0.1","host_port":18080,"guest_addr":"10.0.2.100","guest_port":8080}]}`},
		{"unknown command", `{"execute":"reboot"}`, `{"error":{"desc":"bad request: unknown execute"}}`},
		{"not JSON", `add_hostfwd please`, `{"error":{"desc":"bad request: cannot parse JSON"}}`},
		{"no execute", `{"arguments":{}}`, `{"error":{"desc":"bad request: no execute found"}}`},
		{"bad protocol", `{"execute":"add_hostfwd","arguments":{"proto":"sctp","host_port":18081,"guest_port":80}}`,
			`{"error":{"desc":"bad request: add_hostfwd: bad arguments.proto"}}`},
		{"a port already forwarded", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.0.0.1","host_port":18080,"guest_port":80}}`,
			`{"error":{"desc":"bad request: add_hostfwd: slirp_add_hostfwd failed"}}`},
	} {
		got, err := apiRequest(sock, tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.why, err)
		}
		if got != tc.want {
			t.Errorf("%s: %s\n got %s\nwant %s", tc.why, tc.req, got, tc.want)
		}
	}

	// The helper runs sandboxed (Podman passes --enable-sandbox and
	// --enable-seccomp): only CAP_NET_BIND_SERVICE, a seccomp filter, and a
	// root that holds nothing but etc/resolv.conf.
	var helpers []nsgateProc
	for _, p := range nsgateProcs(pm.dir) {
		if p.exe == nsgateBin {
			helpers = append(helpers, p)
		}
	}
	if len(helpers) != 1 {
		t.Errorf("want one nsgate helper process while the container runs, found %v", helpers)
	}
	for _, h := range helpers {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root", h.pid))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Logf("helper %d: CapEff %s, NoNewPrivs %s, Seccomp %s, root %v", h.pid, statusField(h.pid, "CapEff"),
			statusField(h.pid, "NoNewPrivs"), statusField(h.pid, "Seccomp"), names)
		if statusField(h.pid, "CapEff") != "0000000000000400" || statusField(h.pid, "Seccomp") != "2" ||
			statusField(h.pid, "NoNewPrivs") != "1" || err != nil || strings.Join(names, ",") != "etc" {
			t.Errorf("helper %d is not sandboxed as --enable-sandbox --enable-seccomp promise", h.pid)
		}
	}
	if rm := pm.run(t, "", "rm", "-f", "-t", "0", id); rm.code != 0 {
		t.Fatalf("podman rm -f: exit %d\n%s", rm.code, rm.stderr)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		left := nsgateProcs(pm.dir)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
			t.Fatalf("nsgate processes outlived podman rm -f: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := httpGet("127.0.0.1:18080"); err == nil {
		t.Errorf("127.0.0.1:18080 still answers after podman rm -f")
	}

	_, recs := onlyAudit(t, adir)
	var inbound, forward bool
	for _, rec := range recs {
		if rec.str("event") == "inbound" && rec.str("action") == "allow" &&
			rec.str("listen") == "127.0.0.1:18080/tcp" && rec.str("dst") == "10.0.2.100:8080" {
			inbound = true
		}
		// Podman's add_hostfwd over the API socket is itself recorded.
		if rec.str("event") == "forward" && rec.str("action") == "add" &&
			rec.str("listen") == "127.0.0.1:18080/tcp" && rec.str("dst") == "10.0.2.100:8080" {
			forward = true
		}
	}
	if !inbound || !forward {
		t.Errorf("inbound record for the published port: %v, forward add record: %v; want both: %v", inbound, forward, recs)
	}
	if recs[len(recs)-1].str("event") != "exit" {
		t.Errorf("audit log of the removed container does not end with exit")
	}
}

// testDockerfile: the repository's Dockerfile builds with podman build
// from what is available offline (the prebuilt target: FROM scratch plus
// a binary built on the host, see docs/docker.md), and the image runs
// `nsgate version` as a non-root user.
func (pm *podmanEnv) testDockerfile(t *testing.T) {
	dockerfile, err := filepath.Abs("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dockerfile); err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	ctx := filepath.Join(pm.dir, "context")
	if err := os.MkdirAll(filepath.Join(ctx, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, dockerfile, filepath.Join(ctx, "Dockerfile"))
	installNsgate(t, filepath.Join(ctx, "bin"))
	if err := chownR(ctx, pm.uid, pm.gid); err != nil {
		t.Fatal(err)
	}
	const tag = "localhost/nsgate:it"
	r := pm.run(t, "", "build", "--target", "prebuilt", "-t", tag, ctx)
	if r.code != 0 {
		t.Fatalf("podman build --target prebuilt: exit %d\n%s", r.code, r.stderr)
	}
	r = pm.run(t, "", "run", "--rm", "--network", "none", tag)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "nsgate ") {
		t.Fatalf("image's default command: exit %d stdout %q, want nsgate's version line", r.code, r.stdout)
	}
	r = pm.run(t, "", "image", "inspect", "--format", "{{.Config.User}} {{.Config.Entrypoint}}", tag)
	if got := strings.TrimSpace(r.stdout); r.code != 0 || !strings.HasPrefix(got, "65532:65532 ") {
		t.Errorf("image user and entrypoint %q, want the non-root 65532:65532", got)
	}

	// docs/docker.md: with /dev/net/tun and a writable /tmp, `nsgate run`
	// works inside a rootless Podman container (as its non-root user),
	// nested under the nsgate that is the container's network helper.
	writeFile(t, pm.dir, "inner.yaml", podmanPolicy)
	r = pm.run(t, "", "run", "--rm", "--device", "/dev/net/tun", "--tmpfs", "/tmp",
		"-v", filepath.Join(pm.dir, "inner.yaml")+":/etc/nsgate/policy.yaml:ro", tag,
		"run", "--policy", "/etc/nsgate/policy.yaml", "--", "/usr/local/bin/nsgate", "__probe", "tcp", "app.test:8080")
	if r.code != 0 || !strings.Contains(r.stdout, "200 OK") {
		t.Errorf("nsgate run inside the image: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// httpGet sends an HTTP/1.0 GET to addr and returns the whole reply.
func httpGet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	b, err := io.ReadAll(c)
	return string(b), err
}

// apiRequest sends one request to a slirp4netns API socket the way
// Podman does (write, shut down the write side, read the reply).
func apiRequest(path, req string) (string, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return "", err
	}
	c.(*net.UnixConn).CloseWrite()
	b, err := io.ReadAll(bufio.NewReader(c))
	return strings.TrimSpace(string(b)), err
}

// nsgateProc is a process running the nsgate binary under test, or a copy
// of it inside dir (the containers' nsgate).
type nsgateProc struct {
	pid int
	exe string
}

func (p nsgateProc) String() string { return fmt.Sprintf("%d(%s)", p.pid, p.exe) }

func nsgateProcs(dir string) []nsgateProc {
	ents, _ := os.ReadDir("/proc")
	var out []nsgateProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		if exe == nsgateBin || strings.HasPrefix(exe, dir+"/") && filepath.Base(exe) == "nsgate" {
			out = append(out, nsgateProc{pid, exe})
		}
	}
	return out
}

// containerTargets are the fake servers a container's policy probes aim
// at, with their hit counts before the container ran.
type containerTargets struct {
	app, meta, other                   target
	appBefore, metaBefore, otherBefore int64
}

func countContainerTargets() containerTargets {
	c := containerTargets{app: targetAt(appV4 + ":8080/tcp"), meta: targetAt(metadataV4 + ":80/tcp"), other: targetAt(otherV4 + ":8080/tcp")}
	c.appBefore, c.metaBefore, c.otherBefore = c.app.count(), c.meta.count(), c.other.count()
	return c
}

// check asserts one connection at the approved app and none at the
// metadata and unapproved servers since countContainerTargets.
func (c containerTargets) check(t *testing.T) {
	t.Helper()
	if got := c.app.count() - c.appBefore; got != 1 {
		t.Errorf("app server saw %d connections, want 1", got)
	}
	if got := c.meta.count() - c.metaBefore; got != 0 {
		t.Errorf("fake metadata server saw %d connections, want 0", got)
	}
	if got := c.other.count() - c.otherBefore; got != 0 {
		t.Errorf("unapproved server saw %d connections, want 0", got)
	}
}

// testPIDHost: a container run with --pid=host (and no added capability)
// sees its network helper's process. The helper shares the container's
// uid and, once --enable-sandbox dropped its capabilities, holds none the
// container lacks, so the kernel's ptrace check would let the container
// write the helper's memory (a gateway outside every policy) and reopen
// its audit log through /proc/PID/fd. The helper must refuse it all: it is
// not dumpable.
func (pm *podmanEnv) testPIDHost(t *testing.T) {
	adir := pm.auditDir(t, "pidhost")
	script := `for d in /proc/[0-9]*; do
  [ "$(cat $d/comm 2>/dev/null)" = slirp4netns ] || continue
  echo "found $d"
  if ( exec 5<>$d/mem ) 2>/dev/null; then echo "mem-open $d"; fi
  if cat $d/environ 2>/dev/null | grep -q NSGATE_; then echo "environ-read $d"; fi
  for f in $d/fd/*; do
    l=$(busybox readlink $f 2>/dev/null)
    [ -n "$l" ] && echo "fd-named $f $l"
    if ( exec 6>>$f ) 2>/dev/null; then echo "fd-open $f"; fi
  done
done; true`
	r := pm.run(t, adir, "run", "--rm", "--network", "slirp4netns", "--pid=host", podmanImage, "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("podman run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "found ") {
		t.Fatalf("the container did not find its network helper in the host's PID namespace: %q", r.stdout)
	}
	for _, bad := range []string{"mem-open", "environ-read", "fd-named", "fd-open"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("a --pid=host container got at its network helper (%s):\n%s", bad, r.stdout)
		}
	}
	file, recs := onlyAudit(t, adir)
	if len(recs) == 0 || recs[0].str("event") != "start" || recs[len(recs)-1].str("event") != "exit" {
		t.Errorf("audit log %s should run from start to exit", file)
	}
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", file); v.code != 0 {
		t.Errorf("audit verify %s: exit %d %s", file, v.code, v.stderr)
	}
}
