//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// stallPort is where TestStalledDownloadsBoundMemory's streaming server
// listens.
const stallPort = 8084

const stallPolicy = `version: 1
allow:
  - cidr: 203.0.113.10/32
    ports: [8084]
`

// TestStalledDownloadsBoundMemory: a worker opens hundreds of connections
// to an allowed server that streams, and never reads from them. What the
// server sends then waits in nsgate, in each flow's buffers; nsgate's
// memory must stay bounded (the buffer budget: 16 flows with large
// buffers, 16 KiB each way for the others; before it, each flow's send
// buffer grew to a MiB or more), and every flow must have its records.
func TestStalledDownloadsBoundMemory(t *testing.T) {
	needSealed(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(internet.AppV4, strconv.Itoa(stallPort)))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted, sent atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				for {
					c.SetWriteDeadline(time.Now().Add(20 * time.Second))
					n, err := c.Write(buf)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	const flows = 400
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", stallPolicy)
		log := filepath.Join(dir, "stall.jsonl")
		acc0, sent0 := accepted.Load(), sent.Load()
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--",
			nsgateBin, "__probe", "stall", net.JoinHostPort(internet.AppV4, strconv.Itoa(stallPort)), strconv.Itoa(flows), "4")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var hwm int64
		status := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status"
		timeout := time.After(60 * time.Second)
	poll:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v\n%s\n%s", err, out.String(), errb.String())
				}
				break poll
			case <-time.After(100 * time.Millisecond):
				if b, err := os.ReadFile(status); err == nil {
					hwm = max(hwm, kib(b, "VmHWM:"))
				}
			case <-timeout:
				cmd.Process.Kill()
				t.Fatal("stalled run hung")
			}
		}
		held := sent.Load() - sent0
		t.Logf("%s; the server accepted %d and sent %d MiB; nsgate VmHWM %d MiB",
			strings.TrimSpace(out.String()), accepted.Load()-acc0, held>>20, hwm>>10)
		if !strings.Contains(out.String(), fmt.Sprintf("stalled=%d failed=0", flows)) {
			t.Fatalf("the worker did not hold %d flows: %q %q", flows, out.String(), errb.String())
		}
		// An idle flow costs about 14 KiB (docs/performance.md); the
		// budget adds 16 MiB plus 32 KiB per flow. 400 flows each
		// holding a MiB or more would pass 400 MiB.
		if hwm > 200*1024 {
			t.Errorf("nsgate's peak RSS was %d MiB with %d stalled downloads; want bounded (< 200 MiB)", hwm>>10, flows)
		}
		recs := readAudit(t, log)
		var allowed, ends uint64
		for _, r := range recs {
			n := max(r.num("count"), 1)
			switch {
			case r.str("event") == "flow" && r.str("action") == "allow":
				allowed += n
			case r.str("event") == "flow_end":
				ends += n
			}
		}
		if allowed != flows || ends != flows {
			t.Errorf("audit: %d allowed flows and %d flow ends for %d flows", allowed, ends, flows)
		}
		if v := runNsgate(t, m, "audit", "verify", log); v.code != 0 {
			t.Errorf("audit verify: %d %s %s", v.code, v.stdout, v.stderr)
		}
	})
}
