//go:build integration

package integration

import (
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/policy"
)

// Learn mode (nsgate run --learn, docs/policy.md "Learning a policy") on a
// real workload: Chromium loads a page of app.test that pulls a script
// from js.assets.test and images from three names under cdn.test; the
// learned policy is then enforced, the page still loads, and a host added
// to the page is refused.

const (
	sitePage        = "/learn/page"
	siteTrackerPage = "/learn/page-tracker"
	siteURL         = "http://" + internet.AppName + ":8080" + sitePage
	siteTrackerURL  = "http://" + internet.AppName + ":8080" + siteTrackerPage
	siteScriptMark  = "script from js.assets.test ran"
)

// Fake-server keys of the site's hosts.
var (
	siteCDN     = targetAt(internet.SiteCDNV4 + ":8080/tcp")
	siteAssets  = targetAt(internet.SiteAssetsV4 + ":8080/tcp")
	siteTracker = targetAt(internet.SiteTrackerV4 + ":8080/tcp")
)

// siteImages are the page's images; with tracker, one from tracker.test
// too. Each image says in the DOM whether it loaded.
func siteImages(tracker bool) []string {
	imgs := append([]string(nil), internet.SiteCDNNames...)
	if tracker {
		imgs = append(imgs, internet.SiteTracker)
	}
	return imgs
}

// sitePages serves the site (the fake internet's Layout.Pages): the page
// on app.test, its script and its image on the other hosts.
func sitePages(u *url.URL) (string, bool) {
	if p, ok := benchPages(u); ok { // BenchmarkPlaywrightPageLoad's page
		return p, true
	}
	switch u.Path {
	case sitePage, siteTrackerPage:
		var b strings.Builder
		b.WriteString(`<!doctype html><html><head><title>learn site</title><script>
function mark(s) { var p = document.createElement("p"); p.textContent = s; document.body.appendChild(p); }
</script></head><body><p>hello from the learn site</p><p id="js">script pending</p>`)
		for _, h := range siteImages(u.Path == siteTrackerPage) {
			b.WriteString(`<img src="http://` + h + `:8080/learn/img.svg" onload="mark('` + h + ` loaded')" onerror="mark('` + h + ` failed')">`)
		}
		b.WriteString(`<script src="http://` + internet.SiteAssetsName + `:8080/learn/app.js"></script></body></html>`)
		return b.String(), true
	case "/learn/app.js":
		return `document.getElementById("js").textContent = "` + siteScriptMark + `";`, true
	case "/learn/img.svg":
		return `<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4" fill="#3a7"/></svg>`, true
	}
	return "", false
}

// checkSiteLoaded fails unless the DOM Chromium printed shows the script
// and every image of the page loaded (tracker: all but tracker.test's,
// which must have failed). The marks are paragraphs the page's handlers
// add, not the handlers' source text.
func checkSiteLoaded(t *testing.T, r chromiumRun, tracker bool) {
	t.Helper()
	if r.code != 0 || !strings.Contains(r.stdout, "hello from the learn site") {
		t.Fatalf("exit %d, stdout %q: want the site's page", r.code, r.stdout)
	}
	if !strings.Contains(r.stdout, siteScriptMark) {
		t.Errorf("the script from %s did not run: %q", internet.SiteAssetsName, r.stdout)
	}
	for _, h := range internet.SiteCDNNames {
		if !strings.Contains(r.stdout, "<p>"+h+" loaded</p>") {
			t.Errorf("image from %s did not load: %q", h, r.stdout)
		}
	}
	if tracker {
		if strings.Contains(r.stdout, "<p>"+internet.SiteTracker+" loaded</p>") || !strings.Contains(r.stdout, "<p>"+internet.SiteTracker+" failed</p>") {
			t.Errorf("the unapproved %s: want its image to fail in the page: %q", internet.SiteTracker, r.stdout)
		}
	}
}

