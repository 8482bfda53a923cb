//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPastaStandalone: `nsgate pasta` without Podman, as root and as the
// test user, on a "container" that is a process in network and user
// namespaces of its own (the PID operand): it returns 0 once the
// namespace is configured, leaves a detached helper that applies the
// policy and forwards -t, and the helper ends when the process does.
func TestPastaStandalone(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", podmanPolicy)
		adir := filepath.Join(dir, "audit")

		holder := exec.Command("unshare", "--user", "--map-root-user", "--net", "sleep", "60")
		if m.uid >= 0 {
			holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
		}
		if err := holder.Start(); err != nil {
			t.Fatalf("unshare: %v", err)
		}
		defer func() { holder.Process.Kill(); holder.Wait() }()
		pid := strconv.Itoa(holder.Process.Pid)
		own, _ := os.Readlink("/proc/self/ns/net")
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ns, err := os.Readlink("/proc/" + pid + "/ns/net"); err == nil && ns != own {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the holder never entered a network namespace of its own")
			}
		}

		const hostPort = "18086"
		cmd := nsgateCmd(m, "pasta", "--config-net", "-t", "127.0.0.1/"+hostPort+"-"+hostPort+":8080-8080",
			"--quiet", "--map-guest-addr", "169.254.1.2", pid)
		cmd.Env = append(cmd.Env, "NSGATE_POLICY="+pol, "NSGATE_AUDIT_DIR="+adir)
		r := runBounded(t, cmd, 60*time.Second, "nsgate pasta", nil)
		t.Logf("nsgate pasta -> %d (%s) stdout %q stderr %q", r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("nsgate pasta: exit %d, want 0 once ready", r.code)
		}
		helpers := pastaHelpers()
		if len(helpers) != 1 {
			t.Fatalf("want one detached helper, found %v", helpers)
		}
		inside := func(args ...string) result {
			c := exec.Command("nsenter", append([]string{"-t", pid, "-U", "-n", "--preserve-credentials", nsgateBin}, args...)...)
			if m.uid >= 0 {
				c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
			}
			return runBounded(t, c, 30*time.Second, "nsenter "+strings.Join(args, " "), nil)
		}
		meta := targetAt(metadataV4 + ":80/tcp")
		metaBefore := meta.count()
		for _, p := range []struct{ addr, want string }{
			{appV4 + ":8080", "ok "},
			{metadataV4 + ":80", "refused "},
			{"169.254.1.2:8080", "refused "},
		} {
			if got := inside("__probe", "tcp", p.addr); !strings.HasPrefix(got.stdout, p.want) {
				t.Errorf("probe %s from the namespace: %q %q, want %q", p.addr, got.stdout, got.stderr, p.want)
			}
		}
		if got := meta.count() - metaBefore; got != 0 {
			t.Errorf("fake metadata server saw %d connections, want 0", got)
		}

		// -t: a server in the namespace, reached from the host side.
		srv := exec.Command("nsenter", "-t", pid, "-U", "-n", "--preserve-credentials", nsgateBin, "__probe", "serve", ":8080", "30")
		if m.uid >= 0 {
			srv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			b, err := httpGet("127.0.0.1:" + hostPort)
			if err == nil && strings.Contains(b, "hello from the worker") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no page through the -t forward 127.0.0.1:%s: %v %q", hostPort, err, b)
			}
		}

		// The forward binds the address asked for and nothing wider: not
		// the host's other addresses (otherV4 is on lo, not loopback).
		if b, err := httpGet(otherV4 + ":" + hostPort); err == nil {
			t.Errorf("-t 127.0.0.1/%s also answers on %s: %q", hostPort, otherV4, b)
		}
		// The container cannot use the host alias to reach its own
		// forward's host side (the host's loopback) either.
		if got := inside("__probe", "tcp", "169.254.1.2:"+hostPort); !strings.HasPrefix(got.stdout, "refused ") {
			t.Errorf("the container reached its forward's host side 169.254.1.2:%s: %q %q", hostPort, got.stdout, got.stderr)
		}

		// The namespace goes (its only process ends): so does the helper.
		srv.Process.Kill()
		srv.Wait()
		holder.Process.Kill()
		holder.Wait()
		for deadline := time.Now().Add(10 * time.Second); len(pastaHelpers()) > 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				for _, p := range pastaHelpers() {
					syscall.Kill(p, syscall.SIGKILL)
				}
				t.Fatal("nsgate pasta outlived its namespace")
			}
		}
		file := filepath.Join(adir, "pid-"+pid+".jsonl")
		recs := readAudit(t, file)
		if _, ok := findFlow(recs, "allow", appV4+":8080"); !ok {
			t.Errorf("no allow flow to %s:8080 in %s", appV4, file)
		}
		if rec, ok := findFlow(recs, "deny", "169.254.1.2:8080"); !ok || rec.str("rule") != "builtin:special-range" {
			t.Errorf("the host alias: %v, want a special-range denial (host loopback)", rec)
		}
		var fwd bool
		for _, r := range recs {
			fwd = fwd || r.str("event") == "forward" && r.str("action") == "add" && r.str("listen") == "127.0.0.1:"+hostPort+"/tcp" && strings.HasSuffix(r.str("dst"), ":8080")
		}
		if !fwd {
			t.Errorf("no forward add record for -t 127.0.0.1/%s in %s", hostPort, file)
		}
		if recs[len(recs)-1].str("event") != "exit" {
			t.Errorf("the audit log does not end with exit")
		}
	})
}

