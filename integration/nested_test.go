//go:build integration

package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// A worker that is itself nsgate (docs/design.md, "A gateway behind a
// gateway"). The outer gateway is nsgate as the network of a "container":
// `nsgate pasta` on a process in user, network and mount namespaces of
// its own, whose /etc/resolv.conf names the gateway's DNS (169.254.1.1),
// as Podman 5 sets a container up. Inside it, an inner `nsgate run` with a
// host rule resolves the allowed name through the outer gateway, gets one
// of its fake addresses, checks with the gateway handshake that its
// resolver is an nsgate, and dials it; the outer gateway decides the name
// again and dials the fake internet's server. (An outer `nsgate run`
// cannot hold an inner one: its worker may not mount or write its own uid
// map, by Landlock and seccomp, which is the point of its exec guard.)

// nestedOuterPolicy approves app.test and *.ok.test, resolved through
// the fake internet's upstream DNS (no static answers), and nothing else.
const nestedOuterPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
  - host: "*.ok.test"
    ports: [8080]
dns:
  upstream: ["127.0.0.53:53"]
`

// nestedInnerPolicy approves app.test and unapproved.test (which the
// outer gateway refuses), not *.ok.test (which it would allow). Its
// resolver is the container's: the outer gateway.
const nestedInnerPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
  - host: unapproved.test
    ports: [8080]
`

func TestNestedGateway(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		outerPol := writeFile(t, dir, "outer.yaml", nestedOuterPolicy)
		innerPol := writeFile(t, dir, "inner.yaml", nestedInnerPolicy)
		resolv := writeFile(t, dir, "resolv.conf", "nameserver 169.254.1.1\n")
		outerDir := filepath.Join(dir, "outer-audit")
		innerLog := filepath.Join(dir, "inner.jsonl")

		// The container: its own user, network and mount namespaces,
		// with the gateway's DNS in its resolv.conf.
		holder := exec.Command("unshare", "--user", "--map-root-user", "--net", "--mount", "sh", "-c",
			`mount --bind "$1" /etc/resolv.conf && exec sleep 120`, "sh", resolv)
		if m.uid >= 0 {
			holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
		}
		var holderErr strings.Builder
		holder.Stderr = &holderErr
		if err := holder.Start(); err != nil {
			t.Fatalf("unshare: %v", err)
		}
		defer func() { holder.Process.Kill(); holder.Wait() }()
		pid := strconv.Itoa(holder.Process.Pid)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if exe, _ := os.Readlink("/proc/" + pid + "/exe"); strings.HasSuffix(exe, "sleep") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the container never started: %s", holderErr.String())
			}
		}

		// The outer gateway: nsgate as the container's pasta.
		pidFile := filepath.Join(dir, "pasta.pid")
		outer := nsgateCmd(m, "pasta", "--config-net", "--quiet", "--pid", pidFile, pid)
		outer.Env = append(outer.Env, "NSGATE_POLICY="+outerPol, "NSGATE_AUDIT_DIR="+outerDir)
		r := runBounded(t, outer, 60*time.Second, "nsgate pasta", nil)
		if r.code != 0 {
			t.Fatalf("nsgate pasta: exit %d %s", r.code, r.stderr)
		}
		defer killPidFile(pidFile)

		app, ok, unapproved := targetAt(appV4+":8080/tcp"), targetAt(internet.OKV4+":8080/tcp"), targetAt(otherV4+":8080/tcp")
		appBefore, okBefore, unapprovedBefore := app.count(), ok.count(), unapproved.count()

		// The inner nsgate, in the container.
		probes := []probe{
			{"approved by both", "app.test:8080", "ok "},
			{"approved by the outer gateway only: the inner one refuses it", "www.ok.test:8080", "refused "},
			{"approved by the inner gateway only: the outer one refuses it", "unapproved.test:8080", "refused "},
		}
		script := probeScript(nsgateBin, probes)
		inner := exec.Command("nsenter", "-t", pid, "-U", "-n", "-m", "--preserve-credentials",
			nsgateBin, "run", "--policy", innerPol, "--audit", innerLog, "--exec-allow", nsgateBin, "--",
			"/bin/sh", "-c", strings.Join(script, "; "))
		inner.Env = append(os.Environ(), "HOME=/tmp")
		if m.uid >= 0 {
			inner.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.gid)}}
		}
		r = runBounded(t, inner, 60*time.Second, "the inner nsgate run", nil)
		t.Logf("inner nsgate run -> %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		checkProbes(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), probes, false)
		if got := app.count() - appBefore; got != 1 {
			t.Errorf("app server saw %d connections, want 1", got)
		}
		if got := ok.count() - okBefore; got != 0 {
			t.Errorf("www.ok.test's server saw %d connections, want 0 (the inner policy refuses it)", got)
		}
		if got := unapproved.count() - unapprovedBefore; got != 0 {
			t.Errorf("unapproved server saw %d connections, want 0 (the outer policy refuses it)", got)
		}

		// The container goes, and with it the outer gateway, which then
		// writes its exit record.
		holder.Process.Kill()
		holder.Wait()
		outerLog := filepath.Join(outerDir, "pid-"+pid+".jsonl")
		var outerRecs []record
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := os.Stat(outerLog); err == nil {
				outerRecs = readAudit(t, outerLog)
				if len(outerRecs) > 0 && outerRecs[len(outerRecs)-1].str("event") == "exit" {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the outer gateway's log %s has no exit record", outerLog)
			}
		}
		innerRecs := readAudit(t, innerLog)

		// The inner log: app.test dialled at one of the outer gateway's
		// fake addresses, www.ok.test refused by name, unapproved.test
		// allowed by name but not resolved (the outer one refused it).
		var fakeUpstream string
		for _, rec := range innerRecs {
			if rec.str("event") == "flow" && rec.str("host") == "app.test" && rec.str("action") == "allow" {
				fakeUpstream = rec.str("upstream")
				if !strings.Contains(rec.str("reason"), "is the upstream nsgate gateway's address for the name") {
					t.Errorf("inner flow record %v does not say the address is the gateway's", rec)
				}
			}
		}
		if ap, err := netip.ParseAddrPort(fakeUpstream); err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(ap.Addr()) || ap.Port() != 8080 {
			t.Fatalf("inner log: app.test allowed to %q, want one of the outer gateway's fake addresses, port 8080", fakeUpstream)
		}
		if !hasDNS(innerRecs, "www.ok.test", "deny") {
			t.Error("inner log: no dns denial of www.ok.test")
		}
		var unapprovedFailed bool
		for _, rec := range innerRecs {
			if rec.str("event") == "flow" && rec.str("host") == "unapproved.test" {
				unapprovedFailed = rec.str("action") != "allow" && strings.Contains(rec.str("reason"), "resolve")
			}
		}
		if !unapprovedFailed {
			t.Error("inner log: unapproved.test's flow should have failed to resolve (the outer gateway refuses the name)")
		}

		// The outer log: the handshake answered, app.test answered with
		// the address the inner one dialled, and that flow decided by
		// name and dialled to the app server; www.ok.test never asked;
		// unapproved.test refused.
		var handshake, flow bool
		for _, rec := range outerRecs {
			switch {
			case rec.str("event") == "dns" && rec.str("rule") == "builtin:gateway" && rec.str("action") == "allow":
				handshake = true
			case rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == "app.test":
				flow = rec.str("dst") == fakeUpstream && rec.str("upstream") == appV4+":8080"
			case strings.Contains(rec.str("qname"), "ok.test"):
				t.Errorf("outer log: %v: the inner gateway must not have asked for www.ok.test", rec)
			}
		}
		if !handshake {
			t.Error("outer log: no answered gateway handshake (rule builtin:gateway)")
		}
		if !flow {
			t.Errorf("outer log: no flow from the inner gateway to %s decided as app.test and dialled to %s:8080", fakeUpstream, appV4)
		}
		if !hasDNS(outerRecs, "unapproved.test", "deny") {
			t.Error("outer log: no dns denial of unapproved.test")
		}
		for _, f := range []string{innerLog, outerLog} {
			if v := runNsgate(t, mode{uid: -1, gid: -1}, "audit", "verify", f); v.code != 0 {
				t.Errorf("audit verify %s: exit %d %s", f, v.code, v.stderr)
			}
		}
	})
}

