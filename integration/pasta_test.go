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