func TestLearnChromiumSite(t *testing.T) {
	needChromium(t)
	forEachMode(t, func(t *testing.T, m mode) {
		trackerBefore := siteTracker.count()

		// 1. Learn: a starting policy that only names the upstream DNS.
		ldir := workDir(t, m)
		writeFile(t, ldir, "policy.yaml", "version: 1\ndns:\n  upstream: [\""+internet.UpstreamDNS+"\"]\n")
		learned := filepath.Join(ldir, "learned.yaml")
		cdn, assets := siteCDN.count(), siteAssets.count()
		r := runChromium(t, m, ldir, "learn", siteURL, chromiumNeeds, chromiumFlags{Run: []string{"--learn", learned}})
		checkSiteLoaded(t, r, false)
		if siteCDN.count() == cdn || siteAssets.count() == assets {
			t.Errorf("learning: the cdn (%d new hits) or assets server (%d) saw nothing", siteCDN.count()-cdn, siteAssets.count()-assets)
		}
		if !strings.Contains(r.stderr, "learned policy written to "+learned) {
			t.Errorf("nsgate did not say it wrote the learned policy: %s", chromiumLog(r.stderr))
		}
		data, err := os.ReadFile(learned)
		if err != nil {
			t.Fatalf("learned policy: %v", err)
		}
		t.Logf("learned policy:\n%s", data)
		if c := runNsgate(t, m, "check", learned); c.code != 0 {
			t.Fatalf("nsgate check of the learned policy: exit %d: %s", c.code, c.stderr)
		}
		p, err := policy.Load(learned)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, want := range []string{`{host: "*.cdn.test", proto: tcp, ports: [8080]}`, `{host: "js.assets.test", proto: tcp, ports: [8080]}`, `{host: "app.test", proto: tcp, ports: [8080]}`} {
			if !strings.Contains(text, want) {
				t.Errorf("learned policy lacks %s", want)
			}
		}
		if strings.Contains(text, internet.SiteTracker) {
			t.Errorf("learned policy names %s, which the page did not use", internet.SiteTracker)
		}
		hosts := map[string]bool{}
		for _, rec := range r.audit {
			if rec.str("event") == "flow" && rec.str("rule") == policy.RuleLearn && rec.str("action") == "allow" {
				hosts[rec.str("host")] = true
			}
		}
		if len(hosts) != 5 || len(p.AllowRules()) != 3 {
			t.Errorf("learned %d hosts into %d rules; want the page's 5 hosts (app.test, js.assets.test, three under cdn.test) in 3 rules", len(hosts), len(p.AllowRules()))
		}
		t.Logf("learned: %d hosts %v into %d allow rules (exec.allow %v)", len(hosts), slices.Sorted(maps.Keys(hosts)), len(p.AllowRules()), p.ExecAllow())

		// 2. Enforce the learned policy (no --learn): the page loads whole.
		edir := workDir(t, m)
		writeFile(t, edir, "policy.yaml", text)
		cdn, assets = siteCDN.count(), siteAssets.count()
		r = runChromium(t, m, edir, "enforce", siteURL, chromiumNeeds)
		checkSiteLoaded(t, r, false)
		if got := siteCDN.count() - cdn; got < 1 {
			t.Errorf("enforcing: the cdn server saw %d connections", got)
		}
		if got := siteAssets.count() - assets; got < 1 {
			t.Errorf("enforcing: the assets server saw %d connections", got)
		}
		for _, rec := range r.audit {
			host := rec.str("host") + rec.str("qname")
			if rec.str("action") == "deny" && (strings.HasSuffix(host, ".cdn.test") || host == internet.SiteAssetsName || host == internet.AppName) {
				t.Errorf("enforcing the learned policy refused a host of the page: %v", rec)
			}
		}

		// 3. A host added to the page is refused: the page shows the
		// failure, its server sees nothing, the audit log says why.
		r = runChromium(t, m, edir, "tracker", siteTrackerURL, chromiumNeeds)
		checkSiteLoaded(t, r, true)
		if got := siteTracker.count() - trackerBefore; got != 0 {
			t.Errorf("%s saw %d connections, want 0", internet.SiteTracker, got)
		}
		var denied bool
		for _, rec := range r.audit {
			if rec.str("event") == "dns" && rec.str("action") == "deny" && rec.str("qname") == internet.SiteTracker && rec.str("rule") == "default" {
				denied = true
			}
			if rec.str("event") == "flow" && rec.str("action") == "allow" && rec.str("host") == internet.SiteTracker {
				t.Errorf("a flow to %s was allowed: %v", internet.SiteTracker, rec)
			}
		}
		if !denied {
			t.Errorf("no dns deny record (rule default) for %s", internet.SiteTracker)
		}

		// nsgate policy suggest turns that denial into the rule that
		// would have allowed it (besides the names Chromium looks up by
		// itself, refused too), and suggests nothing the policy has.
		s := runNsgate(t, m, "policy", "suggest", filepath.Join(edir, "tracker.jsonl"), "--policy", filepath.Join(edir, "policy.yaml"))
		var plus []string
		for _, l := range strings.Split(s.stdout, "\n") {
			if strings.HasPrefix(l, "+  - ") {
				plus = append(plus, l)
			}
		}
		if s.code != 0 || !slices.ContainsFunc(plus, func(l string) bool { return strings.HasPrefix(l, `+  - {host: "tracker.test", proto: tcp}`) }) {
			t.Errorf("policy suggest: exit %d, + lines %q; want one for tracker.test", s.code, plus)
		}
		for _, l := range plus {
			if strings.Contains(l, ".cdn.test") || strings.Contains(l, internet.SiteAssetsName) || strings.Contains(l, `"`+internet.AppName+`"`) {
				t.Errorf("policy suggest proposes what the policy allows already: %s", l)
			}
		}
	})
}