// TestPlainResolverBenchmarkRange: without an outer nsgate, a resolver
// that answers an allowed name with an address in 198.18.0.0/15 (the
// benchmarking range, where nsgate's fake pool lies) and fails the
// gateway handshake, as any real resolver does, does not open that
// address: the worker is refused, the server there sees nothing, and the
// log says why. The resolver is the fake internet's upstream, which
// answers bench.ok.test with 198.18.0.77, where a server listens (the
// lab's dns-benchmark-answer attempt, here as root and as the user).
func TestPlainResolverBenchmarkRange(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", fmt.Sprintf(`version: 1
allow:
  - host: %s
    ports: [8080]
dns:
  upstream: [%q]
`, internet.BenchName, internet.UpstreamDNS))
		log := filepath.Join(dir, "audit.jsonl")
		bench := targetAt(internet.BenchV4 + ":8080/tcp")
		before := bench.count()
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "tcp", internet.BenchName+":8080")
		if !strings.HasPrefix(r.stdout, "refused ") {
			t.Errorf("the worker: %q, want a refusal", r.stdout)
		}
		if got := bench.count() - before; got != 0 {
			t.Errorf("the server on %s saw %d connections, want 0", internet.BenchV4, got)
		}
		var rec record
		for _, x := range readAudit(t, log) {
			if x.str("event") == "flow" && x.str("host") == internet.BenchName {
				rec = x
			}
		}
		if rec.str("action") != "deny" || rec.str("rule") != "builtin:special-range" ||
			!strings.Contains(rec.str("reason"), "did not answer as an nsgate gateway") {
			t.Errorf("flow record %v, want a special-range denial saying the resolver is no nsgate gateway", rec)
		}
	})
}

// hasDNS reports whether recs hold a dns record for qname with action.
func hasDNS(recs []record, qname, action string) bool {
	for _, rec := range recs {
		if rec.str("event") == "dns" && rec.str("qname") == qname && rec.str("action") == action {
			return true
		}
	}
	return false
}

// killPidFile kills the process whose PID the file holds, if it is still
// there (a helper that outlived its namespace would be a failure the
// test reports elsewhere; this only keeps the machine clean).
func killPidFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
