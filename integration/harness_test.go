//go:build integration

// Package integration holds nsgate's end-to-end tests. Every test runs in
// a sealed network namespace that TestMain creates by re-executing the
// test binary: it holds only lo, with the fake internet's addresses on it,
// so no packet can leave the machine.
package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/sealed"
)

var (
	nsgateBin string             // the binary under test, built by TestMain
	sealErr   error              // why the sealed namespace could not be made, if so
	inet      *internet.Internet // the fake internet on lo of the sealed namespace
)

func TestMain(m *testing.M) {
	if _, ok := sealed.Current(); !ok {
		os.Exit(enterSealed(m))
	}
	nsgateBin = os.Getenv("NSGATE_BIN")
	if err := sealed.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: refusing to run: %v\n", err)
		os.Exit(3)
	}
	dir, err := os.MkdirTemp("", "nsgate-inet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	layout := internet.DefaultLayout()
	layout.Pages = sitePages // the multi-host site of learn_test.go
	inet, sealErr = internet.Setup(layout, dir)
	code := m.Run()
	if inet != nil {
		inet.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// enterSealed builds nsgate and re-runs the test binary in a sealed
// network namespace (sealed.Enter: without root, also a user namespace
// that maps us to root).
func enterSealed(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nsgate-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "nsgate")
	// As make build does: nsgate and nsgate-init from one build, with one
	// build stamp (the sandbox's init is nsgate-init, as installed).
	stamp := fmt.Sprintf("it-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, pkg := range []string{"nsgate", "nsgate-init"} {
		if err := buildStamped(filepath.Join(dir, pkg), "./cmd/"+pkg, stamp); err != nil {
			fmt.Fprintf(os.Stderr, "integration: build %s: %v\n", pkg, err)
			return 1
		}
	}
	code, err := sealed.Enter(os.Args, append(os.Environ(), "NSGATE_BIN="+bin), sealed.Stdio{})
	if err != nil {
		// No namespaces here: run the tests unsealed so each one skips (or,
		// under NSGATE_REQUIRE_ALL=1, fails) with this reason.
		sealErr = fmt.Errorf("cannot create a sealed network namespace: %w", err)
		return m.Run()
	}
	return code
}

// buildStamped builds the command pkg (./cmd/...) into out with the
// sandbox's build stamp set to stamp.
func buildStamped(out, pkg, stamp string) error {
	build := exec.Command("go", "build", "-ldflags", "-X github.com/nsgate/nsgate/sandbox.buildStamp="+stamp, "-o", out, pkg)
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// The fake internet's addresses (internet.DefaultLayout).
const (
	appV4      = internet.AppV4
	appV6      = internet.AppV6
	otherV4    = internet.OtherV4
	metadataV4 = internet.MetadataV4
)

// target counts what one fake server received.
type target struct{ key string }

// targetAt returns the counter of the fake server at key ("ip:port/tcp").
func targetAt(key string) target { return target{key} }

func (t target) count() int64 { return inet.HitsAt(t.key) }

// settled is the target's count once it has not changed for 300 ms (at
// most 3 s): a connection the server has yet to accept lands first.
func (t target) settled() int64 {
	n, same := t.count(), 0
	for deadline := time.Now().Add(3 * time.Second); same < 6 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if m := t.count(); m != n {
			n, same = m, 0
			continue
		}
		same++
	}
	return n
}

// requireAll reports whether skips must fail (CI).
func requireAll() bool { return os.Getenv("NSGATE_REQUIRE_ALL") == "1" }

// need skips the test (or fails it under NSGATE_REQUIRE_ALL=1) when err
// says a prerequisite is missing.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if requireAll() {
		t.Fatalf("%s is required (NSGATE_REQUIRE_ALL=1): %v", what, err)
	}
	t.Skipf("needs %s: %v", what, err)
}

// realRoot fails (or skips) the test unless we are root of the initial
// user namespace.
func realRoot(t *testing.T, why string) {
	t.Helper()
	var err error
	if info, _ := sealed.Current(); os.Geteuid() != 0 || info.Userns {
		err = errors.New("not real root")
	}
	need(t, "root ("+why+")", err)
}