// TestLearnKeepsBuiltinRefusals: under --learn the cloud-metadata set,
// the special ranges and the gateway's own addresses refuse as ever (the
// worker is refused, the fake target sees nothing, the audit log has the
// denial), and none of them appears in the learned file; the controls
// are learned.
func TestLearnKeepsBuiltinRefusals(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "start.yaml", "version: 1\ndns:\n  upstream: [\""+internet.UpstreamDNS+"\"]\n")
		learned := filepath.Join(dir, "learned.yaml")
		log := filepath.Join(dir, "audit.jsonl")
		guarded := []string{"169.254.169.254:80/tcp", internet.PrivateV4 + ":8080/tcp", "127.0.0.1:8080/tcp"}
		before := map[string]int64{}
		for _, g := range guarded {
			before[g] = targetAt(g).count()
		}
		probes := []struct{ args, want string }{
			{"tcp 169.254.169.254:80", "refused 169.254.169.254:80"},
			{"tcp " + internet.PrivateV4 + ":8080", "refused " + internet.PrivateV4 + ":8080"},
			{"tcp 10.0.2.2:8080", "refused 10.0.2.2:8080"},
			{"tcp " + internet.MetaAName + ":80", "refused " + internet.MetaAName + ":80"},
			{"tcp " + internet.PrivateName + ":8080", "refused " + internet.PrivateName + ":8080"},
			{"dns 10.0.2.3:53 metadata.google.internal A udp", "rcode NameError answers 0"},
			{"tcp " + internet.OKName + ":8080", "ok " + internet.OKName + ":8080"},
			{"tcp " + internet.AppV4 + ":9090", "ok " + internet.AppV4 + ":9090"},
		}
		var script []string
		for _, p := range probes {
			script = append(script, nsgateBin+" __probe "+p.args)
		}
		r := runNsgate(t, m, "run", "--learn", learned, "--policy", pol, "--audit", log, "--exec-allow", nsgateBin,
			"--", "/bin/sh", "-c", strings.Join(script, "; ")+"; true")
		if r.code != 0 {
			t.Fatalf("exit %d", r.code)
		}
		for _, p := range probes {
			if !strings.Contains(r.stdout, p.want) {
				t.Errorf("%s: worker output lacks %q", p.args, p.want)
			}
		}
		for _, g := range guarded {
			if got := targetAt(g).count() - before[g]; got != 0 {
				t.Errorf("fake target %s saw %d connections during learning, want 0", g, got)
			}
		}
		recs := readAudit(t, log)
		for _, want := range []struct{ key, val, rule string }{
			{"dst", "169.254.169.254:80", "builtin:metadata"},
			{"dst", internet.PrivateV4 + ":8080", "builtin:special-range"},
			{"dst", "10.0.2.2:8080", "builtin:special-range"},
			{"host", internet.MetaAName, "builtin:metadata"},
			{"host", internet.PrivateName, "builtin:special-range"},
			{"qname", "metadata.google.internal", "builtin:metadata"},
		} {
			var found bool
			for _, rec := range recs {
				if rec.str(want.key) == want.val && rec.str("action") == "deny" {
					found = true
					if rec.str("rule") != want.rule {
						t.Errorf("%s %s: rule %q, want %q", want.key, want.val, rec.str("rule"), want.rule)
					}
				}
			}
			if !found {
				t.Errorf("no deny record with %s %s", want.key, want.val)
			}
		}
		data, err := os.ReadFile(learned)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		t.Logf("learned policy:\n%s", text)
		// The header's command line is the shell script above, which names
		// the targets; everything else must not.
		var body []string
		for _, l := range strings.Split(text, "\n") {
			if !strings.HasPrefix(l, "# command: ") {
				body = append(body, l)
			}
		}
		for _, never := range []string{"169.254", internet.PrivateV4, "10.0.2.", "127.0.0.1", internet.MetaAName, internet.PrivateName, "metadata.google", "metadata.goog"} {
			if strings.Contains(strings.Join(body, "\n"), never) {
				t.Errorf("the learned policy names %q, which the built-in sets refused", never)
			}
		}
		for _, want := range []string{`{host: "www.ok.test", proto: tcp, ports: [8080]}`, `{cidr: "203.0.113.10/32", proto: tcp, ports: [9090]}`, "refused by the cloud-metadata set, the special ranges"} {
			if !strings.Contains(text, want) {
				t.Errorf("the learned policy lacks %q", want)
			}
		}
		if c := runNsgate(t, m, "check", learned); c.code != 0 {
			t.Errorf("nsgate check of the learned policy: exit %d: %s", c.code, c.stderr)
		}
	})
}

