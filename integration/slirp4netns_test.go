//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// `nsgate slirp4netns` on its own, the way slirp4netns's own tests drive
// it: the target is `unshare -rn sleep`, nsgate opens tap0 in it by PID,
// and the test enters the target with nsenter to probe. Podman's two fd
// orders are both used (-e 3 -r 4 as root, -r 3 -e 4 as the user).

// slirpRun is a running `nsgate slirp4netns`.
type slirpRun struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	exitW  *os.File // closing it hangs up the exit fd
	target int      // PID of the target process
	audit  string
}

func startTarget(t *testing.T, m mode) int {
	t.Helper()
	cmd := exec.Command("unshare", "-rn", "sleep", "60")
	if m.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare -rn: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// unshare execs sleep once the namespaces exist.
	deadline := time.Now().Add(5 * time.Second)
	for {
		self, _ := os.Readlink("/proc/self/ns/net")
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); err == nil && ns != self && strings.HasSuffix(exe, "sleep") {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare -rn sleep did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slirpSetup checks for nsenter, writes the IP policy into a work
// directory and starts a target namespace: what most helper tests begin
// with.
func slirpSetup(t *testing.T, m mode) (dir, pol string, target int) {
	t.Helper()
	_, err := exec.LookPath("nsenter")
	need(t, "nsenter and unshare (util-linux)", err)
	dir = workDir(t, m)
	return dir, writeFile(t, dir, "policy.yaml", ipPolicy), startTarget(t, m)
}

// startSlirpAPI starts nsgate slirp4netns on the IP policy for a target
// namespace of its own, with an API socket, whose path it returns too.
func startSlirpAPI(t *testing.T, m mode) (*slirpRun, string) {
	t.Helper()
	dir, pol, target := slirpSetup(t, m)
	sock := filepath.Join(dir, "api.sock")
	return startSlirp(t, m, dir, pol, target, false, "--api-socket="+sock), sock
}

// startSlirp starts the helper on target with Podman's flags; podman5
// selects the -r 3 -e 4 order. It waits for the ready fd.
func startSlirp(t *testing.T, m mode, dir, pol string, target int, podman5 bool, extra ...string) *slirpRun {
	t.Helper()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fds := []string{"-e", "3", "-r", "4"}
	files := []*os.File{exitR, readyW}
	if podman5 {
		fds = []string{"-r", "3", "-e", "4"}
		files = []*os.File{readyW, exitR}
	}
	args := append([]string{"slirp4netns", "--disable-host-loopback", "--mtu=65520"}, extra...)
	args = append(args, "--enable-ipv6", "-c")
	args = append(args, fds...)
	args = append(args, strconv.Itoa(target), "tap0")
	cmd := nsgateCmd(m, args...)
	cmd.Env = append(cmd.Env, "NSGATE_POLICY="+pol, "NSGATE_AUDIT_DIR="+dir)
	cmd.ExtraFiles = files
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exitR.Close()
	readyW.Close()
	s := &slirpRun{cmd: cmd, stderr: &errb, exitW: exitW, target: target,
		audit: filepath.Join(dir, fmt.Sprintf("pid-%d.jsonl", target))}
	t.Cleanup(func() {
		s.exitW.Close()
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(readyR)
		readyR.Close()
		got <- string(b)
	}()
	select {
	case b := <-got:
		if b != "1" {
			t.Fatalf("ready fd said %q, want \"1\"; stderr:\n%s", b, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no ready signal; stderr:\n%s", errb.String())
	}
	return s
}

// probe runs nsgate's probe inside the target's user and network
// namespaces.
func (s *slirpRun) probe(t *testing.T, m mode, addr string) (string, int) {
	t.Helper()
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(s.target), "-U", "-n", "--preserve-credentials",
		nsgateBin, "__probe", "tcp", addr)
	if m.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
	}
	out, err := cmd.CombinedOutput()
	t.Logf("probe %s in the target: %s", addr, strings.TrimSpace(string(out)))
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nsenter: %v", err)
	}
	return strings.TrimSpace(string(out)), code
}

// stop hangs up the exit fd and waits for a clean exit.
func (s *slirpRun) stop(t *testing.T) {
	t.Helper()
	s.exitW.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("helper exited with %v after the exit fd hung up; stderr:\n%s", err, s.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("helper still running 10s after the exit fd hung up")
	}
}

// helperChild returns the PID of the process doing the work: the helper
// itself, or, when it re-executed itself into a mount namespace of its own
// (--enable-sandbox started from a shell), that child.
func helperChild(pid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if exe, _ := os.Readlink("/proc/" + e.Name() + "/exe"); exe == nsgateBin {
				c, _ := strconv.Atoi(e.Name())
				return c
			}
		}
	}
	return pid
}

