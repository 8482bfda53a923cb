//go:build integration

package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chownTo gives path (a file or a link) to the mode's user, so that the
// links a test plants are the caller's own, as a worker's would be.
func chownTo(t *testing.T, m mode, paths ...string) {
	t.Helper()
	if m.uid < 0 {
		return
	}
	for _, p := range paths {
		if err := os.Lchown(p, m.uid, m.gid); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPolicyLinkInsideRWRefused: a --policy whose path passes through a
// link inside a --rw tree (the file is a link, or a folder on the way is)
// is refused at start with a clear error; the worker never runs.
func TestPolicyLinkInsideRWRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		safe := filepath.Join(dir, "safe")
		ws := filepath.Join(dir, "ws")
		os.Mkdir(safe, 0o755)
		os.Mkdir(ws, 0o755)
		pol := writeFile(t, safe, "policy.yaml", ipPolicy)
		os.Symlink(pol, filepath.Join(ws, "policy.yaml"))
		os.Symlink(safe, filepath.Join(ws, "etc"))
		chownTo(t, m, safe, ws, pol, filepath.Join(ws, "policy.yaml"), filepath.Join(ws, "etc"))
		marker := filepath.Join(ws, "ran")
		for _, p := range []string{filepath.Join(ws, "policy.yaml"), filepath.Join(ws, "etc", "policy.yaml"), filepath.Join(ws, "plain.yaml")} {
			if p == filepath.Join(ws, "plain.yaml") {
				writeFile(t, ws, "plain.yaml", ipPolicy)
			}
			r := runNsgate(t, m, "run", "--rw", ws, "--policy", p, "--", "touch", marker)
			if r.code == 0 || !strings.Contains(r.stderr, "which the worker may write") {
				t.Errorf("--policy %s inside --rw %s: exit %d, stderr %q; want a refusal naming the writable tree", p, ws, r.code, r.stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("--policy %s: the worker ran", p)
				os.Remove(marker)
			}
		}
	})
}

// TestReloadAfterRepointKeepsPolicy: the policy's folder is re-pointed by
// name (renamed away, a link to another policy put in its place) while
// the worker runs; a reload reads the file through the folder opened at
// start: the old policy stays in force (the policy record carries its
// sha256), and the target the other policy would allow sees no packet.
func TestReloadAfterRepointKeepsPolicy(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		etc := filepath.Join(dir, "etc")
		evil := filepath.Join(dir, "evil")
		os.Mkdir(etc, 0o755)
		os.Mkdir(evil, 0o755)
		pol := writeFile(t, etc, "policy.yaml", "version: 1\nallow:\n  - cidr: 203.0.113.10/32\n    ports: [9999]\n")
		writeFile(t, evil, "policy.yaml", "version: 1\nallow:\n  - cidr: 0.0.0.0/0\n")
		log := filepath.Join(dir, "audit.jsonl")
		target := targetAt("203.0.113.10:8080/tcp")
		before := target.count()
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--exec-allow", "/usr/bin/seq", "--exec-allow", "/usr/bin/sleep", "--", "sh", "-c",
			"for i in $(seq 40); do curl -s --max-time 1 http://203.0.113.10:8080/ && exit 0; sleep 0.1; done; exit 1")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitRec := func(what string, ok func(record) bool) record {
			t.Helper()
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if b, err := os.ReadFile(log); err == nil && bytes.HasSuffix(b, []byte("\n")) {
					for _, r := range readAudit(t, log) {
						if ok(r) {
							return r
						}
					}
				}
			}
			cmd.Process.Kill()
			t.Fatalf("no %s; stderr %s", what, errb.String())
			return nil
		}
		start := waitRec("start record", func(r record) bool { return r.str("event") == "start" })
		waitRec("a denied flow", func(r record) bool { return r.str("event") == "flow" && r.str("action") == "deny" })
		if err := os.Rename(etc, filepath.Join(dir, "etc.old")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(evil, etc); err != nil {
			t.Fatal(err)
		}
		chownTo(t, m, etc)
		cmd.Process.Signal(syscall.SIGHUP)
		rel := waitRec("policy record", func(r record) bool { return r.str("event") == "policy" })
		if rel.str("action") != "allow" || rel.str("policy_sha256") != start.str("policy_sha256") {
			t.Errorf("reload record %v: want action allow with the start policy's sha256 %s", rel, start.str("policy_sha256"))
		}
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("the worker got through after the re-point")
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("worker still running")
		}
		if got := target.count() - before; got != 0 {
			t.Errorf("the target the other policy allows saw %d connections, want 0", got)
		}
		if _, ok := findFlow(readAudit(t, log), "allow", "203.0.113.10:8080"); ok {
			t.Error("an allowed flow to 203.0.113.10:8080 is in the log")
		}
	})
}

