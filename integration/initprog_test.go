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
		t.Run("not for the caller", func(t *testing.T) {
			if m.uid < 0 {
				return // root may execute any file with an x bit
			}
			// An nsgate-init the caller may not execute (root's, mode
			// 0700): the start fails naming that file, not the kernel's
			// user namespaces, which it used to blame for the EACCES.
			bin := install("private", shipped)
			if err := os.Chmod(filepath.Join(filepath.Dir(bin), "nsgate-init"), 0o700); err != nil {
				t.Fatal(err)
			}
			r := runBounded(t, nsgateCmdAt(m, bin, "run", "--quiet", "--", "/bin/sh", "-c", "echo worker ran"),
				60*time.Second, "nsgate run with an nsgate-init the caller may not execute", nil)
			if r.code != 125 || strings.Contains(r.stdout, "worker ran") || !strings.Contains(r.stderr, "nsgate-init") || strings.Contains(r.stderr, "user namespaces") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 125, no worker, and the reason (nsgate-init not executable), not user namespaces", r.code, r.stdout, r.stderr)
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

// TestWorkerCannotPlantInit: the program nsgate starts as the sandbox's
// init runs outside the sandbox (in namespaces of its own, but before the
// view and the guard exist, with the caller's rights on the host's
// files). A worker that may write where nsgate looks for it (nsgate's
// directory, or ../libexec/nsgate from it, through --rw or --home) could
// put a program there that the caller's next `nsgate run` executes as
// init: the attack review planted a shell script as nsgate-init beside a
// stamped nsgate that had none, and the next run ran it on the host. (It
// could as well replace nsgate itself.) nsgate refuses such a run before
// the worker exists, and names the path.
func TestWorkerCannotPlantInit(t *testing.T) {
	needSealed(t)
	forEachMode(t, func(t *testing.T, m mode) {
		cases := []struct {
			name string
			// writable is the flag and path that give the worker the
			// place, relative to the installation's root.
			flag, writable string
		}{
			{"rw beside", "--rw", "bin"},
			{"rw libexec", "--rw", "libexec"},
			{"rw above", "--rw", "."},
			{"home", "--home", "bin"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				root := workDir(t, m)
				for _, d := range []string{"bin", "libexec", "marks"} {
					mkdirOwned(t, m, filepath.Join(root, d))
				}
				bin := filepath.Join(root, "bin", "nsgate")
				copyFile(t, nsgateBin, bin) // alone: nsgate re-executes itself, and looks for nsgate-init
				mark := filepath.Join(root, "marks", "planted-init-ran")
				target := filepath.Join(root, "bin", "nsgate-init")
				if c.writable == "libexec" {
					mkdirOwned(t, m, filepath.Join(root, "libexec", "nsgate"))
					target = filepath.Join(root, "libexec", "nsgate", "nsgate-init")
				}
				at := target // the worker's name for it
				if c.flag == "--home" {
					at = `"$HOME"/nsgate-init` // --home binds the directory at $HOME
				}
				script := fmt.Sprintf(`printf '#!/bin/sh\necho ran > %s\nexit 1\n' > %s && chmod +x %s && echo planted`, mark, at, at)
				r := runBounded(t, nsgateCmdAt(m, bin, "run", "--quiet", c.flag, filepath.Join(root, c.writable),
					"--exec-allow", "/usr/bin/chmod", "--exec-allow", "/bin/chmod", "--", "/bin/sh", "-c", script),
					60*time.Second, "nsgate run whose worker may write where nsgate looks for its init", nil)
				t.Logf("first run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
				if strings.Contains(r.stdout, "planted") {
					t.Errorf("the worker wrote %s, a program nsgate would start outside the sandbox", target)
				}
				if r.code != 125 || !strings.Contains(r.stderr, "writable") {
					t.Errorf("exit %d, stderr %q; want 125 and the reason (nsgate's programs in a writable path)", r.code, r.stderr)
				}
				r2 := runBounded(t, nsgateCmdAt(m, bin, "run", "--quiet", "--", "/bin/true"), 60*time.Second, "the next nsgate run", nil)
				if _, err := os.Stat(mark); err == nil {
					t.Errorf("the next nsgate run (exit %d, stderr %q) executed the program the worker planted as its init, on the host", r2.code, r2.stderr)
				}
			})
		}
	})
}

// mkdirOwned makes dir, owned by the user mode m runs nsgate as.
func mkdirOwned(t *testing.T, m mode, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if m.uid >= 0 {
		if err := os.Chown(dir, m.uid, m.gid); err != nil {
			t.Fatal(err)
		}
	}
}
