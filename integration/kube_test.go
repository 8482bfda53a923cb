//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
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

	"go.yaml.in/yaml/v3"
)

// deploy/kubernetes's manifests under `podman kube play`, as docs/kubernetes.md
// says to validate them without a cluster: Podman 4 (this machine's own;
// it plays hostUsers: false as a user namespace of its own, the seccomp
// annotation as the profile, the CharDevice hostPath as a device, the
// ConfigMap as a volume and each PersistentVolumeClaim as a named volume),
// as root and rootless as the test user, inside the sealed network
// namespace. The pods' network is slirp4netns (rootful Podman can use it
// too), so nothing is added to the machine's CNI state.
//
// The images are built the documented way: the Dockerfile's prebuilt
// target from the nsgate binary under test, then
// deploy/kubernetes/Containerfile on an "agent" base imported from a
// tarball (dash as /bin/sh, a dynamic /bin/true and their libraries,
// taken from this machine: what the lab's attempts need of a userland).
//
// The lab manifest is played as it is: the lab must pass in the pod. The
// agent manifest is played with its two user parts replaced (the policy in
// the ConfigMap, the command after --): probes that reach the approved
// app and are refused the metadata address and an unapproved name. Its
// audit records must be on the volume and on the pod's standard output,
// line for line.

// kubePolicy is the agent pod's policy: app.test on 8080 (a static
// answer, so the pod needs no resolver), nothing else.
const kubePolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
`

// kubeProbes are the agent's commands, each followed by the start of the
// line it must print.
var kubeProbes = []probe{
	{"approved name", "app.test:8080", "ok "},
	{"cloud metadata address", metadataV4 + ":80", "refused "},
	{"name the policy does not approve", "evil.test:8080", "refused "},
}

// kubeEnv is one Podman set-up (root, or rootless as the test user).
type kubeEnv struct {
	dir      string
	rootless bool
	uid, gid int
	podman   string
	seccomp  string // --seccomp-profile-root: holds deploy's profile
}

func TestKube(t *testing.T) {
	needSealed(t)
	podman, err := exec.LookPath("podman")
	need(t, "podman (.ci/install installs podman, uidmap, runc)", err)
	for _, tool := range []string{"runc", "slirp4netns", "newuidmap"} {
		_, err := exec.LookPath(tool)
		need(t, tool+" for podman kube play", err)
	}
	realRoot(t, "to run Podman as root and as the test user")
	for _, name := range []string{"root", "user"} {
		t.Run(name, func(t *testing.T) {
			k := newKubeEnv(t, podman, name == "user")
			t.Run("lab", k.testLab)
			t.Run("agent", k.testAgent)
		})
	}
}

func newKubeEnv(t *testing.T, podman string, rootless bool) *kubeEnv {
	t.Helper()
	k := &kubeEnv{podman: podman, rootless: rootless, uid: -1, gid: -1}
	if rootless {
		u, err := user.Lookup(testUserName())
		need(t, "the unprivileged test user "+testUserName()+" (.ci/install creates it)", err)
		k.uid, _ = strconv.Atoi(u.Uid)
		k.gid, _ = strconv.Atoi(u.Gid)
	} else {
		// hostUsers: false makes rootful Podman take a user namespace
		// from the "containers" ranges.
		need(t, `subordinate ids for "containers" in /etc/subuid and /etc/subgid (.ci/install adds them)`, subidsFor("containers"))
	}
	need(t, "a world-usable /dev/net/tun (chmod 0666)", tunUsable())
	// Short: rootless Podman's socket paths live under the directory.
	dir, err := os.MkdirTemp("", "kp")
	if err != nil {
		t.Fatal(err)
	}
	k.dir = dir
	t.Cleanup(k.cleanup)
	os.Chmod(dir, 0o755)
	for _, d := range []string{"home", "config/containers", "data", "storage", "runroot", "run", "tmp", "seccomp", "ctx/bin", "actx", "rootfs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "run"), 0o700)
	// runc and cgroupfs, as the other Podman tests (crun refuses this
	// machine's hybrid cgroups); limits for the pods below ours (Podman
	// would ask for more than this machine's hard limits, which a user
	// namespace cannot raise); Podman's own files here.
	writeFile(t, filepath.Join(dir, "config/containers"), "containers.conf", fmt.Sprintf(`[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = %q
`, filepath.Join(dir, "tmp")))
	writeFile(t, filepath.Join(dir, "config/containers"), "storage.conf", fmt.Sprintf(`[storage]
driver = "vfs"
graphroot = %q
runroot = %q
`, filepath.Join(dir, "storage"), filepath.Join(dir, "runroot")))
	k.seccomp = filepath.Join(dir, "seccomp")
	copyFile(t, "../deploy/kubernetes/nsgate-seccomp.json", filepath.Join(k.seccomp, "nsgate-seccomp.json"))
	os.Chmod(filepath.Join(k.seccomp, "nsgate-seccomp.json"), 0o644)

	// The images: nsgate from the Dockerfile's prebuilt target, then the
	// agent image from deploy/kubernetes/Containerfile.
	copyFile(t, "../Dockerfile", filepath.Join(dir, "ctx/Dockerfile"))
	installNsgate(t, filepath.Join(dir, "ctx/bin"))
	k.agentBase(t)
	if rootless {
		for _, d := range []string{"home", "config", "data", "storage", "runroot", "run", "tmp", "ctx", "actx", "base.tar"} {
			if err := chownR(filepath.Join(dir, d), k.uid, k.gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r := k.run(t, "build", "--target", "prebuilt", "-t", "localhost/nsgate:latest", filepath.Join(dir, "ctx")); r.code != 0 {
		t.Fatalf("podman build --target prebuilt: exit %d\n%s", r.code, r.stderr)
	}
	if r := k.run(t, "import", filepath.Join(dir, "base.tar"), "localhost/agent-base:it"); r.code != 0 {
		t.Fatalf("podman import: exit %d\n%s", r.code, r.stderr)
	}
	containerfile := filepath.Join(dir, "Containerfile")
	copyFile(t, "../deploy/kubernetes/Containerfile", containerfile)
	os.Chmod(containerfile, 0o644)
	if r := k.run(t, "build", "-f", containerfile, "--build-arg", "AGENT_IMAGE=localhost/agent-base:it",
		"--build-arg", "NSGATE_IMAGE=localhost/nsgate:latest", "-t", "localhost/nsgate-agent:latest", filepath.Join(dir, "actx")); r.code != 0 {
		t.Fatalf("podman build -f deploy/kubernetes/Containerfile: exit %d\n%s", r.code, r.stderr)
	}
	return k
}

// subidsFor reports whether name has subordinate uid and gid ranges.
func subidsFor(name string) error {
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if !bytes.Contains(append([]byte{'\n'}, b...), []byte("\n"+name+":")) {
			return fmt.Errorf("no %s entry in %s", name, f)
		}
	}
	return nil
}

// agentBase writes base.tar: the agent image's root file system. dash is
// /bin/sh and /bin/true is dynamic, with their ELF interpreter and
// libraries (the lab's exec attempts run a shell and a dynamic program);
// a passwd entry for 65532, /tmp and /var/tmp.
func (k *kubeEnv) agentBase(t *testing.T) {
	t.Helper()
	root := filepath.Join(k.dir, "rootfs")
	for _, d := range []string{"bin", "etc", "tmp", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	os.Chmod(filepath.Join(root, "var/tmp"), 0o1777)
	for _, p := range []struct{ host, in string }{{"/bin/dash", "bin/sh"}, {"/bin/true", "bin/true"}} {
		deps, err := elfDeps(p.host)
		need(t, "a dynamically linked "+p.host+" (dash, coreutils) for the agent image", err)
		copyFile(t, p.host, filepath.Join(root, p.in))
		for _, d := range deps {
			dst := filepath.Join(root, d)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			copyFile(t, d, dst) // copyFile reads through links
		}
	}
	writeFile(t, filepath.Join(root, "etc"), "passwd", "root:x:0:0::/root:/bin/sh\nnsgate:x:65532:65532::/tmp:/bin/sh\n")
	writeFile(t, filepath.Join(root, "etc"), "group", "root:x:0:\nnsgate:x:65532:\n")
	if out, err := exec.Command("tar", "-C", root, "-cf", filepath.Join(k.dir, "base.tar"), ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	os.Chmod(filepath.Join(k.dir, "base.tar"), 0o644)
}

// elfDeps returns the ELF interpreter and the libraries (as found in the
// usual directories) of a dynamically linked program.
func elfDeps(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var deps []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, err
			}
			deps = append(deps, string(bytes.TrimRight(b, "\x00")))
		}
	}
	if len(deps) == 0 {
		return nil, fmt.Errorf("%s is not dynamically linked", path)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		found := ""
		for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/lib"} {
			if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
				found = filepath.Join(d, lib)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s needs %s, not found", path, lib)
		}
		deps = append(deps, found)
	}
	return deps, nil
}

// cmd builds a podman command with the set-up's storage and
// configuration, as root or as the test user.
func (k *kubeEnv) cmd(args ...string) *exec.Cmd {
	full := append([]string{"--root", filepath.Join(k.dir, "storage"), "--runroot", filepath.Join(k.dir, "runroot"), "--storage-driver", "vfs"}, args...)
	cmd := exec.Command(k.podman, full...)
	cmd.Dir = k.dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(k.dir, "home"),
		"CONTAINERS_CONF=" + filepath.Join(k.dir, "config/containers/containers.conf"),
	}
	if k.rootless {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(k.uid), Gid: uint32(k.gid), Groups: []uint32{uint32(k.gid)},
		}}
		cmd.Env = append(cmd.Env,
			"XDG_RUNTIME_DIR="+filepath.Join(k.dir, "run"),
			"XDG_CONFIG_HOME="+filepath.Join(k.dir, "config"),
			"XDG_DATA_HOME="+filepath.Join(k.dir, "data"))
	}
	return cmd
}

// run runs podman to completion (bounded) and logs what it did.
func (k *kubeEnv) run(t *testing.T, args ...string) result {
	t.Helper()
	r := runBounded(t, k.cmd(args...), 5*time.Minute, "podman "+strings.Join(args, " "), dropShareWarning)
	out := r.stdout
	if len(out) > 4000 {
		out = "…" + out[len(out)-4000:]
	}
	t.Logf("podman %s -> %d (%s)\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code,
		r.elapsed.Round(time.Millisecond), out, dropShareWarning(r.stderr))
	return r
}

// play runs `podman kube play` the way docs/kubernetes.md says: 65536
// ids for the pod's user namespace (as Kubernetes gives; Podman 4 would
// size it from the image) and the seccomp profile's directory.
func (k *kubeEnv) play(t *testing.T, manifest string) {
	t.Helper()
	r := k.run(t, "kube", "play", "--network", "slirp4netns", "--userns", "auto:size=65536",
		"--seccomp-profile-root", k.seccomp, manifest)
	if r.code != 0 {
		t.Fatalf("podman kube play %s: exit %d\n%s", manifest, r.code, r.stderr)
	}
}

// wait waits for a container to exit and returns its status.
func (k *kubeEnv) wait(t *testing.T, ctr string) int {
	t.Helper()
	r := k.run(t, "wait", ctr)
	code, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if r.code != 0 || err != nil {
		t.Fatalf("podman wait %s: exit %d %q", ctr, r.code, r.stdout)
	}
	return code
}

// logs returns a container's standard output and standard error.
func (k *kubeEnv) logs(t *testing.T, ctr string) (string, string) {
	t.Helper()
	r := runBounded(t, k.cmd("logs", ctr), time.Minute, "podman logs", nil)
	if r.code != 0 {
		t.Fatalf("podman logs %s: exit %d %s", ctr, r.code, r.stderr)
	}
	return r.stdout, r.stderr
}

// volume returns where a named volume (a PersistentVolumeClaim) lives.
func (k *kubeEnv) volume(t *testing.T, name string) string {
	t.Helper()
	r := k.run(t, "volume", "inspect", "--format", "{{.Mountpoint}}", name)
	if r.code != 0 {
		t.Fatalf("podman volume inspect %s: exit %d %s", name, r.code, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// checkPod asserts what docs/kubernetes.md promises of the pod's
// container: the pod's own user namespace, no capabilities, no new
// privileges, deploy's seccomp profile, /dev/net/tun as a device.
func (k *kubeEnv) checkPod(t *testing.T, ctr string) {
	t.Helper()
	r := k.run(t, "inspect", "--format", "{{json .HostConfig.IDMappings}} {{json .HostConfig.Devices}} {{.HostConfig.SecurityOpt}} {{.Config.User}}", ctr)
	if r.code != 0 {
		t.Fatalf("podman inspect: exit %d %s", r.code, r.stderr)
	}
	out := r.stdout
	for _, want := range []string{`"UidMap":["0:`, `:65536"]`, "no-new-privileges", "65532"} {
		if !strings.Contains(out, want) {
			t.Errorf("container %s: %q lacks %q", ctr, out, want)
		}
	}
	// The OCI configuration runc was given: no capability at all, and
	// the profile of deploy/kubernetes/nsgate-seccomp.json.
	id := strings.TrimSpace(k.run(t, "inspect", "--format", "{{.Id}}", ctr).stdout)
	b, err := os.ReadFile(filepath.Join(k.dir, "storage/vfs-containers", id, "userdata/config.json"))
	if err != nil {
		t.Fatalf("the container's OCI configuration: %v", err)
	}
	var spec struct {
		Mounts []struct {
			Destination string `json:"destination"`
		} `json:"mounts"`
		Process struct {
			NoNewPrivileges bool                `json:"noNewPrivileges"`
			Capabilities    map[string][]string `json:"capabilities"`
		} `json:"process"`
		Linux struct {
			Devices []struct {
				Path string `json:"path"`
			} `json:"devices"`
			Seccomp struct {
				DefaultAction string `json:"defaultAction"`
				Syscalls      []struct {
					Names  []string `json:"names"`
					Action string   `json:"action"`
				} `json:"syscalls"`
			} `json:"seccomp"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	for set, caps := range spec.Process.Capabilities {
		if len(caps) > 0 {
			t.Errorf("container %s: %s capabilities %v, want none (drop: [ALL])", ctr, set, caps)
		}
	}
	// /dev/net/tun: a device node rootful, a bind mount of the host's
	// rootless (a user namespace cannot make device nodes).
	tun := false
	for _, d := range spec.Linux.Devices {
		tun = tun || d.Path == "/dev/net/tun"
	}
	for _, m := range spec.Mounts {
		tun = tun || m.Destination == "/dev/net/tun"
	}
	if !tun {
		t.Errorf("container %s: no /dev/net/tun among its devices and mounts", ctr)
	}
	sc := spec.Linux.Seccomp
	if sc.DefaultAction != "SCMP_ACT_ALLOW" || len(sc.Syscalls) != 1 || !strings.Contains(strings.Join(sc.Syscalls[0].Names, ","), "kexec_load") {
		t.Errorf("container %s: seccomp %+v, want deploy/kubernetes/nsgate-seccomp.json", ctr, sc)
	}
}