// TestLearnUnwritableOutput: a --learn path nsgate cannot write is one
// clear line before the worker starts, not a crash and not a lost run.
func TestLearnUnwritableOutput(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		marker := filepath.Join(dir, "ran")
		for _, out := range []string{filepath.Join(dir, "missing", "learned.yaml"), dir} {
			r := runNsgate(t, m, "run", "--learn", out, "--rw", dir, "--", "/bin/sh", "-c", "echo > "+marker)
			if r.code != 125 || !strings.Contains(r.stderr, "nsgate: --learn: ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("--learn %s: exit %d, stderr %q; want 125 and one line naming --learn", out, r.code, r.stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("--learn %s: the worker ran although the learned file cannot be written", out)
			}
		}
	})
}

// TestLearnHostsSpecialRange: learning is bounded by the special-range
// guard exactly as enforcing is. The starting policy's dns.hosts points
// names at the host's loopback and at a private address, and its allow
// rules name one TCP and one UDP port; under --learn the worker reaches
// those ports, and every other port of the same addresses, TCP and UDP,
// is refused (the fake server sees nothing, the audit log has the
// builtin:special-range denial) and is not in the learned file.
func TestLearnHostsSpecialRange(t *testing.T) {
	tcpL := func(addr string) (string, *atomic.Int64) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		var n atomic.Int64
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				c.Close()
			}
		}()
		return ln.Addr().String(), &n
	}
	udpL := func(addr string) (string, *atomic.Int64) {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		var n atomic.Int64
		go func() {
			buf := make([]byte, 2048)
			for {
				k, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				n.Add(1)
				pc.WriteTo(buf[:k], from)
			}
		}()
		return ln2port(addr, pc.LocalAddr().String()), &n
	}
	port := func(hp string) string { _, p, _ := net.SplitHostPort(hp); return p }
	forEachMode(t, func(t *testing.T, m mode) {
		loopTCP, loopTCPHits := tcpL("127.0.0.1:0")
		privTCP, privTCPHits := tcpL(internet.PrivateV4 + ":0")
		loopUDPok, loopUDPokHits := udpL("127.0.0.1:0")
		loopUDP, loopUDPHits := udpL("127.0.0.1:0")
		privUDP, privUDPHits := udpL(internet.PrivateV4 + ":0")
		dir := workDir(t, m)
		pol := writeFile(t, dir, "start.yaml", `version: 1
allow:
  - host: svc.internal
    ports: [8080]
  - host: lan.internal
    ports: [8080]
  - host: svc.internal
    proto: udp
    ports: [`+port(loopUDPok)+`]
    l7: none
dns:
  upstream: ["`+internet.UpstreamDNS+`"]
  hosts:
    svc.internal: [127.0.0.1]
    lan.internal: [`+internet.PrivateV4+`]
`)
		learned := filepath.Join(dir, "learned.yaml")
		log := filepath.Join(dir, "audit.jsonl")
		loop8080, priv8080 := targetAt("127.0.0.1:8080/tcp"), targetAt(internet.PrivateV4+":8080/tcp")
		docker := targetAt("127.0.0.1:2375/tcp")
		b8080, bp8080, bDocker := loop8080.count(), priv8080.count(), docker.count()
		probes := []struct{ args, want string }{
			{"tcp svc.internal:8080", "ok svc.internal:8080"},
			{"tcp lan.internal:8080", "ok lan.internal:8080"},
			{"udp svc.internal:" + port(loopUDPok), "ok svc.internal:" + port(loopUDPok)},
			{"tcp svc.internal:2375", "svc.internal:2375"},
			{"tcp svc.internal:" + port(loopTCP), "svc.internal:" + port(loopTCP)},
			{"tcp lan.internal:" + port(privTCP), "lan.internal:" + port(privTCP)},
			{"udp svc.internal:" + port(loopUDP), "svc.internal:" + port(loopUDP)},
			{"udp lan.internal:" + port(privUDP), "lan.internal:" + port(privUDP)},
		}
		var script []string
		for _, p := range probes {
			script = append(script, nsgateBin+" __probe "+p.args)
		}
		r := runNsgate(t, m, "run", "--learn", learned, "--policy", pol, "--audit", log, "--exec-allow", nsgateBin,
			"--", "/bin/sh", "-c", strings.Join(script, "; ")+"; true")
		if r.code != 0 {
			t.Fatalf("exit %d", r.code)
		}
		for i, p := range probes {
			if !strings.Contains(r.stdout, p.want) {
				t.Errorf("%s: worker output lacks %q", p.args, p.want)
			}
			if i >= 3 && strings.Contains(r.stdout, "ok "+strings.Fields(p.args)[1]) {
				t.Errorf("%s: the worker reached it during learning", p.args)
			}
		}
		if loop8080.count()-b8080 < 1 || priv8080.count()-bp8080 < 1 || loopUDPokHits.Load() < 1 {
			t.Errorf("controls: loopback 8080 %d, private 8080 %d, loopback udp %d hits; want each ≥ 1",
				loop8080.count()-b8080, priv8080.count()-bp8080, loopUDPokHits.Load())
		}
		for name, got := range map[string]int64{
			"127.0.0.1:2375/tcp": docker.count() - bDocker, loopTCP + "/tcp": loopTCPHits.Load(), privTCP + "/tcp": privTCPHits.Load(),
			loopUDP + "/udp": loopUDPHits.Load(), privUDP + "/udp": privUDPHits.Load(),
		} {
			if got != 0 {
				t.Errorf("%s saw %d hits during learning, want 0", name, got)
			}
		}
		recs := readAudit(t, log)
		for _, want := range []struct{ proto, host, port string }{
			{"tcp", "svc.internal", "2375"}, {"tcp", "svc.internal", port(loopTCP)}, {"tcp", "lan.internal", port(privTCP)},
			{"udp", "svc.internal", port(loopUDP)}, {"udp", "lan.internal", port(privUDP)},
		} {
			found := false
			for _, rec := range recs {
				if rec.str("event") == "flow" && rec.str("proto") == want.proto && rec.str("host") == want.host &&
					strings.HasSuffix(rec.str("dst"), ":"+want.port) && rec.str("action") == "deny" && rec.str("rule") == "builtin:special-range" {
					found = true
				}
			}
			if !found {
				t.Errorf("no deny flow record rule=builtin:special-range for %s %s:%s", want.proto, want.host, want.port)
			}
		}
		data, err := os.ReadFile(learned)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		t.Logf("learned policy:\n%s", text)
		var body []string
		for _, l := range strings.Split(text, "\n") {
			if !strings.HasPrefix(l, "# command: ") {
				body = append(body, l)
			}
		}
		for _, never := range []string{"2375", port(loopTCP), port(privTCP), port(loopUDP), port(privUDP), "rule=learn"} {
			// A whole number, not a digit run inside another port (the
			// random ports may hold "2375").
			if regexp.MustCompile(`(^|[^0-9])` + regexp.QuoteMeta(never) + `([^0-9]|$)`).MatchString(strings.Join(body, "\n")) {
				t.Errorf("the learned policy names %q, which only dns.hosts opened", never)
			}
		}
		lp, err := policy.Load(learned)
		if err != nil {
			t.Fatalf("load learned policy: %v", err)
		}
		for _, f := range []policy.Flow{
			{Proto: policy.TCP, Host: "svc.internal", Addr: netip.MustParseAddr("127.0.0.1"), Port: 2375},
			{Proto: policy.UDP, Host: "svc.internal", Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(atoiT(t, port(loopUDP)))},
			{Proto: policy.TCP, Host: "lan.internal", Addr: netip.MustParseAddr(internet.PrivateV4), Port: uint16(atoiT(t, port(privTCP)))},
		} {
			if d := lp.Decide(f); d.Verdict == policy.Allow {
				t.Errorf("the learned policy allows %+v (%v)", f, d)
			}
		}
	})
}

// ln2port is the listener's "host:port" on the address asked for.
func ln2port(asked, got string) string {
	h, _, _ := net.SplitHostPort(asked)
	_, p, _ := net.SplitHostPort(got)
	return net.JoinHostPort(h, p)
}

func atoiT(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
