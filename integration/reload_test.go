//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// TestReloadOnSIGHUP: a bad policy sent by SIGHUP is refused and the old
// one kept; a good one takes effect for new flows; both are audited; its
// changed exec.allow, fixed at start, is said and recorded.
func TestReloadOnSIGHUP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", "version: 1\nallow:\n  - cidr: 203.0.113.10/32\n    ports: [9999]\n")
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--exec-allow", "/usr/bin/seq", "--exec-allow", "/usr/bin/sleep", "--", "sh", "-c",
			"for i in $(seq 100); do curl -s --max-time 1 http://203.0.113.10:8080/ && exit 0; sleep 0.1; done; exit 1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitFor := func(what string, ok func([]record) bool) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if b, err := os.ReadFile(log); err == nil && len(b) > 0 && bytes.HasSuffix(b, []byte("\n")) {
					if ok(readAudit(t, log)) {
						return
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			cmd.Process.Kill()
			t.Fatalf("timed out waiting for %s; stderr %s", what, errb.String())
		}
		hasEvent := func(event, action string) func([]record) bool {
			return func(recs []record) bool {
				for _, r := range recs {
					if r.str("event") == event && r.str("action") == action {
						return true
					}
				}
				return false
			}
		}
		waitFor("a denied flow", func(recs []record) bool { _, ok := findFlow(recs, "deny", "203.0.113.10:8080"); return ok })

		os.WriteFile(pol, []byte("version: 1\nallow:\n  - cidr: 203.0.113.10/32\n    ports: [8080]\n    bogus: true\n"), 0o644)
		cmd.Process.Signal(syscall.SIGHUP)
		waitFor("the refused reload", hasEvent("policy", "deny"))

		// The good file also widens exec.allow, which cannot change under
		// a running worker: said and recorded, not silently dropped.
		os.WriteFile(pol, []byte("version: 1\nallow:\n  - cidr: 203.0.113.10/32\n    ports: [8080]\nexec:\n  allow: [/usr/bin/env]\n"), 0o644)
		cmd.Process.Signal(syscall.SIGHUP)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("worker never got through after the reload: %v; stderr %s", err, errb.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatal("worker still running after the reload")
		}
		if !strings.Contains(errb.String(), "reload refused") {
			t.Errorf("no reload-refused line on stderr: %q", errb.String())
		}
		recs := readAudit(t, log)
		if !hasEvent("policy", "allow")(recs) {
			t.Errorf("no accepted-reload record")
		}
		if !hasEvent("policy", "degraded")(recs) || !strings.Contains(errb.String(), "exec.allow changed") {
			t.Errorf("the changed exec.allow was not said and recorded; stderr %q", errb.String())
		}
		if _, ok := findFlow(recs, "allow", "203.0.113.10:8080"); !ok {
			t.Errorf("no allowed flow after the reload")
		}
	})
}

