//go:build integration

package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Headless Chromium as the worker (docs/chromium.md). These tests need
// Debian's chromium package; without it they skip (fail under
// NSGATE_REQUIRE_ALL=1).

const (
	chromiumBin      = "/usr/lib/chromium/chromium"
	chromiumCrashpad = "/usr/lib/chromium/chrome_crashpad_handler"
)

// chromiumPolicy approves app.test (the fake app server) by a static DNS
// entry and a host rule, and nothing else.
const chromiumPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
`

// chromiumRelax are nsgate's relaxations of the exec guard that Chromium
// needs; docs/chromium.md says why each is there.
type chromiumRelax struct {
	userns   bool // --allow-userns: Chromium's own namespace sandbox
	unix     bool // --allow-unix: the ProcessSingleton socket
	crashpad bool // --exec-allow the crashpad handler
}

// chromiumNeeds is what docs/chromium.md documents.
var chromiumNeeds = chromiumRelax{userns: true, unix: true, crashpad: true}

func needChromium(t *testing.T) {
	t.Helper()
	_, err := os.Stat(chromiumBin)
	need(t, "headless Chromium at "+chromiumBin+" (Debian package chromium)", err)
}

// chromiumRun is one `nsgate run ... -- chromium --dump-dom URL`.
type chromiumRun struct {
	result
	audit []record
}

// chromiumFlags are further flags: Run of nsgate run (--learn OUT),
// Browser of Chromium (--enable-quic).
type chromiumFlags struct{ Run, Browser []string }

// runChromium runs Chromium under nsgate in mode m to dump the DOM of url,
// with every file it writes (profile, crashpad database, audit log) in
// dir. As uid 0 (root, or root of a sealed user namespace) Chromium
// refuses to start its own sandbox, so it gets --no-sandbox there and
// nsgate does not need --allow-userns (docs/chromium.md, "Running as
// root").
func runChromium(t *testing.T, m mode, dir, name, url string, relax chromiumRelax, extra ...chromiumFlags) chromiumRun {
	t.Helper()
	pol := filepath.Join(dir, "policy.yaml")
	if _, err := os.Stat(pol); err != nil {
		writeFile(t, dir, "policy.yaml", chromiumPolicy)
	}
	log := filepath.Join(dir, name+".jsonl")
	var more chromiumFlags
	for _, e := range extra {
		more.Run = append(more.Run, e.Run...)
		more.Browser = append(more.Browser, e.Browser...)
	}
	args := append([]string{"run", "--policy", pol, "--audit", log}, more.Run...)
	asRoot := m.uid < 0
	if relax.userns && !asRoot {
		args = append(args, "--allow-userns")
	}
	if relax.unix {
		args = append(args, "--allow-unix")
	}
	if relax.crashpad {
		args = append(args, "--exec-allow", chromiumCrashpad)
	}
	args = append(args, "--", chromiumBin,
		"--headless", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile-"+name))
	if asRoot {
		args = append(args, "--no-sandbox")
	}
	args = append(args, more.Browser...)
	args = append(args, "--dump-dom", url)

	var r chromiumRun
	for try := 1; ; try++ {
		cmd := nsgateCmd(m, args...)
		// Keep Chromium's crashpad database and caches in the test's
		// directory ($HOME/.config/chromium), not in a /tmp shared by both
		// modes.
		cmd.Env = append(cmd.Env, "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"), "XDG_CACHE_HOME="+filepath.Join(dir, ".cache"))
		r = chromiumRun{result: runBounded(t, cmd, 90*time.Second, "nsgate with Chromium on "+url, chromiumLog)}
		t.Logf("chromium %s (%+v) -> exit %d in %s\nstdout: %s\nstderr (D-Bus noise dropped):\n%s",
			url, relax, r.code, r.elapsed.Round(time.Millisecond), r.stdout, chromiumLog(r.stderr))
		// Chromium 156 now and then kills itself at exit over its own file
		// descriptor bookkeeping (SIGTRAP, "Crashing due to FD ownership
		// violation"), which has nothing to do with nsgate: run it once
		// more, and say so.
		if try == 1 && r.code == 128+5 && strings.Contains(r.stderr, "FD ownership violation") {
			t.Logf("Chromium crashed on its own (FD ownership violation); running it again")
			continue
		}
		break
	}
	r.audit = readAudit(t, log)
	return r
}

// chromiumLog drops Chromium's complaints about the missing D-Bus, which
// are expected in the sandbox and drown everything else.
func chromiumLog(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "dbus") || l == "" {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// appFlows returns the allow flow records for app.test.
func appFlows(recs []record) []record {
	var out []record
	for _, r := range recs {
		if r.str("event") == "flow" && r.str("action") == "allow" && r.str("host") == "app.test" {
			out = append(out, r)
		}
	}
	return out
}

func TestChromiumLoadsAllowedPage(t *testing.T) {
	needChromium(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		app := targetAt("203.0.113.10:8080/tcp")
		before := app.count()
		r := runChromium(t, m, dir, "allowed", "http://app.test:8080/", chromiumNeeds)
		if r.code != 0 || !strings.Contains(r.stdout, "hello from app") {
			t.Fatalf("exit %d, stdout %q: want the page of app.test (hello from app)", r.code, r.stdout)
		}
		if app.count() == before {
			t.Errorf("the app server saw no connection, yet the page came through")
		}
		flows := appFlows(r.audit)
		if len(flows) == 0 {
			t.Fatalf("audit log has no allow flow for app.test: %v", r.audit)
		}
		for _, f := range flows {
			if f.str("rule") != "allow[0]" || f.str("upstream") != "203.0.113.10:8080" {
				t.Errorf("allow flow %v: want rule allow[0] and upstream 203.0.113.10:8080", f)
			}
		}
		var ended bool
		for _, rec := range r.audit {
			if rec.str("event") == "flow_end" && uint64(floatField(rec, "flow")) == flows[0].seq() {
				ended = true
			}
		}
		if !ended {
			t.Errorf("no flow_end for flow %d", flows[0].seq())
		}
		// The allowlist is complete: nothing Chromium executes is refused,
		// and all it executes is its own (the zygote and utilities via
		// /proc/self/exe, the crashpad handler).
		for _, rec := range r.audit {
			if rec.str("event") != "exec" {
				continue
			}
			p := rec.str("path")
			if rec.str("action") != "allow" {
				t.Errorf("exec refused: %v", rec)
			}
			if !strings.HasPrefix(p, "/usr/lib/chromium/") && p != "/proc/self/exe" {
				t.Errorf("Chromium executed %s, outside its own directory", p)
			}
		}
		// Chromium looks up a few of Google's update names at start even
		// with --disable-background-networking and
		// --disable-component-update; they must be refused by nsgate's DNS
		// (nothing is sent upstream for a denied name).
		for _, rec := range r.audit {
			if rec.str("event") == "dns" && rec.str("action") == "allow" && rec.str("qname") != "app.test" {
				t.Errorf("DNS allowed a name the policy does not cover: %v", rec)
			}
		}
	})
}

func floatField(r record, k string) float64 { f, _ := r[k].(float64); return f }

func TestChromiumDeniedDestinations(t *testing.T) {
	needChromium(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		guarded := []string{"169.254.169.254:80/tcp", "198.51.100.20:8080/tcp"}
		before := map[string]int64{}
		for _, g := range guarded {
			before[g] = targetAt(g).count()
		}
		for _, tc := range []struct {
			name, url, why string
			denied         func(recs []record) (record, bool)
			wantRule       string
		}{
			{
				name: "metadata", url: "http://169.254.169.254/",
				why: "the cloud metadata address is never reachable, whatever the policy says",
				denied: func(recs []record) (record, bool) {
					return findFlow(recs, "deny", "169.254.169.254:80")
				},
				wantRule: "builtin:metadata",
			},
			{
				name: "unapproved-name", url: "http://unapproved.test:8080/",
				why: "a name no rule covers gets NXDOMAIN from nsgate's DNS, so no flow is even tried",
				denied: func(recs []record) (record, bool) {
					for _, r := range recs {
						if r.str("event") == "dns" && r.str("action") == "deny" && r.str("qname") == "unapproved.test" {
							return r, true
						}
					}
					return nil, false
				},
				wantRule: "default",
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := runChromium(t, m, dir, tc.name, tc.url, chromiumNeeds)
				if strings.Contains(r.stdout, "fake metadata") || strings.Contains(r.stdout, "unapproved server") {
					t.Errorf("%s: Chromium got the page (%s): %q", tc.url, tc.why, r.stdout)
				}
				if strings.Contains(r.stdout, "<body") {
					t.Errorf("%s: Chromium printed a DOM; a refused load prints none: %q", tc.url, r.stdout)
				}
				rec, ok := tc.denied(r.audit)
				if !ok {
					t.Fatalf("%s: no deny record (%s); audit: %v", tc.url, tc.why, r.audit)
				}
				if rec.str("rule") != tc.wantRule {
					t.Errorf("%s: deny rule %q, want %q (%v)", tc.url, rec.str("rule"), tc.wantRule, rec)
				}
				if flows := appFlows(r.audit); len(flows) != 0 {
					t.Errorf("%s: unexpected flows to app.test: %v", tc.url, flows)
				}
			})
		}
		for _, g := range guarded {
			if got := targetAt(g).count() - before[g]; got != 0 {
				t.Errorf("fake server %s saw %d connections from Chromium, want 0", g, got)
			}
		}
	})
}

// TestChromiumNeedsItsRelaxations checks the claims of docs/chromium.md
// that each relaxation is needed: without it Chromium does not load the
// page. When one of these fails, a newer Chromium no longer needs that
// relaxation: drop it from docs/chromium.md and chromiumNeeds.
func TestChromiumNeedsItsRelaxations(t *testing.T) {
	needChromium(t)
	forEachMode(t, func(t *testing.T, m mode) {
		cases := []struct {
			name, why string
			relax     chromiumRelax
			rootToo   bool // also holds when Chromium runs with --no-sandbox
		}{
			{
				name: "no-allow-unix", rootToo: true,
				why:   "ProcessSingleton's socket(AF_UNIX) gets EPERM and Chromium aborts",
				relax: chromiumRelax{userns: true, crashpad: true},
			},
			{
				name:  "no-allow-userns",
				why:   "Chromium finds no usable sandbox (no user namespaces, no setuid helper) and exits",
				relax: chromiumRelax{unix: true, crashpad: true},
			},
		}
		for _, tc := range cases {
			if m.uid < 0 && !tc.rootToo {
				continue // as uid 0 Chromium runs --no-sandbox, needing no namespaces
			}
			t.Run(tc.name, func(t *testing.T) {
				dir := workDir(t, m)
				r := runChromium(t, m, dir, tc.name, "http://app.test:8080/", tc.relax)
				if r.code == 0 && strings.Contains(r.stdout, "hello from app") {
					t.Fatalf("Chromium loaded the page without %s; docs/chromium.md says it cannot (%s): update the doc", tc.name, tc.why)
				}
				if len(appFlows(r.audit)) != 0 {
					t.Errorf("Chromium reached app.test although it should have stopped before loading: %s", tc.why)
				}
			})
		}
	})
}

// TestChromiumDocumentedFlags keeps docs/chromium.md and this file in
// step: the doc must name every flag the tests pass.
func TestChromiumDocumentedFlags(t *testing.T) {
	doc, err := os.ReadFile("../docs/chromium.md")
	if err != nil {
		t.Fatalf("docs/chromium.md: %v", err)
	}
	for _, f := range []string{
		"--allow-userns", "--allow-unix", "--exec-allow " + chromiumCrashpad, chromiumBin,
		"--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--user-data-dir", "--no-sandbox",
	} {
		if !bytes.Contains(doc, []byte(f)) {
			t.Errorf("docs/chromium.md does not mention %s", f)
		}
	}
}
