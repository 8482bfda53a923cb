//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
)

var headLine = regexp.MustCompile(`nsgate: audit head ([0-9a-f]{64})`)

// TestAuditVerifyCatchesTampering: the log of a real run verifies; one
// changed byte in any record, a deleted record or two swapped records make
// `nsgate audit verify` exit 1 and name the line.
func TestAuditVerifyCatchesTampering(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		log := filepath.Join(dir, "audit.jsonl")
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--", "sh", "-c",
			"curl -s http://203.0.113.10:8080/ ; curl -s http://169.254.169.254/ ; curl -s http://198.51.100.20:8080/ ; true")
		mm := headLine.FindStringSubmatch(r.stderr)
		if mm == nil {
			t.Fatalf("no audit head line on stderr: %q", r.stderr)
		}
		head := mm[1]
		v := runNsgate(t, m, "audit", "verify", log)
		if v.code != 0 || !strings.Contains(v.stdout, "head "+head) {
			t.Fatalf("verify of an intact log: exit %d %q; want ok with head %s", v.code, v.stdout, head)
		}
		orig, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.SplitAfter(bytes.TrimSuffix(orig, []byte("\n")), []byte("\n"))
		if len(lines) < 5 {
			t.Fatalf("only %d records", len(lines))
		}
		check := func(why string, data []byte, wantLine int, extra ...string) {
			t.Helper()
			bad := filepath.Join(dir, "tampered.jsonl")
			if err := os.WriteFile(bad, data, 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"audit", "verify"}, extra...)
			v := runNsgate(t, m, append(args, bad)...)
			want := fmt.Sprintf("%s:%d:", bad, wantLine)
			if v.code != 1 || !strings.Contains(v.stderr, want) {
				t.Errorf("%s: verify exit %d stderr %q; want 1 and %q", why, v.code, v.stderr, want)
			}
		}
		for i := range lines {
			// Change one byte inside the record (a digit of its seq keeps
			// the JSON valid, so only the chain can tell).
			mod := bytes.Clone(orig)
			off := bytes.Index(mod, lines[i]) + len(`{"seq":`)
			mod[off] ^= 0x01
			if i == len(lines)-1 {
				// The last record has no successor: the head printed at
				// exit is its anchor.
				check(fmt.Sprintf("byte changed in last line %d", i+1), mod, i+1, "--head", head)
			} else {
				check(fmt.Sprintf("byte changed in line %d", i+1), mod, i+1)
			}
			del := joinWithout(lines, i)
			if i == len(lines)-1 {
				check("last line deleted", del, i, "--head", head)
			} else {
				check(fmt.Sprintf("line %d deleted", i+1), del, i+1)
			}
			if i+1 < len(lines) {
				sw := swapped(lines, i)
				check(fmt.Sprintf("lines %d and %d swapped", i+1, i+2), sw, i+1)
			}
		}
	})
}