func statusField(pid int, key string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestSlirp4netnsStandalone(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir, pol, target := slirpSetup(t, m)
		// Started from a shell, nsgate makes the mount namespace
		// --enable-sandbox needs (Podman gives it one): as root in its
		// own user namespace, unprivileged in the target's, which it
		// joins first, as slirp4netns does.
		extra := []string{"--enable-seccomp", "--enable-sandbox"}
		meta := targetAt(metadataV4 + ":80/tcp")
		metaBefore := meta.count()
		s := startSlirp(t, m, dir, pol, target, m.name == "user", extra...)

		if out, code := s.probe(t, m, appV4+":8080"); code != 0 || !strings.Contains(out, "200 OK") {
			t.Errorf("allowed address: exit %d %q", code, out)
		}
		if out, code := s.probe(t, m, metadataV4+":80"); code == 0 || !strings.HasPrefix(out, "refused") {
			t.Errorf("metadata address: exit %d %q, want refused", code, out)
		}
		if out, code := s.probe(t, m, "[2001:db8::10]:8080"); code != 0 {
			t.Errorf("allowed IPv6 address over the TAP (fd00::100 via fd00::2): exit %d %q", code, out)
		}
		if got := meta.count() - metaBefore; got != 0 {
			t.Errorf("fake metadata server saw %d connections", got)
		}

		worker := helperChild(s.cmd.Process.Pid)
		t.Logf("helper %d (working process %d): NoNewPrivs %s, Seccomp %s, CapEff %s", s.cmd.Process.Pid, worker,
			statusField(worker, "NoNewPrivs"), statusField(worker, "Seccomp"), statusField(worker, "CapEff"))
		if nnp := statusField(worker, "NoNewPrivs"); nnp != "1" {
			t.Errorf("helper NoNewPrivs %q, want 1 (--enable-seccomp)", nnp)
		}
		if sc := statusField(worker, "Seccomp"); sc != "2" {
			t.Errorf("helper Seccomp %q, want 2 (filter mode)", sc)
		}
		if held := s.cmd.Process.Pid; worker == held {
			t.Errorf("helper %d did not re-execute itself into a mount namespace of its own", worker)
		} else if c := statusField(held, "CapEff"); c != "0000000000000400" && c != "0000000000000000" ||
			statusField(held, "NoNewPrivs") != "1" || statusField(held, "Seccomp") != "2" {
			// The process the caller holds only waits for the working
			// one: it is confined too (all but its root).
			t.Errorf("the held helper process %d: CapEff %s, NoNewPrivs %s, Seccomp %s; want confined as well", held,
				c, statusField(held, "NoNewPrivs"), statusField(held, "Seccomp"))
		}
		{
			// As slirp4netns's sandbox test checks: no capability but
			// CAP_NET_BIND_SERVICE, and a root that hides the host.
			if c := statusField(worker, "CapEff"); c != "0000000000000400" {
				t.Errorf("helper CapEff %s, want only CAP_NET_BIND_SERVICE (0400)", c)
			}
			ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root", worker))
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if err != nil || strings.Join(names, ",") != "etc" {
				t.Errorf("helper's root holds %v (%v), want only etc", names, err)
			}
		}
		s.stop(t)

		recs := readAudit(t, s.audit)
		if _, ok := findFlow(recs, "deny", metadataV4+":80"); !ok {
			t.Errorf("no deny record for the metadata address")
		}
		if _, ok := findFlow(recs, "allow", appV4+":8080"); !ok {
			t.Errorf("no allow record for the approved address")
		}
		if recs[len(recs)-1].str("event") != "exit" {
			t.Errorf("audit log does not end with exit")
		}
	})
}