// TestPcap: --pcap writes a capture that tcpdump reads, holding the
// worker's connection.
func TestPcap(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	forEachMode(t, func(t *testing.T, m mode) {
		need(t, "tcpdump (apt-get install tcpdump)", err)
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		pcap := filepath.Join(dir, "worker.pcap")
		r := runNsgate(t, m, "run", "--policy", pol, "--pcap", pcap, "--", "curl", "-s", "http://203.0.113.10:8080/")
		if r.code != 0 {
			t.Fatalf("curl through nsgate: exit %d", r.code)
		}
		out, err := exec.Command(tcpdump, "-n", "-r", pcap).CombinedOutput()
		if err != nil {
			t.Fatalf("tcpdump cannot read the capture: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "10.0.2.100") || !strings.Contains(string(out), "203.0.113.10.8080") {
			t.Errorf("capture lacks the worker's flow:\n%s", out)
		}
	})
}

// TestPublish: --publish lets a host-side client reach a server the worker
// runs, and the connection is audited as inbound.
func TestPublish(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		log := filepath.Join(dir, "audit.jsonl")
		cmd := nsgateCmd(m, "run", "--audit", log, "--publish", "127.0.0.1:19222:9222", "--", nsgateBin, "__probe", "serve", "0.0.0.0:9222", "20")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		var body string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			b, err := exec.Command("curl", "-s", "--max-time", "2", "http://127.0.0.1:19222/").Output()
			if err == nil && len(b) > 0 {
				body = string(b)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(body, "hello from the worker") {
			t.Fatalf("host client never reached the worker's server; got %q; stdout %q stderr %q", body, out.String(), errb.String())
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		var inbound, forward bool
		var sent uint64
		for _, r := range readAudit(t, log) {
			switch {
			case r.str("event") == "inbound" && r.str("action") == "allow" && r.str("dst") == "10.0.2.100:9222":
				inbound = true
			case r.str("event") == "forward" && r.str("action") == "add" && r.str("listen") == "127.0.0.1:19222/tcp":
				forward = true
			case r.str("event") == "inbound_end" && r.str("dst") == "10.0.2.100:9222":
				sent += r.num("bytes_out")
			}
		}
		if !inbound || !forward {
			t.Errorf("inbound allow record: %v, forward add record: %v; want both", inbound, forward)
		}
		// The page the worker served went out through the forward.
		if sent < uint64(len(body)) {
			t.Errorf("inbound_end records count %d bytes from the worker; it sent a page of %d", sent, len(body))
		}
	})
}

// keepPort is where TestReloadCutsOpenFlows's echo server listens.
const keepPort = 8086

// TestReloadCutsOpenFlows: a reload whose policy no longer allows an open
// flow cuts it: the worker's connection is reset, the server sees it end
// and nothing after, the flow_end record says it was revoked, the policy
// record and stderr count it.
func TestReloadCutsOpenFlows(t *testing.T) {
	needSealed(t)
	addr := net.JoinHostPort(internet.AppV4, strconv.Itoa(keepPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted, pings, ended atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						ended.Add(1)
						return
					}
					pings.Add(1)
					c.Write([]byte(line))
				}
			}()
		}
	}()
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", "version: 1\nallow:\n  - cidr: "+internet.AppV4+"/32\n    ports: ["+strconv.Itoa(keepPort)+"]\n")
		log := filepath.Join(dir, "audit.jsonl")
		acc0, ended0, pings0 := accepted.Load(), ended.Load(), pings.Load()
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "keep", addr, "30")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(15 * time.Second)
		for pings.Load()-pings0 < 3 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if accepted.Load()-acc0 != 1 {
			cmd.Process.Kill()
			t.Fatalf("the server accepted %d connections, want 1; stdout %q stderr %q", accepted.Load()-acc0, out.String(), errb.String())
		}
		// The operator narrows the policy: the server's port is no
		// longer allowed.
		os.WriteFile(pol, []byte("version: 1\nallow:\n  - cidr: "+internet.AppV4+"/32\n    ports: [9999]\n"), 0o644)
		cmd.Process.Signal(syscall.SIGHUP)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the worker's connection was not reset: %v; stdout %q stderr %q", err, out.String(), errb.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("the worker's connection outlived the reload; stdout %q stderr %q", out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "cut after") {
			t.Errorf("worker output %q, want the cut", out.String())
		}
		// The server saw the connection end, and no new one.
		deadline = time.Now().Add(5 * time.Second)
		for ended.Load() == ended0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if ended.Load() == ended0 {
			t.Errorf("the server never saw the revoked connection end")
		}
		if n := accepted.Load() - acc0; n != 1 {
			t.Errorf("the server accepted %d connections, want 1", n)
		}
		if !strings.Contains(errb.String(), "1 open flows it refuses were cut") {
			t.Errorf("stderr does not say the flow was cut: %q", errb.String())
		}
		recs := readAudit(t, log)
		f, ok := findFlow(recs, "allow", addr)
		if !ok {
			t.Fatalf("no allowed flow to %s in the log", addr)
		}
		var revokedEnd, policyCount bool
		for _, r := range recs {
			switch {
			case r.str("event") == "flow_end" && r.num("flow") == f.num("seq"):
				revokedEnd = strings.HasPrefix(r.str("error"), "revoked: ") && strings.Contains(r.str("error"), "rule=default")
				if !revokedEnd {
					t.Errorf("flow_end of the revoked flow: error %q", r.str("error"))
				}
			case r.str("event") == "policy" && r.str("action") == "allow":
				policyCount = r.num("revoked") == 1
			}
		}
		if !revokedEnd || !policyCount {
			t.Errorf("revoked flow_end record: %v, policy record with revoked=1: %v", revokedEnd, policyCount)
		}
	})
}