func joinWithout(lines [][]byte, skip int) []byte {
	var b bytes.Buffer
	for i, l := range lines {
		if i != skip {
			b.Write(bytes.TrimSuffix(l, []byte("\n")))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func swapped(lines [][]byte, i int) []byte {
	cp := make([][]byte, len(lines))
	copy(cp, lines)
	cp[i], cp[i+1] = cp[i+1], cp[i]
	return joinWithout(cp, -1)
}

// TestUDPFloodIsAggregated: five seconds of denied UDP leave a small audit
// log and bounded gateway memory.
func TestUDPFloodIsAggregated(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", ipPolicy)
		log := filepath.Join(dir, "flood.jsonl")
		target := targetAt("198.51.100.20:9999/udp")
		before := target.count()
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "udp-flood", "198.51.100.20:9999", "5")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var hwm, rss int64
		status := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status"
	poll:
		for {
			select {
			case <-done:
				break poll
			case <-time.After(100 * time.Millisecond):
				if b, err := os.ReadFile(status); err == nil {
					hwm = max(hwm, kib(b, "VmHWM:"))
					rss = kib(b, "VmRSS:")
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatal("flood run hung")
			}
		}
		recs := readAudit(t, log)
		var folded int64
		for _, r := range recs {
			if c, ok := r["count"].(float64); ok {
				folded += int64(c)
			}
		}
		st, _ := os.Stat(log)
		t.Logf("flood: %s; audit %d records (%d bytes) covering %d folded denials; nsgate VmHWM %d KiB, last VmRSS %d KiB",
			strings.TrimSpace(out.String()), len(recs), st.Size(), folded, hwm, rss)
		if !strings.Contains(out.String(), "sent=") {
			t.Fatalf("flood did not run: %q %q", out.String(), errb.String())
		}
		if len(recs) > 200 {
			t.Errorf("audit log has %d records for one flooded destination; want aggregation", len(recs))
		}
		if hwm > 200*1024 {
			t.Errorf("nsgate peak RSS %d KiB during the flood; want bounded (< 200 MiB)", hwm)
		}
		if target.count() != before {
			t.Errorf("denied UDP reached the target")
		}
	})
}

// kib reads a "Key:   N kB" line from /proc/PID/status.
func kib(status []byte, key string) int64 {
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, key) {
			f := strings.Fields(l)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// floodPolicy approves app.test by a static answer, so its A queries are
// answered (and audited as allowed) without any upstream.
const floodPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
`

// TestAuditAllowedDNSFloodIsBounded: a worker repeating an allowed query
// as fast as it is answered cannot grow the audit log with it: identical
// allowed answers fold from their first repeat, one record and one count
// per window (docs/audit.md states the bound this measures).
func TestAuditAllowedDNSFloodIsBounded(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", floodPolicy)
		log := filepath.Join(dir, "dns-flood.jsonl")
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "dns-flood", "10.0.2.3:53", "app.test", "3")
		var sent, answered int
		fmt.Sscanf(strings.TrimSpace(r.stdout), "dns-flood app.test sent=%d answered=%d", &sent, &answered)
		recs := readAudit(t, log)
		var dnsRecs, folded int
		for _, rec := range recs {
			if rec.str("event") == "dns" {
				dnsRecs++
				if c, ok := rec["count"].(float64); ok {
					folded += int(c)
				}
			}
		}
		st, _ := os.Stat(log)
		t.Logf("%d queries answered in 3 s; audit: %d records (%d bytes), %d of them dns, folding %d answers", answered, len(recs), st.Size(), dnsRecs, folded)
		if answered < 1000 {
			t.Fatalf("the flood got only %d answers (%q): it did not run", answered, r.stdout)
		}
		// One distinct answer: per one-second window its first record and
		// one aggregate, whatever the worker's rate (3 s of flood span at
		// most 5 windows: the first may start late, the last ends at exit).
		if dnsRecs > 2*5 {
			t.Errorf("%d dns records for %d identical allowed answers; want at most 2 per window (10)", dnsRecs, answered)
		}
		if folded+dnsRecs < answered {
			t.Errorf("the records and their counts account for %d answers of %d", folded+dnsRecs, answered)
		}
	})
}

// TestAuditStuckFIFOEndsOnSIGTERM: an audit sink that nobody reads (a FIFO
// whose reader holds it open and never reads) fills up; nsgate still ends
// within a bound on SIGTERM, and says the log failed rather than exiting
// as if all were recorded. A FIFO with no reader at all is refused at
// once: opened read-write, nsgate was its own reader and a short run's
// records vanished with an exit status of 0.
func TestAuditStuckFIFOEndsOnSIGTERM(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		fifo := filepath.Join(dir, "audit.fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if m.uid >= 0 {
			os.Chown(fifo, m.uid, m.gid)
		}
		var noReader bytes.Buffer
		c := nsgateCmd(m, "run", "--audit", fifo, "--", nsgateBin, "__probe", "dns-flood", "10.0.2.3:53", "n%d.evil.test", "1")
		c.Stderr = &noReader
		err := c.Run()
		var xe *exec.ExitError
		if !errors.As(err, &xe) || xe.ExitCode() != 125 || !strings.Contains(noReader.String(), "nothing reads it") {
			t.Errorf("a FIFO log without a reader: exit %v stderr %q; want 125 and \"nothing reads it\"", err, noReader.String())
		}
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close() // held open, never read
		// Denied names, each new: a record apiece, far more than a pipe
		// holds.
		cmd := nsgateCmd(m, "run", "--audit", fifo, "--", nsgateBin, "__probe", "dns-flood", "10.0.2.3:53", "n%d.evil.test", "60")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		time.Sleep(2 * time.Second)
		sent := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("nsgate did not end within 15 s of SIGTERM with a stuck audit sink; stderr %q", errb.String())
		}
		t.Logf("ended %s after SIGTERM: %v; stderr %q", time.Since(sent).Round(time.Millisecond), err, errb.String())
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(errb.String(), "audit log failed") {
			t.Errorf("exit %v stderr %q; want 125 and the line naming the audit failure", err, errb.String())
		}
	})
}

// TestAuditStarvedSinkKeepsTheRun: a process that gets no CPU for longer
// than the audit timeout, while its writer waits on a FIFO whose reader
// then drains it, is starved, not stuck (issue 26: one start in 1,000 was
// stopped that way). nsgate is stopped (SIGSTOP: off the CPU, as under a
// burst of starts) for twice the timeout with its audit write blocked on
// a full FIFO; once it runs again the reader drains, and the run ends as
// the worker did, its log whole. A wall-clock verdict (the write's
// deadline) failed this run. The other side, a FIFO that never drains,
// is TestAuditStuckFIFOEndsOnSIGTERM.
func TestAuditStarvedSinkKeepsTheRun(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		fifo := filepath.Join(dir, "audit.fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if m.uid >= 0 {
			os.Chown(fifo, m.uid, m.gid)
		}
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// Denied names, each new: far more records than a pipe holds.
		cmd := nsgateCmd(m, "run", "--audit", fifo, "--", nsgateBin, "__probe", "dns-flood", "10.0.2.3:53", "n%d.evil.test", "3")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// The pipe fills within milliseconds; the writer then waits on
		// it. A second of that counts towards the 3 s timeout.
		time.Sleep(time.Second)
		cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(6 * time.Second) // twice the timeout, off the CPU
		cmd.Process.Signal(syscall.SIGCONT)
		var got bytes.Buffer
		drained := make(chan error, 1)
		go func() {
			_, err := io.Copy(&got, r) // until nsgate closes its end
			drained <- err
		}()
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("nsgate did not end; stderr %q", errb.String())
		}
		<-drained
		if strings.Contains(errb.String(), "audit log failed") {
			t.Errorf("a starved process whose FIFO was drained failed its log: %v, stderr %q", err, errb.String())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 125 {
			t.Errorf("exit 125 (the audit failure status); stderr %q", errb.String())
		}
		copyPath := filepath.Join(t.TempDir(), "got.jsonl")
		if err := os.WriteFile(copyPath, got.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		s, cerr := audit.Check(copyPath, nil, "")
		if cerr != nil || !s.Closed || s.Records < 100 {
			t.Errorf("the drained log: %d records, closed %v, %v; want it whole, closed, and more than a pipe held", s.Records, s.Closed, cerr)
		}
		t.Logf("exit %v; %d records drained", err, s.Records)
	})
}

// TestAuditHumanLinesToAClosedPipe: the human denial lines on standard
// error are a view for people; a reader of that stream that goes away
// (`nsgate run ... 2>&1 | head`, a log collector restarting) must not end
// the run. It did: the write to the broken pipe killed nsgate with SIGPIPE
// (exit 141), so the log had no exit record and its head file anchored
// only the records before the run. The run goes on, the log is closed
// and anchored, and nsgate exits with the worker's status.
func TestAuditHumanLinesToAClosedPipe(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		log := filepath.Join(dir, "pipe.jsonl")
		cmd := nsgateCmd(m, "run", "--audit", log, "--", nsgateBin, "__probe", "dns-flood", "10.0.2.3:53", "n%d.evil.test", "2")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		// Read the first denial line, then go away.
		buf := make([]byte, 1)
		if _, err := r.Read(buf); err != nil {
			t.Fatalf("no human line: %v", err)
		}
		r.Close()
		err = cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Errorf("nsgate was killed by %v when its stderr reader went away", ws.Signal())
			}
		}
		s, cerr := audit.Check(log, nil, "")
		if cerr != nil || !s.Closed || s.Anchor != s.Head {
			t.Errorf("log: %d records, closed %v, anchor %q head %q, %v; want it closed and anchored at its end", s.Records, s.Closed, s.Anchor, s.Head, cerr)
		}
		t.Logf("exit %v; %d records", err, s.Records)
	})
}