// TestSlirp4netnsSpoofedSource: a container's root (CAP_NET_ADMIN and
// CAP_NET_RAW in its namespaces, as in Podman) adds another address of the
// subnet and connects from it. Only the container's own address is a
// source: the connections get no answer, the target sees none of them,
// and the audit log has one folded packet record for them.
func TestSlirp4netnsSpoofedSource(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir, pol, target := slirpSetup(t, m)
		s := startSlirp(t, m, dir, pol, target, false)
		app := targetAt(appV4 + ":8080/tcp")
		before := app.count()

		enter := func(args ...string) (string, error) {
			cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(target), "-U", "-n", "--preserve-credentials"}, args...)...)
			if m.uid >= 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
			}
			out, err := cmd.CombinedOutput()
			return strings.TrimSpace(string(out)), err
		}
		if out, err := enter("ip", "addr", "add", "10.0.2.50/24", "dev", "tap0"); err != nil {
			t.Fatalf("ip addr add in the target: %v: %s", err, out)
		}
		// The control first: the container's own address connects.
		if out, err := enter(nsgateBin, "__probe", "tcp-from", "10.0.2.100", appV4+":8080", "1"); err != nil {
			t.Fatalf("from the container's own address: %v: %s", err, out)
		}
		// The target counts a connection when it handles it, which may
		// be after the probe returned.
		for deadline := time.Now().Add(3 * time.Second); app.count()-before < 1 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		own := app.count() - before
		if own != 1 {
			t.Fatalf("the target saw %d connections from the container's own address, want 1", own)
		}
		out, err := enter(nsgateBin, "__probe", "tcp-from", "10.0.2.50", appV4+":8080", "50")
		t.Logf("50 connections from 10.0.2.50: %s", out)
		if err == nil || !strings.HasPrefix(out, "refused 0/50") {
			t.Errorf("connections from another address of the subnet: %v %q, want none to complete", err, out)
		}
		if got := app.count() - before - own; got != 0 {
			t.Errorf("the target saw %d connections from the spoofed source", got)
		}
		s.stop(t)
		var n uint64
		for _, r := range readAudit(t, s.audit) {
			if r.str("event") == "packet" && r.str("src") == "10.0.2.50" && strings.Contains(r.str("reason"), "source address") {
				c, _ := r["count"].(float64)
				n += max(1, uint64(c))
			}
		}
		if n == 0 {
			t.Errorf("no packet record for the spoofed source")
		}
		t.Logf("packet records count %d refused packets from 10.0.2.50", n)
	})
}

func TestSlirp4netnsCommandLine(t *testing.T) {
	needSealed(t)
	m := mode{name: "self", uid: -1, gid: -1}
	r := runNsgate(t, m, "slirp4netns", "--help")
	for _, flag := range []string{"--disable-host-loopback", "--mtu", "--enable-sandbox", "--enable-seccomp",
		"--cidr", "--enable-ipv6", "--outbound-addr", "--outbound-addr6", "--netns-type", "--userns-path", "--api-socket"} {
		if r.code != 0 || !strings.Contains(r.stdout, flag) {
			t.Errorf("--help lacks %s (Podman passes a flag only if --help lists it)", flag)
		}
	}
	for _, tc := range []struct {
		why  string
		args []string
	}{
		{"unknown option", []string{"--bogus", "1", "tap0"}},
		{"bad exit fd", []string{"-e", "x", "1", "tap0"}},
		{"MTU too small", []string{"--mtu=10", "1", "tap0"}},
		{"CIDR not a network address", []string{"--cidr=10.0.2.1/24", "1", "tap0"}},
		{"no target", []string{"-c"}},
	} {
		r := runNsgate(t, m, append([]string{"slirp4netns"}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 1 || len(lines) != 1 || lines[0] == "" {
			t.Errorf("%s: exit %d stderr %q, want exit 1 and one line", tc.why, r.code, r.stderr)
		}
	}
	// A target that does not exist fails before ready, with one line.
	r = runNsgate(t, m, "slirp4netns", "-c", "--netns-type=path", "/nonexistent/netns", "tap0")
	if r.code != 1 || !strings.Contains(r.stderr, "/nonexistent/netns") {
		t.Errorf("missing netns: exit %d stderr %q, want 1 naming the path", r.code, r.stderr)
	}
}

// enterStart starts args inside the target's user and network namespaces
// and returns once its first output line (a server's "listening ...")
// has come; the process is killed at the end of the test.
func (s *slirpRun) enterStart(t *testing.T, m mode, args ...string) string {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(s.target), "-U", "-n", "--preserve-credentials"}, args...)...)
	if m.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("nsenter %v: %v", args, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("%v printed nothing in the target", args)
	}
	return ""
}