// TestPastaIPv6Dropped: nsgate pasta serves IPv4 only (docs/podman.md). A
// container's root that gives itself an IPv6 address, a route via the
// slirp-style gateway fd00::2 and a static neighbour entry for the
// gateway's MAC (nsgate answers no neighbour solicitation there) still
// reaches nothing over IPv6, even an address the policy allows: the
// connection fails, the IPv6 target sees no packet, no flow is recorded
// as allowed, and the exit record counts the dropped packets. IPv4 to the
// same server works.
func TestPastaIPv6Dropped(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		_, err := exec.LookPath("nsenter")
		need(t, "nsenter and unshare (util-linux)", err)
		_, err = exec.LookPath("ip")
		need(t, "ip (iproute2)", err)
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy) // allows [2001:db8::10]:8080
		adir := filepath.Join(dir, "audit")
		target := startTarget(t, m)
		pid := strconv.Itoa(target)
		cmd := nsgateCmd(m, "pasta", "--config-net", "--quiet", pid)
		cmd.Env = append(cmd.Env, "NSGATE_POLICY="+pol, "NSGATE_AUDIT_DIR="+adir)
		if r := runBounded(t, cmd, 60*time.Second, "nsgate pasta", nil); r.code != 0 {
			t.Fatalf("nsgate pasta: exit %d, stderr %q", r.code, r.stderr)
		}
		t.Cleanup(func() {
			for _, p := range pastaHelpers() {
				syscall.Kill(p, syscall.SIGKILL)
			}
		})
		inside := func(name string, args ...string) result {
			c := exec.Command("nsenter", append([]string{"-t", pid, "-U", "-n", "--preserve-credentials", name}, args...)...)
			if m.uid >= 0 {
				c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
			}
			return runBounded(t, c, 30*time.Second, "nsenter "+name+" "+strings.Join(args, " "), nil)
		}
		// The host of the sealed namespace has no default route: the
		// container gets the fallback plan, tap0 with the gateway 10.0.2.2
		// (MAC 52:55:0a:00:02:02).
		for _, args := range [][]string{
			{"-6", "addr", "add", "fd00::100/64", "dev", "tap0", "nodad"},
			{"-6", "route", "add", "default", "via", "fd00::2", "dev", "tap0"},
			{"-6", "neigh", "replace", "fd00::2", "lladdr", "52:55:0a:00:02:02", "dev", "tap0", "nud", "permanent"},
		} {
			if r := inside("ip", args...); r.code != 0 {
				t.Fatalf("ip %s in the container: exit %d %q", strings.Join(args, " "), r.code, r.stderr)
			}
		}
		v6 := targetAt("[" + appV6 + "]:8080/tcp")
		before := v6.count()
		if got := inside(nsgateBin, "__probe", "tcp", appV4+":8080"); !strings.HasPrefix(got.stdout, "ok ") {
			t.Errorf("IPv4 to the allowed server: %q %q", got.stdout, got.stderr)
		}
		if got := inside(nsgateBin, "__probe", "tcp", "["+appV6+"]:8080"); strings.HasPrefix(got.stdout, "ok ") || got.code == 0 {
			t.Errorf("IPv6 through nsgate pasta reached [%s]:8080: %q", appV6, got.stdout)
		}
		if got := v6.count() - before; got != 0 {
			t.Errorf("the IPv6 target saw %d connections, want 0", got)
		}
		syscall.Kill(target, syscall.SIGKILL)
		for deadline := time.Now().Add(10 * time.Second); len(pastaHelpers()) > 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("nsgate pasta outlived its namespace")
			}
		}
		recs := readAudit(t, filepath.Join(adir, "pid-"+pid+".jsonl"))
		if r, ok := findFlow(recs, "allow", "["+appV6+"]:8080"); ok {
			t.Errorf("an IPv6 flow was allowed: %v", r)
		}
		last := recs[len(recs)-1]
		counters, _ := last["counters"].(map[string]any)
		if last.str("event") != "exit" || counters == nil {
			t.Fatalf("the audit log does not end with an exit record with counters: %v", last)
		}
		if d, _ := counters["dropped"].(float64); d == 0 {
			t.Errorf("exit record counts no dropped packets, want the IPv6 SYNs: %v", counters)
		}
	})
}