func needSealed(t *testing.T) {
	t.Helper()
	need(t, "a sealed network namespace", sealErr)
}

// mode is how nsgate is run: as root, or as an unprivileged user.
type mode struct {
	name     string
	uid, gid int // -1: as we are
}

// testUserName is the unprivileged account CI creates (.ci/run).
func testUserName() string {
	if u := os.Getenv("NSGATE_TEST_USER"); u != "" {
		return u
	}
	return "nsgate-test"
}

// modes returns the ways to run nsgate here. Both run when we are real
// root and the test user exists; a developer without root gets one mode
// (their own uid, mapped to root of the sealed user namespace).
func modes() []string {
	if info, _ := sealed.Current(); info.Userns {
		return []string{"self"}
	}
	return []string{"root", "user"}
}

// forEachMode runs f as a subtest once per mode.
func forEachMode(t *testing.T, f func(t *testing.T, m mode)) {
	needSealed(t)
	for _, name := range modes() {
		t.Run(name, func(t *testing.T) {
			m := mode{name: name, uid: -1, gid: -1}
			if name == "user" {
				u, err := user.Lookup(testUserName())
				need(t, "the unprivileged test user "+testUserName()+" (.ci/run creates it)", err)
				m.uid, _ = strconv.Atoi(u.Uid)
				m.gid, _ = strconv.Atoi(u.Gid)
				need(t, "a world-usable /dev/net/tun (chmod 0666)", tunUsable())
			}
			f(t, m)
		})
	}
}

func tunUsable() error {
	st, err := os.Stat("/dev/net/tun")
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o006 != 0o006 {
		return fmt.Errorf("/dev/net/tun has mode %v", st.Mode().Perm())
	}
	return nil
}

// workDir makes a directory the test's mode can write, removed at the end.
func workDir(t *testing.T, m mode) string {
	t.Helper()
	d, err := os.MkdirTemp("", "nsgate-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if m.uid >= 0 {
		if err := os.Chown(d, m.uid, m.gid); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(d, 0o755)
	return d
}

// writeFile writes content into dir/name, readable by the mode's user.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// nsgateCmd builds an exec.Cmd running nsgate with args in mode m.
func nsgateCmd(m mode, args ...string) *exec.Cmd { return nsgateCmdAt(m, nsgateBin, args...) }

// nsgateCmdAt is nsgateCmd for the nsgate binary at bin.
func nsgateCmdAt(m mode, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	if m.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
	}
	cmd.Env = append(os.Environ(), "HOME=/tmp")
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// runBounded runs cmd to completion, killing it (and failing the test)
// after timeout. what names the command in failures; clean, if not nil,
// trims stderr for the failure message.
func runBounded(t *testing.T, cmd *exec.Cmd, timeout time.Duration, what string, clean func(string) string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		if clean == nil {
			clean = func(s string) string { return s }
		}
		t.Fatalf("%s hung; stderr:\n%s", what, clean(errb.String()))
	}
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("%s: %v", what, err)
	}
	return r
}

// runNsgate runs nsgate to completion (bounded by a generous timeout).
func runNsgate(t *testing.T, m mode, args ...string) result {
	t.Helper()
	r := runBounded(t, nsgateCmd(m, args...), 60*time.Second, "nsgate "+strings.Join(args, " "), nil)
	t.Logf("nsgate %s -> %d (%s)\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// record is one audit record.
type record map[string]any

func (r record) str(k string) string { s, _ := r[k].(string); return s }

func (r record) seq() uint64 { return r.num("seq") }

// num is a numeric field (0 when missing).
func (r record) num(k string) uint64 { f, _ := r[k].(float64); return uint64(f) }

// readAudit parses a JSON-lines audit log.
func readAudit(t *testing.T, path string) []record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var recs []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %d: %v", len(recs)+1, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// findFlow returns the first flow record with this action whose dst is dst.
func findFlow(recs []record, action, dst string) (record, bool) {
	for _, r := range recs {
		if r.str("event") == "flow" && r.str("action") == action && r.str("dst") == dst {
			return r, true
		}
	}
	return nil, false
}