// httpGetFrom is httpGet from the local address src.
func httpGetFrom(src, addr string) (string, error) {
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestSlirp4netnsPublishedSource: a port published through the API
// (add_hostfwd, Podman's -p with port_handler=slirp4netns) reaches the
// container's server from the client's own address when the client is
// not on the host's loopback (as under slirp4netns), and from the gateway
// 10.0.2.2 when it is; the audit log's inbound records name the real
// client either way.
func TestSlirp4netnsPublishedSource(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		s, sock := startSlirpAPI(t, m)
		if l := s.enterStart(t, m, nsgateBin, "__probe", "serve", ":8080", "60"); !strings.HasPrefix(l, "listening") {
			t.Fatalf("server in the target: %q", l)
		}
		const port = 18091
		req := fmt.Sprintf(`{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"0.0.0.0","host_port":%d,"guest_port":8080}}`, port)
		if got, err := apiRequest(sock, req); err != nil || !strings.Contains(got, `"id":1`) {
			t.Fatalf("add_hostfwd: %q %v", got, err)
		}
		for _, tc := range []struct{ why, src, dst, want string }{
			// otherV4 is on lo of the sealed namespace, but is not a
			// loopback address: a client elsewhere on the host's network.
			{"a client on a non-loopback address", otherV4, fmt.Sprintf("%s:%d", appV4, port), otherV4},
			{"a client on the loopback", "127.0.0.1", fmt.Sprintf("127.0.0.1:%d", port), "10.0.2.2"},
		} {
			var page string
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				page, err = httpGetFrom(tc.src, tc.dst)
				if err == nil && strings.Contains(page, "hello from the worker") || time.Now().After(deadline) {
					break
				}
			}
			t.Logf("%s: %q", tc.why, page)
			if !strings.Contains(page, "\nclient "+tc.want+":") {
				t.Errorf("%s (%s → %s): the container's server saw %q (%v), want client %s", tc.why, tc.src, tc.dst, page, err, tc.want)
			}
		}
		s.stop(t)
		var fromOther, fromLoop bool
		for _, r := range readAudit(t, s.audit) {
			if r.str("event") != "inbound" || r.str("action") != "allow" || r.str("dst") != "10.0.2.100:8080" {
				continue
			}
			fromOther = fromOther || strings.HasPrefix(r.str("src"), otherV4+":")
			fromLoop = fromLoop || strings.HasPrefix(r.str("src"), "127.0.0.1:")
		}
		if !fromOther || !fromLoop {
			t.Errorf("inbound records name the client %s: %v, 127.0.0.1: %v; want both", otherV4, fromOther, fromLoop)
		}
	})
}