// TestPlantedOutputLinksRefused: a link left where the pcap, the learned
// file, the audit log, its head or its copy will be is not written
// through: the file it points to stays byte-identical.
func TestPlantedOutputLinksRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		const keys = "ssh-ed25519 AAAAgood operator@host\n"
		victim := writeFile(t, dir, "authorized_keys", keys)
		chownTo(t, m, victim)
		plant := func(name string) string {
			p := filepath.Join(dir, name)
			os.Remove(p)
			if err := os.Symlink(victim, p); err != nil {
				t.Fatal(err)
			}
			chownTo(t, m, p)
			return p
		}
		for _, c := range []struct {
			what   string
			args   func() []string
			refuse bool
		}{
			{"pcap", func() []string { return []string{"--pcap", plant("capture.pcap")} }, true},
			{"learn", func() []string { return []string{"--learn", plant("learned.yaml")} }, true},
			{"audit log", func() []string { return []string{"--audit", plant("audit.jsonl")} }, true},
			{"audit copy", func() []string {
				return []string{"--audit", filepath.Join(dir, "a2.jsonl"), "--audit", plant("copy")}
			}, true},
			// The head is written by renaming a new file over the link:
			// the run goes on, the link is replaced, its target untouched.
			{"audit head", func() []string {
				os.Remove(filepath.Join(dir, "a3.jsonl"))
				plant("a3.jsonl.head")
				return []string{"--audit", filepath.Join(dir, "a3.jsonl")}
			}, false},
		} {
			args := append([]string{"run", "--policy", pol}, c.args()...)
			r := runNsgate(t, m, append(args, "--", "curl", "-s", "http://203.0.113.10:8080/")...)
			if c.refuse && (r.code == 0 || !strings.Contains(r.stderr, "link")) {
				t.Errorf("%s through a planted link: exit %d, stderr %q; want a refusal naming the link", c.what, r.code, r.stderr)
			}
			if b, _ := os.ReadFile(victim); string(b) != keys {
				t.Errorf("%s: the link's target changed: %q", c.what, b)
			}
		}
	})
}

// TestOutputsNormalUse: new files and the caller's own existing regular
// files still work as outputs.
func TestOutputsNormalUse(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		pcap := writeFile(t, dir, "old.pcap", "old bytes")
		learned := writeFile(t, dir, "old.yaml", "# old\n")
		chownTo(t, m, pcap, learned)
		for i := 0; i < 2; i++ { // new files, then the same files again
			log := filepath.Join(dir, "audit.jsonl")
			r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--pcap", pcap, "--learn", learned, "--", "curl", "-s", "http://203.0.113.10:8080/")
			if r.code != 0 {
				t.Fatalf("run %d: exit %d, stderr %q", i, r.code, r.stderr)
			}
			if b, _ := os.ReadFile(pcap); len(b) < 24 || bytes.Contains(b, []byte("old bytes")) {
				t.Errorf("run %d: the pcap was not rewritten (%d bytes)", i, len(b))
			}
			if b, _ := os.ReadFile(learned); !strings.Contains(string(b), "203.0.113.10") {
				t.Errorf("run %d: learned file lacks the flow: %q", i, b)
			}
			if _, err := os.Stat(log + ".head"); err != nil {
				t.Errorf("run %d: no head file: %v", i, err)
			}
		}
	})
}