// testLab: the lab manifest, played as it is, passes.
func (k *kubeEnv) testLab(t *testing.T) {
	// As it is, copied where the test user can read it.
	manifest := filepath.Join(k.dir, "nsgate-lab.yaml")
	copyFile(t, "../deploy/kubernetes/nsgate-lab.yaml", manifest)
	os.Chmod(manifest, 0o644)
	k.play(t, manifest)
	// The pod goes at the end, also when the lab failed (its volume
	// stays): its user namespace's ids are free again for the next pod,
	// which otherwise cannot start ("could not find enough available
	// IDs").
	defer k.removePod(t, "nsgate-lab")
	const ctr = "nsgate-lab-lab"
	code := k.wait(t, ctr)
	stdout, stderr := k.logs(t, ctr)
	k.checkPod(t, ctr)
	if code != 0 || !strings.Contains(stdout, "PASS: every attack was blocked") {
		t.Fatalf("the lab in the pod exited %d; its table:\n%s\nits progress:\n%s", code, lastLines(stdout, 40), lastLines(stderr, 40))
	}
	t.Logf("the lab in the pod: %s", lastLines(stdout, 4))
	// Its evidence is on the volume, and the log verifies with its key.
	ev := filepath.Join(k.volume(t, "nsgate-lab-evidence"), "lab")
	for _, f := range []string{"evidence.md", "evidence.json", "audit.jsonl", "audit.key"} {
		if _, err := os.Stat(filepath.Join(ev, f)); err != nil {
			t.Errorf("evidence on the volume: %v", err)
		}
	}
	v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", "--key", filepath.Join(ev, "audit.key"), filepath.Join(ev, "audit.jsonl"))
	if v.code != 0 {
		t.Errorf("nsgate audit verify of the lab's log on the volume: exit %d %s", v.code, v.stderr)
	}
	// The manifest's --expect-degraded namespace-quota excuses the one
	// attack only that layer stops (a pod's /proc/sys is read-only), and
	// nothing else; the evidence names it.
	b, err := os.ReadFile(filepath.Join(ev, "evidence.json"))
	if err != nil {
		t.Fatalf("evidence: %v", err)
	}
	var evd struct {
		Attempts []struct {
			ID       string `json:"id"`
			Degraded string `json:"degraded"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(b, &evd); err != nil {
		t.Fatalf("evidence.json: %v", err)
	}
	for _, a := range evd.Attempts {
		if a.Degraded != "" && (a.ID != "res-take-inotify-quota" || a.Degraded != "namespace-quota") {
			t.Errorf("the lab in the pod excused %s through %s: only res-take-inotify-quota through namespace-quota is expected", a.ID, a.Degraded)
		}
	}
}

// removePod removes the pod name. Podman's own clean-up of an exited
// container (conmon runs it) may still hold its /dev/shm mount for a
// moment ("device or resource busy"): it tries again, boundedly.
func (k *kubeEnv) removePod(t *testing.T, name string) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		r := k.run(t, "pod", "rm", "-f", "-t", "0", name)
		if r.code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("podman pod rm %s: exit %d %s", name, r.code, r.stderr)
			return
		}
	}
}

// testAgent: the agent manifest with a test policy and probes as the
// agent: the probes see what the policy says, the fake servers agree,
// and every audit record is on the volume and on the pod's stdout.
func (k *kubeEnv) testAgent(t *testing.T) {
	manifest := filepath.Join(k.dir, "agent.yaml")
	if err := os.WriteFile(manifest, agentManifest(t), 0o644); err != nil {
		t.Fatal(err)
	}
	hits := countContainerTargets()
	k.play(t, manifest)
	const ctr = "nsgate-agent-agent"
	code := k.wait(t, ctr)
	stdout, stderr := k.logs(t, ctr)
	t.Logf("the agent pod exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	k.checkPod(t, ctr)
	if code != 0 {
		t.Fatalf("the agent pod exited %d", code)
	}

	// The pod's stdout: the probes' lines and the audit records.
	var probeLines, records []string
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if strings.HasPrefix(l, `{"seq":`) {
			records = append(records, l)
		} else {
			probeLines = append(probeLines, l)
		}
	}
	checkProbes(t, probeLines, kubeProbes, false)
	hits.check(t)

	// The volume holds the log; stdout holds the same lines.
	file := filepath.Join(k.volume(t, "nsgate-audit"), "audit.jsonl")
	recs := readAudit(t, file)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	onVolume := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if strings.Join(onVolume, "\n") != strings.Join(records, "\n") {
		t.Errorf("the pod's stdout holds %d audit lines, the volume %d, and they differ", len(records), len(onVolume))
	}
	var allowed bool
	for _, rec := range recs {
		if rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == "app.test" && rec.str("upstream") == appV4+":8080" {
			allowed = true
		}
	}
	if !allowed {
		t.Errorf("no allow flow for app.test to %s:8080 on the volume", appV4)
	}
	if rec, ok := findFlow(recs, "deny", metadataV4+":80"); !ok || rec.str("rule") != "builtin:metadata" {
		t.Errorf("the metadata address: %v, want a builtin:metadata denial", rec)
	}
	var nameDenied bool
	for _, rec := range recs {
		if rec.str("event") == "dns" && rec.str("qname") == "evil.test" && rec.str("action") == "deny" {
			nameDenied = true
		}
	}
	if !nameDenied {
		t.Error("no dns denial of evil.test on the volume")
	}
	if len(recs) == 0 || recs[0].str("event") != "start" || recs[len(recs)-1].str("event") != "exit" {
		t.Error("the log on the volume does not run from start to exit")
	}
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", file); v.code != 0 {
		t.Errorf("nsgate audit verify of the log on the volume: exit %d %s", v.code, v.stderr)
	}
	// What the log collector got verifies on its own (a fresh log: its
	// chain starts at zero).
	copied := writeFile(t, k.dir, "from-stdout.jsonl", strings.Join(records, "\n")+"\n")
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", copied); v.code != 0 {
		t.Errorf("nsgate audit verify of the records taken from stdout: exit %d %s", v.code, v.stderr)
	}
}

// agentManifest returns deploy/kubernetes/nsgate-agent.yaml with its user
// parts replaced: the ConfigMap's policy by kubePolicy, the agent after
// -- by a shell running the probes (and nsgate allowed to be executed,
// since the probe is nsgate's). Everything else is the file's.
func agentManifest(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../deploy/kubernetes/nsgate-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script := probeScript("/usr/local/bin/nsgate", kubeProbes)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	var sawPolicy, sawCommand bool
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			break
		}
		root := doc.Content[0]
		switch yamlGet(root, "kind").Value {
		case "ConfigMap":
			if p := yamlGet(yamlGet(root, "data"), "policy.yaml"); p != nil {
				p.Value, sawPolicy = kubePolicy, true
			}
		case "Pod":
			ctrs := yamlGet(yamlGet(root, "spec"), "containers")
			command := yamlGet(ctrs.Content[0], "command")
			var args []*yaml.Node
			for i, a := range command.Content {
				if a.Value == "--" {
					args = append(args, command.Content[:i]...)
					args = append(args, yamlStr("--exec-allow"), yamlStr("/usr/local/bin/nsgate"), yamlStr("--"),
						yamlStr("/bin/sh"), yamlStr("-c"), yamlStr(strings.Join(script, "; ")+"; true"))
					sawCommand = true
					break
				}
			}
			command.Content = args
		}
		if err := enc.Encode(&doc); err != nil {
			t.Fatal(err)
		}
	}
	enc.Close()
	if !sawPolicy || !sawCommand {
		t.Fatalf("deploy/kubernetes/nsgate-agent.yaml: policy found %v, command with -- found %v", sawPolicy, sawCommand)
	}
	return out.Bytes()
}

func yamlGet(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func yamlStr(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanup removes the pods and volumes, stops a rootless Podman's pause
// process (it keeps its user namespace) and deletes the directory.
func (k *kubeEnv) cleanup() {
	k.cmd("pod", "rm", "-a", "-f", "-t", "0").Run()
	k.cmd("volume", "rm", "-a", "-f").Run()
	// Rootless Podman keeps its pause.pid in tmp_dir (containers.conf).
	for _, f := range []string{"tmp/pause.pid", "run/libpod/tmp/pause.pid"} {
		if b, err := os.ReadFile(filepath.Join(k.dir, f)); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	os.RemoveAll(k.dir)
}