// TestPodmanRootlessNetnsRestart: Podman 4's user-defined networks share
// one rootless network namespace served by one helper, whose audit log is
// named after that namespace. `podman network reload` and `podman
// restart` replace the helper (Podman sends the old one SIGTERM and starts
// the new one at once, same name): with NSGATE_AUDIT_DIR set both work,
// the container's network works after them, and the one log holds every
// helper's records, from start to exit, in one chain that verifies.
func TestPodmanRootlessNetnsRestart(t *testing.T) {
	needSealed(t)
	pm := newPodmanEnv(t)
	adir := pm.auditDir(t, "netns")
	if r := pm.run(t, adir, "network", "create", "nsgnet"); r.code != 0 {
		t.Fatalf("podman network create: exit %d\n%s", r.code, r.stderr)
	}
	if r := pm.run(t, adir, "run", "-d", "--name", "srv", "--network", "nsgnet", podmanImage,
		"nsgate", "__probe", "serve", ":8080", "300"); r.code != 0 {
		t.Fatalf("podman run -d --network nsgnet: exit %d\n%s", r.code, r.stderr)
	}
	reach := func(when string) {
		t.Helper()
		r := pm.run(t, adir, "exec", "srv", "nsgate", "__probe", "tcp", appV4+":8080")
		if r.code != 0 || !strings.Contains(r.stdout, " 200 ") {
			t.Errorf("%s: the container does not reach the approved address: exit %d %q", when, r.code, r.stdout)
		}
	}
	reach("before")
	// Whether the old helper has let go by the time the new one opens
	// the log is a race: a few rounds give it room to show.
	const rounds = 2
	for i := 0; i < rounds; i++ {
		if r := pm.run(t, adir, "network", "reload", "srv"); r.code != 0 {
			t.Fatalf("podman network reload (round %d): exit %d\n%s", i+1, r.code, r.stderr)
		}
		reach("after network reload")
		if r := pm.run(t, adir, "restart", "-t", "0", "srv"); r.code != 0 {
			t.Fatalf("podman restart (round %d): exit %d\n%s", i+1, r.code, r.stderr)
		}
		reach("after restart")
	}
	if r := pm.run(t, "", "rm", "-f", "-t", "0", "srv"); r.code != 0 {
		t.Fatalf("podman rm -f: exit %d\n%s", r.code, r.stderr)
	}
	for deadline := time.Now().Add(10 * time.Second); len(nsgateProcs(pm.dir)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nsgate helpers outlived the last container: %v", nsgateProcs(pm.dir))
		}
	}
	files, _ := filepath.Glob(filepath.Join(adir, "*.jsonl"))
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "rootless-netns-") {
		t.Fatalf("audit directory holds %v, want one rootless-netns-<hash>.jsonl", files)
	}
	recs := readAudit(t, files[0])
	var starts, exits, allows int
	for _, r := range recs {
		switch {
		case r.str("event") == "start":
			starts++
		case r.str("event") == "exit":
			exits++
		case r.str("event") == "flow" && r.str("action") == "allow" && r.str("dst") == appV4+":8080":
			allows++
		}
	}
	t.Logf("%s: %d records, %d helpers (start records), %d exit records, %d allowed flows", files[0], len(recs), starts, exits, allows)
	if starts < 2 || exits != starts || allows != 1+2*rounds {
		t.Errorf("want at least two helpers in the log, each with its exit record, and %d allowed flows; got %d starts, %d exits, %d allows", 1+2*rounds, starts, exits, allows)
	}
	if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", files[0]); v.code != 0 {
		t.Errorf("audit verify %s: exit %d %s", files[0], v.code, v.stderr)
	}
}

// TestSlirp4netnsDHCP: a DHCP client on the TAP (busybox udhcpc, as
// slirp4netns's own dhcp test runs) gets a lease of the container's
// address from the gateway, with the gateway as router and the DNS
// address as name server; and the leased address is the one the gateway
// accepts as the container's source.
func TestSlirp4netnsDHCP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		_, err := os.Stat("/bin/busybox")
		need(t, "a static /bin/busybox (package busybox-static) for udhcpc", err)
		dir, pol, target := slirpSetup(t, m)
		s := startSlirp(t, m, dir, pol, target, false)
		// The script udhcpc runs prints what the lease says.
		script := writeFile(t, dir, "lease.sh", "#!/bin/sh\necho \"lease $1 ip=$ip mask=$mask router=$router dns=$dns\"\n")
		os.Chmod(script, 0o755)
		cmd := exec.Command("nsenter", "-t", strconv.Itoa(target), "-U", "-n", "--preserve-credentials",
			"/bin/busybox", "udhcpc", "-f", "-q", "-n", "-t", "3", "-T", "2", "-i", "tap0", "-s", script)
		if m.uid >= 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
		}
		r := runBounded(t, cmd, 30*time.Second, "udhcpc", nil)
		t.Logf("udhcpc -> %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		if r.code != 0 || !strings.Contains(r.stdout, "lease bound ip=10.0.2.100 mask=24 router=10.0.2.2 dns=10.0.2.3") {
			t.Errorf("udhcpc: exit %d, want a lease of 10.0.2.100/24 via 10.0.2.2 with DNS 10.0.2.3", r.code)
		}
		s.stop(t)
		// The exchange is not a flow: no record of it (gVisor also
		// delivers the gateway's broadcast answers to itself).
		for _, rec := range readAudit(t, s.audit) {
			if strings.Contains(rec.str("dst"), "255.255.255.255") || strings.Contains(rec.str("src"), ":67") {
				t.Errorf("audit record for the DHCP exchange: %v", rec)
			}
		}
	})
}

