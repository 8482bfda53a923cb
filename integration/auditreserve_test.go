//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAuditFullLogRecordsEveryFlow (issue 27 item 5): with the audit log on
// a 48 KiB tmpfs and a worker opening 300 connections to an allowed
// server, the server saw one connection more than the log's allow records
// covered: the flow whose record hit ENOSPC had already been dialled. Now
// the log keeps a reserve; once it cannot be kept no new flow is admitted,
// the worker is stopped, and the flows admitted before, and the exit
// record, are written into the reserve. Upstream connections ≤ allow and
// fail records (counts summed; a fail record is a dial the stop cancelled,
// which the server may have seen), counted once the server's count has
// settled on both sides of the run; the log verifies, nsgate says why it
// stopped.
func TestAuditFullLogRecordsEveryFlow(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		// The file system already holds fill bytes of something else.
		for _, fill := range []int{0, 8 << 10, 20 << 10} {
			t.Run(fmt.Sprintf("fill%dk", fill>>10), func(t *testing.T) { fullLogRun(t, m, fill) })
		}
	})
}

func fullLogRun(t *testing.T, m mode, fill int) {
	dir := workDir(t, m)
	pol := writeFile(t, dir, "policy.yaml", ipPolicy)
	small := mkdirFor(t, m, dir, "small")
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=48k,mode=0777"); err != nil {
		t.Fatalf("mount a 48 KiB tmpfs for the log: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(small, "other"), make([]byte, fill), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(small, "audit.jsonl")
	target := targetAt("203.0.113.10:8080/tcp")
	// Settled counts on both sides: the server may accept the last
	// connection of the run before (its worker stopped as it connected)
	// after this run has begun, which counted it against this run's log.
	before := target.settled()
	r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", "/bin/bash", "-c",
		`ok=0; for ((i=0;i<300;i++)); do if exec 3<>/dev/tcp/203.0.113.10/8080; then ok=$((ok+1)); exec 3>&-; fi; done 2>/dev/null; echo "connected=$ok"`)
	hits := target.settled() - before
	var allowed, flows int64
	var exit record
	for _, rec := range readAudit(t, log) {
		switch rec.str("event") {
		case "flow":
			// A "fail" record covers a connection too: the dial the
			// stop cancelled may have reached the server's backlog
			// before the dialer gave up on it ("dial: context canceled").
			if a := rec.str("action"); (a == "allow" || a == "fail") && rec.str("dst") == "203.0.113.10:8080" {
				c, _ := rec["count"].(float64)
				allowed += max(int64(c), 1)
				flows++
			}
		case "exit":
			exit = rec
		}
	}
	t.Logf("upstream connections %d; allow and fail records %d covering %d flows; worker: %s", hits, flows, allowed, strings.TrimSpace(r.stdout))
	if hits == 0 {
		t.Fatal("no connection reached the server: the test shows nothing")
	}
	if hits > allowed {
		t.Errorf("the server saw %d connections, the log's allow records cover %d: a flow was dialled without its record", hits, allowed)
	}
	if exit == nil {
		t.Fatal("no exit record: the reserve did not hold the closing records")
	}
	if !strings.Contains(exit.str("log_full"), "closing records") {
		t.Errorf("exit record %v: want log_full saying the reserve could not be kept", exit)
	}
	if r.code != 125 || !strings.Contains(r.stderr, "audit log full") {
		t.Errorf("exit %d, stderr %q: want 125 and a line saying the audit log is full", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "connected=300") {
		t.Errorf("the worker made all 300 connections: the log never filled, the test shows nothing")
	}
	v := runNsgate(t, m, "audit", "verify", log)
	if v.code != 0 {
		t.Errorf("audit verify of the full log: exit %d: %s", v.code, v.stderr)
	}
}
