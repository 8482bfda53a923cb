//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInitProgram: the sandbox's init is nsgate-init, the small program
// installed beside nsgate from the same build (it links none of the
// gateway, so a start costs less); with nsgate alone, nsgate re-executes
// itself as init, as before. An nsgate-init from another build is refused
// before the worker runs (its spec could carry what that init does not
// enforce), and an init that exits without a word fails the start with a
// reason instead of leaving nsgate waiting for it.
func TestInitProgram(t *testing.T) {
	needSealed(t)
	shipped := filepath.Join(filepath.Dir(nsgateBin), "nsgate-init")
	otherDir := t.TempDir()
	other := filepath.Join(otherDir, "nsgate-init")
	if err := buildStamped(other, "./cmd/nsgate-init", fmt.Sprintf("other-%d", time.Now().UnixNano())); err != nil {
		t.Fatalf("build an nsgate-init of another build: %v", err)
	}
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		// install puts nsgate, and init (when not "") as nsgate-init, in
		// a directory of their own, and returns nsgate's path.
		install := func(name, init string) string {
			d := filepath.Join(dir, name)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			copyFile(t, nsgateBin, filepath.Join(d, "nsgate"))
			if init != "" {
				copyFile(t, init, filepath.Join(d, "nsgate-init"))
			}
			return filepath.Join(d, "nsgate")
		}
		// initComm runs a held worker with the nsgate at bin and returns
		// the name the kernel gives its init (the file it executed).
		initComm := func(bin string) string {
			cmd := nsgateCmdAt(m, bin, "run", "--quiet", "--", "/bin/sh", "-c", "echo ready; read -r line")
			h := startHeld(t, cmd)
			kid, err := onlyChild(cmd.Process.Pid)
			var comm []byte
			if err == nil {
				comm, err = os.ReadFile("/proc/" + kid + "/comm")
			}
			if werr := h.release(); werr != nil {
				t.Errorf("the worker's nsgate run: %v; stderr: %s", werr, h.stderr.String())
			}
			if err != nil {
				t.Fatalf("init's name from the host: %v", err)
			}
			return strings.TrimSpace(string(comm))
		}

		t.Run("beside", func(t *testing.T) {
			if got := initComm(install("beside", shipped)); got != "nsgate-init" {
				t.Errorf("init executed %q; want nsgate-init, installed beside nsgate from its build", got)
			}
		})
		t.Run("alone", func(t *testing.T) {
			if got := initComm(install("alone", "")); got != "nsgate" {
				t.Errorf("init executed %q; want nsgate itself (no nsgate-init beside it)", got)
			}
		})
		t.Run("other build", func(t *testing.T) {
			bin := install("other", other)
			r := runBounded(t, nsgateCmdAt(m, bin, "run", "--quiet", "--", "/bin/sh", "-c", "echo worker ran"),
				60*time.Second, "nsgate run with an nsgate-init of another build", nil)
			if r.code != 125 || strings.Contains(r.stdout, "worker ran") || !strings.Contains(r.stderr, "from another build") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 125, no worker, and the reason (another build)", r.code, r.stdout, r.stderr)
			}
		})
		t.Run("silent init", func(t *testing.T) {
			bin := install("silent", "/bin/true")
			r := runBounded(t, nsgateCmdAt(m, bin, "run", "--quiet", "--", "/bin/sh", "-c", "echo worker ran"),
				60*time.Second, "nsgate run with an init that exits at once", nil)
			if r.code != 125 || strings.Contains(r.stdout, "worker ran") || !strings.Contains(r.stderr, "exited before") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 125, no worker, and the reason (init exited)", r.code, r.stdout, r.stderr)
			}
		})
	})
}