// TestSlirp4netnsAPIForwardsAudited drives the live API socket as a
// hostile caller would: a forward to the gateway (slirp4netns's way to
// the host's loopback), the host's loopback and the metadata address is
// refused and opens no port; malformed, oversized, non-UTF-8 and
// out-of-range requests get slirp4netns's error replies; removing a
// forward nobody added fails; many concurrent requests are all answered;
// and every forward added, refused and removed is a "forward" record in
// the audit log, which verifies.
func TestSlirp4netnsAPIForwardsAudited(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		s, sock := startSlirpAPI(t, m)
		const failed = `{"error":{"desc":"bad request: add_hostfwd: slirp_add_hostfwd failed"}}`
		const badID = `{"error":{"desc":"bad request: remove_hostfwd: bad arguments.id"}}`
		for i, guest := range []string{"10.0.2.2", "127.0.0.1", "169.254.169.254"} {
			port := 18120 + i
			req := fmt.Sprintf(`{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.0.0.1","host_port":%d,"guest_addr":%q,"guest_port":22}}`, port, guest)
			if got, err := apiRequest(sock, req); err != nil || got != failed {
				t.Errorf("forward to guest %s: %q, %v; want %s", guest, got, err, failed)
			}
			if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second); err == nil {
				c.Close()
				t.Errorf("forward to guest %s: host port %d accepts connections", guest, port)
			}
		}
		for _, tc := range []struct{ why, req, want string }{
			{"too large", `{"execute":"list_hostfwd","pad":"` + strings.Repeat("x", 5000) + `"}`, `{"error":{"desc":"bad request: too large message"}}`},
			{"non-UTF-8 protocol", "{\"execute\":\"add_hostfwd\",\"arguments\":{\"proto\":\"tc\xff\",\"host_port\":18130,\"guest_port\":80}}", ""},
			{"port 0", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":0,"guest_port":80}}`, `{"error":{"desc":"bad request: add_hostfwd: bad arguments.host_port"}}`},
			{"port 65536", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":18131,"guest_port":65536}}`, `{"error":{"desc":"bad request: add_hostfwd: bad arguments.guest_port"}}`},
			{"remove a forward nobody added", `{"execute":"remove_hostfwd","arguments":{"id":1}}`, badID},
			{"remove an id past int", `{"execute":"remove_hostfwd","arguments":{"id":1e300}}`, badID},
			{"truncated", `{"execute":"add_hostfwd","arguments":{"proto":"tcp"`, `{"error":{"desc":"bad request: cannot parse JSON"}}`},
		} {
			got, err := apiRequest(sock, tc.req)
			if tc.why == "too large" && got == tc.want {
				err = nil // answered, then closed with the rest unread: a reset after the reply, as slirp4netns
			}
			if err != nil || !strings.HasPrefix(got, `{"error":`) || tc.want != "" && got != tc.want {
				t.Errorf("%s: %q, %v; want %s", tc.why, got, err, tc.want)
			}
		}
		if got, err := apiRequest(sock, `{"execute":"add_hostfwd","arguments":{"proto":"udp","host_addr":"127.0.0.1","host_port":18132,"guest_port":53}}`); err != nil || got != `{"return":{"id":1}}` {
			t.Fatalf("add_hostfwd: %q, %v", got, err)
		}
		var wg sync.WaitGroup
		var answered atomic.Int32
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if got, err := apiRequest(sock, `{"execute":"list_hostfwd"}`); err == nil && strings.Contains(got, `"host_port":18132`) {
					answered.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := answered.Load(); n != 64 {
			t.Errorf("%d of 64 concurrent list_hostfwd answered", n)
		}
		if got, err := apiRequest(sock, `{"execute":"remove_hostfwd","arguments":{"id":1}}`); err != nil || got != `{"return":{}}` {
			t.Errorf("remove_hostfwd: %q, %v", got, err)
		}
		s.stop(t)
		var add, remove, deny int
		for _, r := range readAudit(t, s.audit) {
			if r.str("event") != "forward" {
				continue
			}
			switch r.str("action") {
			case "add":
				if r.str("listen") == "127.0.0.1:18132/udp" && r.str("dst") == "10.0.2.100:53" && r.num("id") == 1 {
					add++
				}
			case "remove":
				if r.str("listen") == "127.0.0.1:18132/udp" && r.num("id") == 1 {
					remove++
				}
			case "deny":
				if strings.HasSuffix(r.str("dst"), ":22") && r.str("error") != "" {
					deny++
				}
			}
		}
		if add != 1 || remove != 1 || deny != 3 {
			t.Errorf("forward records: %d add, %d remove, %d deny; want 1, 1, 3", add, remove, deny)
		}
		if v := runNsgate(t, m, "audit", "verify", s.audit); v.code != 0 || !strings.HasPrefix(v.stdout, "ok: ") {
			t.Errorf("audit verify: exit %d\n%s%s", v.code, v.stdout, v.stderr)
		}
	})
}

