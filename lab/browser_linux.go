package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/lab/attack"
)

// browserDevToolsPort is Chromium's DevTools port inside the worker.
const browserDevToolsPort = 9222

// browserRun is the outcome of the browser phase of Run.
type browserRun struct {
	obs      []attack.Observation
	command  []string
	started  time.Time
	exitCode int
	stderr   string
	// reported is the audit head `nsgate run` printed at exit.
	reported string
	// err says why the phase could not run (or not to its end).
	err error
}

// runBrowser runs the browser attempts (attack.BrowserAttempts):
// headless Chromium as the worker of a second `nsgate run` under the lab
// policy, appending to the same audit log, driven over CDP through a
// published port by the scripted agent (attack.DriveBrowser). It reports
// progress on cfg.Stderr.
//
// The lab runs as uid 0 (root, or root of its sealed user namespace) and
// `nsgate run` maps it to uid 0 in the worker, where Chromium refuses its
// own sandbox: so Chromium gets --no-sandbox (and nsgate needs no
// --allow-userns). docs/chromium.md, "Running as root", says what that
// costs; in the lab, the point is that nsgate's layers hold without
// Chromium's. Chromium's own checks on requests from public pages to
// local addresses are switched off too, so that what stops the page's
// requests is the gateway and not the browser.
func runBrowser(ctx context.Context, cfg Config, polFile, auditPath, work string, env []string) *browserRun {
	br := &browserRun{started: time.Now()}
	chromium := cfg.Browser
	if st, err := os.Stat(chromium); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		br.err = fmt.Errorf("--browser %s: not an executable file", chromium)
		return br
	}
	hostPort, err := cdpPort()
	if err != nil {
		br.err = fmt.Errorf("pick a port for CDP: %w", err)
		return br
	}
	// The worker's $HOME is a private tmpfs at this path, and the
	// profile lives in it: nothing of the browser's stays behind.
	home := filepath.Join(work, "browser-home")
	profile := filepath.Join(home, "profile")
	if err := os.MkdirAll(home, 0o700); err != nil {
		br.err = err
		return br
	}

	args := []string{"run", "--policy", polFile, "--audit", auditPath, "--audit-key", labKeyFile(work), "--ro", work,
		"--publish", "127.0.0.1:" + strconv.Itoa(hostPort) + ":" + strconv.Itoa(browserDevToolsPort),
		"--allow-unix", "--exec-allow", chromium}
	if crash := filepath.Join(filepath.Dir(chromium), "chrome_crashpad_handler"); fileExists(crash) {
		args = append(args, "--exec-allow", crash)
	}
	asRoot := os.Getuid() == 0
	if !asRoot {
		args = append(args, "--allow-userns")
	}
	switch cfg.Break {
	case BreakMetadata:
		args = append(args, "--unsafe-break", "metadata")
	case BreakExecGuard:
		args = append(args, "--exec-guard=best-effort", "--unsafe-break", guard.LayerLandlock+","+guard.LayerSeccomp)
	}
	args = append(args, "--", cfg.Self, "__browserworker", "--chromium", chromium,
		"--port", strconv.Itoa(browserDevToolsPort), "--",
		"--headless", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights",
		"--user-data-dir="+profile)
	if asRoot {
		args = append(args, "--no-sandbox")
	}
	args = append(args, "about:blank")
	br.command = append([]string{cfg.Self}, args...)

	// Chromium's crash database and caches go to the lab's work
	// directory; the host's session bus and agents stay out of reach.
	var cenv []string
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK":
			continue
		}
		cenv = append(cenv, kv)
	}
	cenv = append(cenv, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))

	gctx, gcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer gcancel()
	cmd := exec.CommandContext(gctx, cfg.Self, args...)
	cmd.Env = cenv
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out := &tail{max: 32 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	fmt.Fprintf(cfg.Stderr, "nsgate lab: %d browser attempts with %s under nsgate run\n", len(attack.BrowserAttempts()), chromium)
	if err := cmd.Start(); err != nil {
		br.err = fmt.Errorf("start nsgate run: %w", err)
		return br
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	finish := func() {
		var werr error
		select {
		case werr = <-exited:
		case <-time.After(20 * time.Second):
			gcancel()
			werr = <-exited
			if br.err == nil {
				br.err = errors.New("nsgate run did not exit after the browser was closed; stopped it")
			}
		}
		br.exitCode = attack.ExitCode(werr)
		br.stderr = out.String()
		if m := regexp.MustCompile(`nsgate: audit head ([0-9a-f]{64})`).FindAllStringSubmatch(br.stderr, -1); m != nil {
			br.reported = m[len(m)-1][1]
		}
	}

	base := "http://127.0.0.1:" + strconv.Itoa(hostPort)
	if err := waitDevTools(gctx, base, exited); err != nil {
		br.err = err
		gcancel()
		finish()
		return br
	}
	obs, err := attack.DriveBrowser(gctx, base, cfg.Evidence, func(i, n int, at attack.Attempt, o attack.Observation) {
		mark := "ok"
		if o.Observed != at.Expect {
			mark = "UNEXPECTED"
		}
		fmt.Fprintf(cfg.Stderr, "[%3d/%d] %-26s %-8s %-10s %s\n", i+1, n, audit.TermText(o.ID), o.Observed, mark, shorten(audit.TermText(o.Detail), 90))
	})
	br.obs = obs
	if err != nil {
		br.err = err
		gcancel()
		finish()
		return br
	}
	// Close the browser over CDP: Chromium exits, the worker with it, and
	// nsgate run ends with its audit head.
	if err := attack.CloseBrowser(gctx, base); err != nil {
		fmt.Fprintf(cfg.Stderr, "nsgate lab: close Chromium over CDP: %v; sending nsgate run SIGTERM\n", err)
		cmd.Process.Signal(syscall.SIGTERM)
	}
	finish()
	return br
}

// waitDevTools waits until Chromium's DevTools answer through the
// published port, or nsgate run exits, or 30 seconds pass.
func waitDevTools(ctx context.Context, base string, exited chan error) error {
	cl := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/json/version", nil)
		resp, err := cl.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case err := <-exited:
			// Put it back: finish reads the exit status too.
			exited <- err
			return fmt.Errorf("nsgate run exited before Chromium's DevTools answered: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("Chromium's DevTools did not answer on %s in 30 s: %v", base, last)
}

// cdpPort returns a TCP port free on 127.0.0.1 (of the sealed namespace,
// where nothing else picks ports).
func cdpPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
