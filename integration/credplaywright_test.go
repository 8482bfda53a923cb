//go:build integration

package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// credPlaywrightScript is an agent that logs in to the fake API with the
// token nsgate gave it: playwright-core drives Debian's Chromium with the
// placeholder from $API_TOKEN as its Authorization header on every
// request (extraHTTPHeaders, as an agent's harness sets a token), loads
// the API's /echo page, then a path the policy refuses. It prints the
// token it holds and, per page, the status and the page's text.
const credPlaywrightScript = `const { chromium } = require('` + nodeModules + `/playwright-core');
(async () => {
  const tok = process.env.API_TOKEN || '';
  console.log('TOKEN ' + tok);
  const b = await chromium.launch({ executablePath: '/usr/lib/chromium/chromium' });
  const ctx = await b.newContext({ extraHTTPHeaders: { Authorization: 'Bearer ' + tok } });
  const p = await ctx.newPage();
  for (const u of process.argv.slice(2)) {
    try {
      const r = await p.goto(u, { timeout: 20000 });
      const text = (await p.textContent('body')).trim().replace(/\s+/g, ' ');
      console.log('PAGE ' + u + ' ' + (r ? r.status() : 0) + ' ' + text);
    } catch (e) { console.log('FAILED ' + u + ' ' + e.message.split('\n')[0]); }
  }
  await b.close();
})().catch(e => { console.log('AGENT ' + e.message); process.exit(1); });
`

// TestCredentialsPlaywright: the Playwright stack under --profile
// playwright, with no CA flag and no --ignore-certificate-errors, logs in
// to a terminated API with a brokered token. The upstream gets the real
// secret on the allowed page, the agent holds and sees only the
// placeholder (the echo comes back scrubbed), a refused path gets nsgate's
// 403 naming the rule with no request upstream, and the secret is in no
// audit record.
func TestCredentialsPlaywright(t *testing.T) {
	needChromium(t)
	needStack(t, "playwright-core", nodeModules+"/playwright-core", "/usr/bin/node")
	up := startCredUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir, pol, _ := credRun(t, m, up)
		js := writeFile(t, dir, "agent.js", credPlaywrightScript)
		log := filepath.Join(dir, "audit.jsonl")
		base := "https://api.example.test:" + fmt.Sprint(credPort)
		cmd := nsgateCmd(m, "run", "--policy", pol, "--audit", log, "--profile", "playwright", "--ro", js,
			"--", "/usr/bin/node", js, base+"/echo", base+"/admin")
		cmd.Env = append(cmd.Env, "NSGATE_IT_SECRET="+credSecret)
		r := runBounded(t, cmd, 150*time.Second, "Playwright with a brokered token", chromiumLog)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, chromiumLog(r.stderr))
		if strings.Contains(r.stdout, credSecret) || strings.Contains(r.stderr, credSecret) {
			t.Errorf("the agent saw the secret")
		}
		tok := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "TOKEN "); ok {
				tok = v
			}
		}
		if !strings.HasPrefix(tok, "nsgph") {
			t.Fatalf("the agent's API_TOKEN is %q, want nsgate's placeholder", tok)
		}
		if !strings.Contains(r.stdout, "PAGE "+base+"/echo 200 echo HTTP/2.0 Bearer "+tok) {
			t.Errorf("the API page did not load with the placeholder echoed back")
		}
		if !strings.Contains(r.stdout, "PAGE "+base+"/admin 403 ") {
			t.Errorf("the refused path did not get nsgate's 403")
		}
		auths, paths, _ := up.seen()
		var withSecret int
		for _, a := range auths {
			if a == "Bearer "+credSecret {
				withSecret++
			} else {
				t.Errorf("upstream got Authorization %q, want the secret", a)
			}
		}
		if withSecret == 0 {
			t.Errorf("upstream never got the secret (paths %q)", paths)
		}
		for _, p := range paths {
			if p == "/admin" {
				t.Errorf("the refused path reached the upstream")
			}
		}
		var allowEcho, denyAdmin bool
		for _, rec := range readAudit(t, log) {
			if strings.Contains(fmt.Sprint(rec), credSecret) {
				t.Errorf("audit record holds the secret: %v", rec)
			}
			if rec.str("event") == "request" {
				allowEcho = allowEcho || rec.str("path") == "/echo" && rec.str("action") == "allow"
				denyAdmin = denyAdmin || rec.str("path") == "/admin" && rec.str("action") == "deny"
			}
		}
		if !allowEcho || !denyAdmin {
			t.Errorf("audit: allowed /echo %v, refused /admin %v; want both", allowEcho, denyAdmin)
		}
	})
}