// TestHelperPolicySectionsNotInForce: a network helper serves a
// container's network and nothing else, so a policy's exec and filesystem
// sections, which `nsgate run` enforces on its worker, do not bind the
// container. The helper must not drop them silently: its audit log has a
// policy record with action degraded naming both, as `nsgate run` records
// a layer it could not apply, and the network sections still apply.
func TestHelperPolicySectionsNotInForce(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		_, err := exec.LookPath("nsenter")
		need(t, "nsenter and unshare (util-linux)", err)
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy+"exec:\n  allow: [/usr/bin/]\nfilesystem:\n  hide: ["+dir+"]\n")
		target := startTarget(t, m)
		s := startSlirp(t, m, dir, pol, target, false)
		if out, code := s.probe(t, m, appV4+":8080"); code != 0 || !strings.Contains(out, "200 OK") {
			t.Errorf("allowed address: exit %d %q", code, out)
		}
		if out, code := s.probe(t, m, metadataV4+":80"); code == 0 || !strings.HasPrefix(out, "refused") {
			t.Errorf("metadata address: exit %d %q, want refused", code, out)
		}
		s.stop(t)
		recs := readAudit(t, s.audit)
		var degraded string
		for _, r := range recs {
			if r.str("event") == "policy" && r.str("action") == "degraded" {
				degraded = r.str("error")
			}
		}
		if !strings.Contains(degraded, "exec") || !strings.Contains(degraded, "filesystem") {
			t.Errorf("the helper's audit log has no policy degraded record naming exec and filesystem (got %q): the container runs and writes what the policy's exec and filesystem sections would refuse under nsgate run", degraded)
		}
		if _, ok := findFlow(recs, "deny", metadataV4+":80"); !ok {
			t.Errorf("no deny record for the metadata address")
		}
		if recs[len(recs)-1].str("event") != "exit" {
			t.Errorf("audit log does not end with exit")
		}
	})
}

// TestSlirp4netnsStderrGone: whoever read the helper's standard error may
// stop (Podman, a shell pipe that ended). Without an audit directory each
// denial is a line there; written after the reader went away, it must not
// kill the helper with SIGPIPE, and the container's network with it.
func TestSlirp4netnsStderrGone(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		_, pol, target := slirpSetup(t, m)
		errR, errW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := nsgateCmd(m, "slirp4netns", "--disable-host-loopback", "--mtu=65520", "-c", strconv.Itoa(target), "tap0")
		cmd.Env = append(cmd.Env, "NSGATE_POLICY="+pol)
		cmd.Stderr = errW
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		errW.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		s := &slirpRun{cmd: cmd, target: target}
		up := false
		for deadline := time.Now().Add(15 * time.Second); !up && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			out, code := s.probe(t, m, appV4+":8080")
			up = code == 0 && strings.Contains(out, "200 OK")
		}
		if !up {
			t.Fatal("the helper never served the allowed address")
		}
		errR.Close() // the reader goes away
		for range 3 {
			if out, code := s.probe(t, m, metadataV4+":80"); code == 0 {
				t.Errorf("metadata address: exit %d %q, want refused", code, out)
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the helper ended once its standard error had no reader: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		if out, code := s.probe(t, m, appV4+":8080"); code != 0 || !strings.Contains(out, "200 OK") {
			t.Errorf("after its standard error lost its reader, the allowed address: exit %d %q", code, out)
		}
	})
}
