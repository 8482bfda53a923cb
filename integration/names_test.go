//go:build integration

package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/internet"
)

// namesPolicy approves app.test (a static dns.hosts answer) and every name
// under ok.test (answered by the fake upstream DNS of internet.DefaultLayout).
const namesPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080, 8443, 22]
  - host: "*.ok.test"
    ports: [8080]
dns:
  upstream: ["` + internet.UpstreamDNS + `"]
  hosts:
    app.test: [` + internet.AppV4 + `]
`

// upstreamAsked reports whether the fake upstream DNS saw a query for name.
func upstreamAsked(name string) bool {
	for _, q := range inet.DNS().Queries() {
		if q.Name == name {
			return true
		}
	}
	return false
}

func TestNamesApprovedResolve(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", namesPolicy)
		for _, tc := range []struct{ why, url, want string }{
			{"static dns.hosts answer", "http://app.test:8080/", "hello from app"},
			{"wildcard, answered upstream", "http://www.ok.test:8080/", "hello from www.ok.test"},
			{"case and trailing dot normalize", "http://WWW.Ok.Test.:8080/", "hello from www.ok.test"},
		} {
			r, _ := curl(t, m, pol, filepath.Join(dir, "a.jsonl"), tc.url)
			if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
				t.Errorf("%s: %s: exit %d %q, want %q", tc.why, tc.url, r.code, r.stdout, tc.want)
			}
		}
		// The wildcard's apex is not approved: it never resolves and is
		// never asked upstream.
		log := filepath.Join(dir, "apex.jsonl")
		r, _ := curl(t, m, pol, log, "http://ok.test:8080/")
		if r.code != 6 {
			t.Errorf("apex ok.test: curl exit %d, want 6 (could not resolve)", r.code)
		}
		if upstreamAsked("ok.test") {
			t.Errorf("the apex ok.test was sent upstream")
		}
		var nx bool
		for _, rec := range readAudit(t, log) {
			if rec.str("event") == "dns" && rec.str("qname") == "ok.test" && rec.str("action") == "deny" {
				nx = true
			}
		}
		if !nx {
			t.Errorf("no dns deny record for ok.test")
		}
	})
}

// TestNamesPrivateAnswersRefused: an approved name whose upstream answer is
// private, loopback or the metadata address is refused, and the refusal
// names the answer; a name that rebinds never reaches its second answer.
func TestNamesPrivateAnswersRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", namesPolicy)
		guarded := []string{internet.PrivateV4 + ":8080/tcp", "127.0.0.1:8080/tcp", internet.MetadataV4 + ":8080/tcp"}
		before := map[string]int64{}
		for _, g := range guarded {
			before[g] = targetAt(g).count()
		}
		for _, tc := range []struct{ name, answer string }{
			{internet.PrivateName, internet.PrivateV4},
			{internet.LoopName, "127.0.0.1"},
			{internet.MetaAName, internet.MetadataV4},
		} {
			log := filepath.Join(dir, tc.name+".jsonl")
			r, secs := curl(t, m, pol, log, "http://"+tc.name+":8080/")
			if r.code != 7 || secs >= 1 {
				t.Errorf("%s: curl exit %d after %.2fs, want 7 (reset) at once", tc.name, r.code, secs)
			}
			var found bool
			for _, rec := range readAudit(t, log) {
				if rec.str("event") != "flow" || rec.str("host") != tc.name || rec.str("action") != "deny" {
					continue
				}
				found = true
				refused, _ := rec["refused"].([]any)
				var joined []string
				for _, x := range refused {
					s, _ := x.(string)
					joined = append(joined, s)
				}
				if !strings.Contains(strings.Join(joined, " "), tc.answer) {
					t.Errorf("%s: deny record does not name the refused answer %s: %v", tc.name, tc.answer, rec)
				}
			}
			if !found {
				t.Errorf("%s: no deny flow record", tc.name)
			}
		}
		// Rebinding: public first, 127.0.0.1 after its TTL of 0.
		inet.DNS().ResetRebinding()
		log := filepath.Join(dir, "rebind.jsonl")
		url := "http://" + internet.RebindName + ":8080/"
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--exec-allow", "/usr/bin/sleep", "--",
			"sh", "-c", "curl -sS --max-time 5 "+url+"; echo; sleep 2; curl -sS --max-time 5 "+url+"; echo rc=$?")
		if !strings.Contains(r.stdout, "before rebinding") {
			t.Errorf("first visit to the rebinding name failed: %q", r.stdout)
		}
		if !strings.Contains(r.stdout, "rc=7") {
			t.Errorf("second visit after rebinding to 127.0.0.1 was not refused: %q", r.stdout)
		}
		for _, g := range guarded {
			if got := targetAt(g).count() - before[g]; got != 0 {
				t.Errorf("fake target %s saw %d connections, want 0", g, got)
			}
		}
	})
}

// TestNamesDeniedNeverLeave: a denied name gets NXDOMAIN and the fake
// upstream never hears of it, for A, TXT, over TCP, and under an approved
// name's suffix; direct DNS to any other server is refused and audited.
func TestNamesDeniedNeverLeave(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", namesPolicy)
		for _, tc := range []struct{ name, qtype, transport string }{
			{"unapproved.test", "A", "udp"},
			{"secret-c2VjcmV0.exfil.test", "TXT", "udp"},
			{"tcp-secret.exfil.test", "A", "tcp"},
			{"sub.app.test", "A", "udp"},
			{"metadata.google.internal", "A", "udp"},
		} {
			log := filepath.Join(dir, "dns.jsonl")
			r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "dns", "10.0.2.3:53", tc.name, tc.qtype, tc.transport)
			if !strings.Contains(r.stdout, "rcode NameError answers 0") {
				t.Errorf("%s %s over %s: %q, want NXDOMAIN", tc.name, tc.qtype, tc.transport, r.stdout)
			}
			if upstreamAsked(tc.name) {
				t.Errorf("%s was sent upstream", tc.name)
			}
		}
		resolverBefore := inet.TargetHits("resolver")
		for _, tc := range []struct{ why, transport, server, dst string }{
			{"direct DNS over UDP", "udp", internet.ResolverV4 + ":53", internet.ResolverV4 + ":53"},
			{"direct DNS over TCP", "tcp", internet.ResolverV4 + ":53", internet.ResolverV4 + ":53"},
			{"DNS over TLS port", "tcp", internet.ResolverV4 + ":853", internet.ResolverV4 + ":853"},
		} {
			log := filepath.Join(dir, "direct.jsonl")
			r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", nsgateBin, "__probe", "dns", tc.server, "app.test", "A", tc.transport)
			if r.code == 0 {
				t.Errorf("%s: got an answer: %q", tc.why, r.stdout)
			}
			if _, ok := findFlow(readAudit(t, log), "deny", tc.dst); !ok {
				t.Errorf("%s: no deny record for %s", tc.why, tc.dst)
			}
		}
		if got := inet.TargetHits("resolver") - resolverBefore; got != 0 {
			t.Errorf("the outside resolver saw %d queries or connections, want 0", got)
		}
	})
}

// TestNamesDeniedSayWhy: dig, run as the worker, shows the Extended DNS
// Error nsgate puts on a refused name (RFC 8914: "Blocked", with the rule
// and the reason), so that an agent can tell a policy refusal from a name
// that does not exist; an approved name resolves without one.
func TestNamesDeniedSayWhy(t *testing.T) {
	dig, err := exec.LookPath("dig")
	need(t, "dig (package bind9-dnsutils)", err)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", namesPolicy)
		log := filepath.Join(dir, "dig.jsonl")
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--", dig, "+tries=1", "+time=3", "unapproved.test", "A")
		t.Logf("dig unapproved.test:\n%s", r.stdout)
		if !strings.Contains(r.stdout, "status: NXDOMAIN") || !strings.Contains(r.stdout, "EDE: 15 (Blocked)") ||
			!strings.Contains(r.stdout, "nsgate policy: denied by rule default") {
			t.Errorf("dig of a refused name: %q, want NXDOMAIN with EDE 15 (Blocked) naming nsgate's rule", r.stdout)
		}
		if upstreamAsked("unapproved.test") {
			t.Errorf("unapproved.test was sent upstream")
		}
		var rec bool
		for _, rr := range readAudit(t, log) {
			rec = rec || rr.str("event") == "dns" && rr.str("qname") == "unapproved.test" && rr.str("action") == "deny"
		}
		if !rec {
			t.Errorf("no dns deny record for unapproved.test")
		}
		r = runNsgate(t, m, "run", "--policy", pol, "--", dig, "+tries=1", "+time=3", "app.test", "A")
		if !strings.Contains(r.stdout, "status: NOERROR") || strings.Contains(r.stdout, "EDE") {
			t.Errorf("dig of an approved name: %q, want NOERROR without an EDE", r.stdout)
		}
	})
}

// TestL7Checks: SNI and Host must match the name the flow was opened by;
// normal HTTPS and server-first protocols work.
func TestL7Checks(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", namesPolicy)
		ca := inet.CAFile()
		log := filepath.Join(dir, "l7.jsonl")
		run := func(args ...string) result {
			// The CA lies in the caller's /tmp, which the worker's view
			// replaces: show it read-only.
			return runNsgate(t, m, append([]string{"run", "--policy", pol, "--audit", log, "--ro", ca, "--"}, args...)...)
		}
		if r := run("curl", "-sS", "--max-time", "5", "--cacert", ca, "https://app.test:8443/"); r.code != 0 || !strings.Contains(r.stdout, "hello from app over tls") {
			t.Errorf("HTTPS to app.test: exit %d %q", r.code, r.stdout)
		}
		// A refusal says what it is: a TLS access_denied alert, an HTTP 403
		// naming the reason (and never the server's page).
		if r := run("curl", "-sS", "--max-time", "5", "--cacert", ca, "--connect-to", "other.test:8443:app.test:8443", "https://other.test:8443/"); r.code == 0 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("TLS with SNI other.test to app.test's address: exit %d %q %q; want refused with an access denied alert", r.code, r.stdout, r.stderr)
		}
		if r := run("curl", "-sS", "--max-time", "5", "-w", "\nstatus=%{http_code}\n", "-H", "Host: evil.test", "http://app.test:8080/"); !strings.Contains(r.stdout, "status=403") ||
			!strings.Contains(r.stdout, "nsgate refused this request: host does not match") || strings.Contains(r.stdout, "hello from") {
			t.Errorf("HTTP with Host evil.test to app.test: exit %d %q; want nsgate's 403 and nothing from the server", r.code, r.stdout)
		}
		if r := run(nsgateBin, "__probe", "banner", "app.test:22"); r.code != 0 || !strings.Contains(r.stdout, "SSH-2.0-nsgate-lab") {
			t.Errorf("server-first banner on an allowed port: exit %d %q", r.code, r.stdout)
		}
		var sni, host bool
		for _, rec := range readAudit(t, log) {
			if rec.str("event") != "l7" || rec.str("action") != "deny" {
				continue
			}
			sni = sni || rec.str("sni") == "other.test"
			host = host || rec.str("http_host") == "evil.test"
		}
		if !sni || !host {
			t.Errorf("missing l7 deny records: sni %v, host %v", sni, host)
		}
	})
}
