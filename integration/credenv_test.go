//go:build integration

package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// descendants returns the PIDs below pid, read from /proc/PID/task/*/children.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// TestCredentialSourceNotInInit: the variable a credential's secret is read
// from is in no environment below nsgate: not the worker's, and not
// init's either (init's /proc/1/environ is closed to the worker, but the
// secret is not there to find). Read from the host side, root and rootless.
func TestCredentialSourceNotInInit(t *testing.T) {
	up := startCredUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		_, pol, _ := credRun(t, m, up)
		cmd := nsgateCmd(m, "run", "--policy", pol, "--quiet", "--", "/bin/sleep", "30")
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		var pids []int
		var sawSleep bool
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && !sawSleep; time.Sleep(50 * time.Millisecond) {
			pids = descendants(cmd.Process.Pid)
			for _, p := range pids {
				if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); strings.TrimSpace(string(b)) == "sleep" {
					sawSleep = true
				}
			}
		}
		if !sawSleep || len(pids) < 2 {
			t.Fatalf("the worker never started (processes below nsgate: %v)", pids)
		}
		own, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
		if err != nil || !bytes.Contains(own, []byte(credSecret)) {
			t.Fatalf("nsgate's own environment should hold the secret (the test shows nothing otherwise): %v", err)
		}
		for _, p := range pids {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ")
			if err != nil {
				continue // gone, or a process the test cannot read
			}
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm")
			if bytes.Contains(b, []byte(credSecret)) || bytes.Contains(b, []byte("NSGATE_IT_SECRET=")) {
				t.Errorf("process %d (%s) below nsgate has the credential's source variable in its environment", p, strings.TrimSpace(string(comm)))
			}
		}
	})
}
