//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const ipPolicy = `version: 1
allow:
  - cidr: 203.0.113.10/32
    ports: [8080]
  - cidr: 2001:db8::10/128
    ports: [8080]
  - cidr: 203.0.113.10/32
    ports: [5353]
    proto: udp
`

var curlTime = regexp.MustCompile(`time=([0-9.]+)`)

// curl runs curl as the worker and returns nsgate's result and curl's
// total time.
func curl(t *testing.T, m mode, pol, auditLog, url string) (result, float64) {
	t.Helper()
	r := runNsgate(t, m, "run", "--policy", pol, "--audit", auditLog, "--",
		"curl", "-sS", "-g", "--max-time", "5", "-w", "\ntime=%{time_total}\n", url)
	var secs float64 = -1
	if mm := curlTime.FindStringSubmatch(r.stdout); mm != nil {
		secs, _ = strconv.ParseFloat(mm[1], 64)
	}
	return r, secs
}

// TestRunExitCounters: the exit record carries the run's totals, and they
// match what the worker did: two allowed connections, one refused, one
// refused name; the human lines on stderr name the denials even with
// --audit; audit show and audit stats read the log back.
func TestRunExitCounters(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		log := filepath.Join(dir, "counters.jsonl")
		p := nsgateBin + " __probe "
		script := p + "tcp 203.0.113.10:8080; " + p + "tcp 203.0.113.10:8080; " + p + "tcp 169.254.169.254:80; " +
			p + "dns 10.0.2.3:53 unapproved.test A udp; exit 0"
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--exec-allow", nsgateBin, "--", "/bin/sh", "-c", script)
		if r.code != 0 {
			t.Fatalf("exit %d", r.code)
		}
		for _, w := range []string{"deny tcp", "169.254.169.254:80", "unapproved.test"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("stderr has no human line with %q (--audit given, no --quiet): %q", w, r.stderr)
			}
		}
		recs := readAudit(t, log)
		last := recs[len(recs)-1]
		c, _ := last["counters"].(map[string]any)
		if last.str("event") != "exit" || c == nil {
			t.Fatalf("last record %v: want an exit record with counters", last)
		}
		n := func(k string) float64 { v, _ := c[k].(float64); return v }
		for k, want := range map[string]float64{"tcp_allowed": 2, "tcp_denied": 1, "dns_denied": 1, "udp_allowed": 0} {
			if n(k) != want {
				t.Errorf("counters %s = %v, want %v (counters %v)", k, n(k), want, c)
			}
		}
		if n("bytes_in") == 0 || n("bytes_out") == 0 || n("dns_queries") < 1 || n("packets_in") == 0 {
			t.Errorf("counters %v: want bytes both ways, the DNS query and packets counted", c)
		}

		// The same log, read by people: audit show and audit stats.
		show := runNsgate(t, m, "audit", "show", "--action", "deny", log)
		lines := strings.Split(strings.TrimSpace(show.stdout), "\n")
		if show.code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "deny tcp") || !strings.Contains(lines[0], "169.254.169.254:80 rule=builtin:metadata") ||
			!strings.Contains(lines[1], "deny dns unapproved.test A rule=default") {
			t.Errorf("audit show --action deny: exit %d\n%s", show.code, show.stdout)
		}
		stats := runNsgate(t, m, "audit", "stats", log)
		for _, w := range []string{"in 1 run(s)", "tcp 203.0.113.10:8080", "tcp 169.254.169.254:80", "builtin:metadata", "unapproved.test"} {
			if stats.code != 0 || !strings.Contains(stats.stdout, w) {
				t.Errorf("audit stats lacks %q (exit %d):\n%s", w, stats.code, stats.stdout)
			}
		}
	})
}

func TestRunAllowsApprovedIP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		for _, tc := range []struct{ url, want, target string }{
			{"http://203.0.113.10:8080/", "hello from app", "203.0.113.10:8080/tcp"},
			{"http://[2001:db8::10]:8080/", "hello from app v6", "[2001:db8::10]:8080/tcp"},
		} {
			log := filepath.Join(dir, "audit-"+strconv.Itoa(len(tc.url))+".jsonl")
			before := targetAt(tc.target).count()
			r, _ := curl(t, m, pol, log, tc.url)
			if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
				t.Fatalf("%s: exit %d, stdout %q; want the page %q", tc.url, r.code, r.stdout, tc.want)
			}
			if got := targetAt(tc.target).count() - before; got != 1 {
				t.Errorf("%s: server saw %d connections, want 1", tc.url, got)
			}
			recs := readAudit(t, log)
			var allowed, ended bool
			for _, rec := range recs {
				if rec.str("event") == "flow" && rec.str("action") == "allow" && strings.HasPrefix(rec.str("rule"), "allow[") {
					allowed = true
				}
				if rec.str("event") == "flow_end" {
					ended = true
				}
			}
			if !allowed || !ended {
				t.Errorf("%s: audit log lacks an allow flow (%v) or its flow_end (%v): %v", tc.url, allowed, ended, recs)
			}
			if recs[0].str("event") != "start" || recs[len(recs)-1].str("event") != "exit" {
				t.Errorf("audit log should start with start and end with exit: %v", recs)
			}
		}
	})
}

func TestRunMaxFlows(t *testing.T) {
	// --max-flows bounds the TCP flows a worker holds at once: with 2, a
	// third concurrent connection is reset, never dialed, and audited.
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		log := filepath.Join(dir, "audit.jsonl")
		target := targetAt("203.0.113.10:8080/tcp")
		before := target.count()
		r := runNsgate(t, m, "run", "--max-flows", "2", "--policy", pol, "--audit", log, "--",
			nsgateBin, "__probe", "hold", "203.0.113.10:8080", "3")
		if r.code != 1 || !strings.Contains(r.stdout, "connected 2") || !strings.Contains(r.stdout, "refused 3") {
			t.Fatalf("exit %d stdout %q; want 2 connected and the third refused", r.code, r.stdout)
		}
		if got := target.count() - before; got != 2 {
			t.Errorf("the target saw %d connections, want 2 (the third must not be dialed)", got)
		}
		var limited bool
		for _, rec := range readAudit(t, log) {
			if rec.str("event") == "flow" && rec.str("action") == "deny" && strings.Contains(rec.str("reason"), "limit: 2 concurrent tcp flows") {
				limited = true
			}
		}
		if !limited {
			t.Errorf("no deny record names the flow limit: %v", readAudit(t, log))
		}
	})
}

func TestRunRefusesBypasses(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		guarded := []string{"169.254.169.254:80/tcp", "203.0.113.10:9090/tcp", "127.0.0.1:8080/tcp", "[::1]:8080/tcp", "198.51.100.20:8080/tcp"}
		before := map[string]int64{}
		for _, g := range guarded {
			before[g] = targetAt(g).count()
		}
		for i, tc := range []struct {
			why, url, dst, rule string
		}{
			{"metadata address", "http://169.254.169.254/latest/meta-data/", "169.254.169.254:80", "builtin:metadata"},
			{"port not in the policy", "http://203.0.113.10:9090/", "203.0.113.10:9090", "default"},
			{"IPv4-mapped metadata", "http://[::ffff:169.254.169.254]/", "169.254.169.254:80", "builtin:metadata"},
			{"decimal metadata", "http://2852039166/", "169.254.169.254:80", "builtin:metadata"},
			{"hex metadata", "http://0xA9FEA9FE/", "169.254.169.254:80", "builtin:metadata"},
			{"the gateway (host loopback path)", "http://10.0.2.2:8080/", "10.0.2.2:8080", "builtin:special-range"},
			{"the DNS address on another port", "http://10.0.2.3:8080/", "10.0.2.3:8080", "builtin:special-range"},
			{"the IPv6 gateway", "http://[fd00::2]:8080/", "[fd00::2]:8080", "builtin:special-range"},
			{"unapproved public address", "http://198.51.100.20:8080/", "198.51.100.20:8080", "default"},
		} {
			t.Run(tc.why, func(t *testing.T) {
				log := filepath.Join(dir, fmt.Sprintf("audit-%d.jsonl", i))
				r, secs := curl(t, m, pol, log, tc.url)
				if r.code != 7 {
					t.Errorf("curl exit %d, want 7 (connection refused)", r.code)
				}
				if secs < 0 || secs >= 1.0 {
					t.Errorf("refusal took %.3fs, want under a second", secs)
				}
				rec, ok := findFlow(readAudit(t, log), "deny", tc.dst)
				if !ok {
					t.Fatalf("no deny flow record for %s", tc.dst)
				}
				if rec.str("rule") != tc.rule {
					t.Errorf("deny rule %q, want %q (reason %q)", rec.str("rule"), tc.rule, rec.str("reason"))
				}
			})
		}
		// The worker's own loopback is its own: host loopback services stay
		// unreachable.
		for _, url := range []string{"http://127.0.0.1:8080/", "http://[::1]:8080/", "http://0.0.0.0:8080/"} {
			r, _ := curl(t, m, pol, filepath.Join(dir, "lo.jsonl"), url)
			if r.code == 0 {
				t.Errorf("%s reached something: %q", url, r.stdout)
			}
		}
		for _, g := range guarded {
			if got := targetAt(g).count() - before[g]; got != 0 {
				t.Errorf("fake target %s saw %d connections, want 0", g, got)
			}
		}
	})
}

func TestRunUDP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		log := filepath.Join(dir, "udp.jsonl")
		ok := targetAt("203.0.113.10:5353/udp")
		denied := targetAt("198.51.100.20:9999/udp")
		okBefore, deniedBefore := ok.count(), denied.count()
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "udp", "203.0.113.10:5353")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "ok ") {
			t.Errorf("allowed UDP: exit %d %q", r.code, r.stdout)
		}
		if ok.count() == okBefore {
			t.Errorf("allowed UDP never reached its server")
		}
		r = runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "udp", "198.51.100.20:9999")
		if r.code == 0 || !strings.Contains(r.stdout, "refused") {
			t.Errorf("denied UDP: exit %d %q, want refused (ICMP administratively prohibited)", r.code, r.stdout)
		}
		if denied.count() != deniedBefore {
			t.Errorf("denied UDP reached its server")
		}
		if _, ok := findFlow(readAudit(t, log), "deny", "198.51.100.20:9999"); !ok {
			t.Errorf("no deny record for the UDP flow")
		}
	})
}

func TestRunExitStatus(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		if r := runNsgate(t, m, "run", "--", "sh", "-c", "exit 7"); r.code != 7 {
			t.Errorf("worker exit 7: nsgate exited %d", r.code)
		}
		if r := runNsgate(t, m, "run", "--", "sh", "-c", "kill -TERM $$"); r.code != 128+15 {
			t.Errorf("worker killed by SIGTERM: nsgate exited %d, want 143", r.code)
		}
		bad := writeFile(t, dir, "bad.yaml", "version: 1\nallow:\n  - cidr: 10.0.0.1/33\n    ports: [80]\n")
		r := runNsgate(t, m, "run", "--policy", bad, "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, bad+":3:") {
			t.Errorf("bad policy: run exit %d stderr %q; want 125 and %s:3:COL", r.code, r.stderr, bad)
		}
		r = runNsgate(t, m, "check", bad)
		if r.code != 2 || !regexp.MustCompile(regexp.QuoteMeta(bad)+`:3:\d+: `).MatchString(r.stderr) {
			t.Errorf("bad policy: check exit %d stderr %q; want 2 and FILE:LINE:COL", r.code, r.stderr)
		}
		if r := runNsgate(t, m, "run", "--bogus", "--", "true"); r.code != 125 {
			t.Errorf("bad flag: exit %d, want 125", r.code)
		}
		if r := runNsgate(t, m, "run", "--max-flows=0", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--max-flows 0 out of range") {
			t.Errorf("bad --max-flows: exit %d stderr %q, want 125 naming the flag", r.code, r.stderr)
		}
		if r := runNsgate(t, m, "run", "--", "/nonexistent/program"); r.code != 125 || !strings.Contains(r.stderr, "/nonexistent/program") {
			t.Errorf("missing command: exit %d stderr %q, want 125 naming it", r.code, r.stderr)
		}
	})
}

// TestRunKilledLeavesNothing: after SIGKILL of nsgate, no worker process
// remains.
func TestRunKilledLeavesNothing(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		before := tmpEntries(t)
		marker := fmt.Sprintf("%d.%03d", 900+time.Now().Nanosecond()%99, time.Now().Nanosecond()%1000)
		cmd := nsgateCmd(m, "run", "--exec-allow", "/usr/bin/sleep", "--", "sh", "-c", "sleep "+marker+" & sleep "+marker)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(procsWith(marker)) < 2 {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("worker never started; stderr %s", errb.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		deadline = time.Now().Add(5 * time.Second)
		for {
			left := procsWith(marker)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				for _, p := range left {
					syscall.Kill(p, syscall.SIGKILL)
				}
				t.Fatalf("worker processes %v outlived nsgate", left)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// nsgate keeps its set-up files (the worker's resolv.conf) in a
		// tmpfs that is never attached to the host: nothing is left in
		// /tmp after a kill -9.
		for name := range tmpEntries(t) {
			if !before[name] && strings.HasPrefix(name, "nsgate-") {
				t.Errorf("/tmp/%s appeared during the run and outlived nsgate", name)
			}
		}
	})
}

// tmpEntries lists /tmp.
func tmpEntries(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/tmp")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]bool, len(ents))
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// procsWith lists the pids whose command line contains s.
func procsWith(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) >= 2 && args[0] == "sleep" && args[1] == s {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestInheritedDescriptorsDoNotLeak: a descriptor nsgate's caller left
// open (here a pipe at fd 3; in the attack, a socket in the host's network
// namespace) is not usable by the worker.
func TestInheritedDescriptorsDoNotLeak(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		rd, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		cmd := nsgateCmd(m, "run", "--", "sh", "-c", "echo leaked >&3")
		cmd.ExtraFiles = []*os.File{wr}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wr.Close()
		cmd.Wait()
		got, _ := io.ReadAll(rd)
		if len(got) != 0 {
			t.Fatalf("the worker wrote %q through an inherited descriptor", got)
		}
		if !strings.Contains(errb.String(), "Bad file descriptor") {
			t.Errorf("the worker's shell should report a bad descriptor; stderr %q", errb.String())
		}
	})
}

// TestStartGate: with a private XDG_RUNTIME_DIR, a start takes one of
// the user's start slots ($XDG_RUNTIME_DIR/nsgate/start-slot-N, an
// exclusive flock) while it builds the sandbox, waits while all are
// held, and gives its slot back once the worker runs, not at exit.
func TestStartGate(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		rt := hostDir(t, m)
		if err := os.Chmod(rt, 0o700); err != nil {
			t.Fatal(err)
		}
		slotDir := filepath.Join(rt, "nsgate")
		if err := os.Mkdir(slotDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if m.uid >= 0 {
			os.Chown(slotDir, m.uid, m.gid)
		}
		slot := filepath.Join(slotDir, "start-slot-0")
		lock := func(how int) (*os.File, error) {
			f, err := os.OpenFile(slot, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				return nil, err
			}
			if m.uid >= 0 {
				f.Chown(m.uid, m.gid)
			}
			if err := syscall.Flock(int(f.Fd()), how); err != nil {
				f.Close()
				return nil, err
			}
			return f, nil
		}
		held, err := lock(syscall.LOCK_EX)
		if err != nil {
			t.Fatal(err)
		}
		marker := fmt.Sprintf("%d.%03d", 800+time.Now().Nanosecond()%99, time.Now().Nanosecond()%1000)
		cmd := nsgateCmd(m, "run", "--exec-allow", "/usr/bin/sleep", "--", "sh", "-c", "echo started; exec sleep "+marker)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+rt, "NSGATE_START_SLOTS=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}()
		// While the only slot is held, the worker does not start.
		time.Sleep(1500 * time.Millisecond)
		if n := len(procsWith(marker)); n != 0 {
			t.Errorf("the worker started while the only start slot was held (%d processes); stderr %s", n, errb.String())
		}
		held.Close()
		deadline := time.Now().Add(20 * time.Second)
		for len(procsWith(marker)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the worker did not start once the slot was free; stderr %s", errb.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The worker runs: the slot is free again, though nsgate runs on.
		var f *os.File
		for range 100 {
			if f, err = lock(syscall.LOCK_EX | syscall.LOCK_NB); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if f == nil {
			t.Fatalf("the start slot is still held while the worker runs: %v", err)
		}
		f.Close()
		if len(procsWith(marker)) == 0 || !strings.Contains(out.String(), "started") {
			t.Errorf("the worker is not running any more: stdout %q stderr %s", out.String(), errb.String())
		}
	})
}
