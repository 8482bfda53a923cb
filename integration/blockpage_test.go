//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The block page (--block-page) as a browser agent sees it: Playwright
// (npm playwright-core driving Debian's Chromium) and Playwright's MCP
// server run as the worker. They need node and the npm packages that
// .ci/install puts in nodeModules; without them these tests skip (fail
// under NSGATE_REQUIRE_ALL=1).

// nodeModules is where .ci/install puts the pinned npm packages.
const nodeModules = "/var/cache/nsgate/node/node_modules"

func needPlaywright(t *testing.T) {
	t.Helper()
	needChromium(t)
	_, err := os.Stat("/usr/bin/node")
	need(t, "node at /usr/bin/node (Debian package nodejs)", err)
	_, err = os.Stat(filepath.Join(nodeModules, "playwright-core", "package.json"))
	need(t, "npm playwright-core in "+nodeModules+" (.ci/install)", err)
}

// blockPolicy approves app.test on port 80 and nothing else.
const blockPolicy = `version: 1
allow:
  - host: app.test
    ports: [80]
dns:
  hosts:
    app.test: [203.0.113.10]
`

// playwrightScript opens each URL of argv[2..] in one page, and prints one
// JSON line per URL: the final URL, the status or the navigation error,
// the page's text, and the screenshot it saved in argv[1].
const playwrightScript = `const { chromium } = require(process.env.PW_CORE);
const fs = require('fs'), path = require('path');
(async () => {
  const dir = process.argv[2];
  const browser = await chromium.launch({executablePath: process.env.PW_CHROMIUM, headless: true,
    args: ['--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']});
  const page = await browser.newPage();
  let i = 0;
  for (const url of process.argv.slice(3)) {
    const out = {url};
    try {
      const r = await page.goto(url, {timeout: 20000});
      out.status = r ? r.status() : 0;
      out.refused = r ? (r.headers()['x-nsgate-refused'] || '') : '';
    } catch (e) { out.error = String(e.message).split('\n')[0]; }
    out.final = page.url();
    out.text = await page.evaluate(() => document.body ? document.body.innerText : '').catch(e => 'evaluate: ' + e.message);
    out.shot = path.join(dir, 'shot-' + (i++) + '.png');
    // Right after a failed navigation the error page may still be on its
    // way: try the screenshot again a little later.
    for (let t = 0; ; t++) {
      try { await page.screenshot({path: out.shot}); break; }
      catch (e) { if (t >= 4) { out.shot = 'screenshot: ' + e.message; break; } await new Promise(r => setTimeout(r, 500)); }
    }
    console.log(JSON.stringify(out));
  }
  await browser.close();
})().catch(e => { console.error('agent: ' + e.stack); process.exit(3); });
`

type pwResult struct {
	URL, Final, Error, Text, Shot, Refused string
	Status                                 int
}

// runPlaywright runs the Playwright agent as the worker under nsgate with
// --block-page and returns one result per URL and the audit log.
func runPlaywright(t *testing.T, m mode, dir string, urls ...string) ([]pwResult, []record) {
	t.Helper()
	pol := writeFile(t, dir, "policy.yaml", blockPolicy)
	script := writeFile(t, dir, "agent.js", playwrightScript)
	shots := filepath.Join(dir, "shots")
	os.Mkdir(shots, 0o755)
	if m.uid >= 0 {
		os.Chown(shots, m.uid, m.gid)
	}
	log := filepath.Join(dir, "audit.jsonl")
	args := []string{"run", "--policy", pol, "--audit", log, "--block-page", "--ro", dir, "--rw", shots,
		"--allow-unix", "--exec-allow", chromiumBin, "--exec-allow", chromiumCrashpad}
	if m.uid >= 0 {
		args = append(args, "--allow-userns")
	}
	args = append(args, "--", "/usr/bin/node", script, shots)
	args = append(args, urls...)
	cmd := nsgateCmd(m, args...)
	cmd.Env = append(cmd.Env, "PW_CORE="+filepath.Join(nodeModules, "playwright-core"), "PW_CHROMIUM="+chromiumBin)
	r := runBounded(t, cmd, 120*time.Second, "Playwright under nsgate", chromiumLog)
	t.Logf("playwright -> exit %d in %s\nstdout: %s\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stdout, chromiumLog(r.stderr))
	if r.code != 0 {
		t.Fatalf("the Playwright agent exited %d", r.code)
	}
	var out []pwResult
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var p pwResult
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("agent output %q: %v", l, err)
		}
		out = append(out, p)
	}
	if len(out) != len(urls) {
		t.Fatalf("%d results for %d URLs", len(out), len(urls))
	}
	return out, readAudit(t, log)
}

// isPNG says the file at p is a PNG image.
func isPNG(p string) bool {
	b, err := os.ReadFile(p)
	return err == nil && bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) && len(b) > 100
}

// TestBlockPagePlaywright: with --block-page, Playwright's page.goto to an
// unapproved name (typed, or by an approved page's redirect) gets the
// block page, whose text names the name and the rule; the fake server at
// that name's real address sees nothing; the audit log has the refusal.
// A redirect to the metadata address keeps its immediate refusal (a
// reset): Playwright reports a connection error, and no page is served.
func TestBlockPagePlaywright(t *testing.T) {
	needPlaywright(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		guarded := []string{"198.51.100.20:8080/tcp", "169.254.169.254:80/tcp"}
		before := map[string]int64{}
		for _, g := range guarded {
			before[g] = targetAt(g).count()
		}
		res, recs := runPlaywright(t, m, dir,
			"http://app.test/",
			"http://unapproved.test:8080/",
			"http://app.test/redirect?to=http://unapproved.test:8080/via-redirect",
			"http://app.test/redirect?to=http://169.254.169.254/latest/meta-data/")
		if r := res[0]; r.Status != 200 || r.Error != "" {
			t.Errorf("control: app.test gave %+v, want 200", r)
		}
		for _, r := range res[1:3] {
			if r.Status != 403 || r.Refused != "unapproved.test" {
				t.Errorf("%s: %+v, want the block page (403, X-Nsgate-Refused: unapproved.test)", r.URL, r)
			}
			if !strings.Contains(r.Text, "Refused by policy: unapproved.test") || !strings.Contains(r.Text, "unapproved.test:8080") ||
				!strings.Contains(r.Text, "default") || strings.Contains(r.Text, "ERR_INTERNET_DISCONNECTED") {
				t.Errorf("%s: the page reads %q, want the block page naming the name, port and rule", r.URL, r.Text)
			}
		}
		if r := res[3]; r.Status != 0 || !strings.Contains(r.Error, "net::ERR_") || strings.Contains(r.Text, "fake metadata") {
			t.Errorf("redirect to metadata: %+v, want a navigation error (the flow is reset, nothing served)", r)
		}
		for _, r := range res {
			if !isPNG(r.Shot) {
				t.Errorf("%s: no screenshot at %q", r.URL, r.Shot)
			}
		}
		denied := 0
		for _, rec := range recs {
			if rec.str("event") == "flow" && rec.str("action") == "deny" && rec.str("host") == "unapproved.test" {
				denied++
				if rec.str("rule") != "default" || !strings.Contains(rec.str("reason"), "block page") {
					t.Errorf("block-page flow record %v: want rule default and a reason naming the block page", rec)
				}
			}
		}
		if denied < 2 {
			t.Errorf("%d flow denials for unapproved.test, want one per block-page load (2)", denied)
		}
		if _, ok := findFlow(recs, "deny", "169.254.169.254:80"); !ok {
			t.Errorf("no deny record for the redirect to 169.254.169.254:80")
		}
		for _, g := range guarded {
			if got := targetAt(g).count() - before[g]; got != 0 {
				t.Errorf("fake server %s saw %d connections, want 0", g, got)
			}
		}
	})
}

// mcpClientScript is an MCP client (the SDK's, over stdio) that starts
// the server command in $MCP_SERVER (JSON argv: nsgate run ... --
// node @playwright/mcp/cli.js ...), navigates to each URL of argv[3..]
// with browser_navigate, saves a browser_take_screenshot PNG in argv[2],
// and prints one JSON line per URL: the tool result's text and whether it
// was an error.
const mcpClientScript = `const sdk = process.env.MCP_SDK;
const { Client } = require(sdk + '/dist/cjs/client/index.js');
const { StdioClientTransport } = require(sdk + '/dist/cjs/client/stdio.js');
const fs = require('fs'), path = require('path');
(async () => {
  const [command, ...args] = JSON.parse(process.env.MCP_SERVER);
  const transport = new StdioClientTransport({command, args, env: process.env, stderr: 'inherit'});
  const client = new Client({name: 'nsgate-test-agent', version: '1.0.0'});
  await client.connect(transport);
  const dir = process.argv[2];
  let i = 0;
  for (const url of process.argv.slice(3)) {
    const out = {url};
    const r = await client.callTool({name: 'browser_navigate', arguments: {url}}, undefined, {timeout: 90000});
    out.isError = !!r.isError;
    out.text = (r.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');
    const s = await client.callTool({name: 'browser_take_screenshot', arguments: {type: 'png'}}, undefined, {timeout: 60000});
    const img = (s.content || []).find(c => c.type === 'image');
    out.shot = path.join(dir, 'mcp-' + (i++) + '.png');
    if (img) fs.writeFileSync(out.shot, Buffer.from(img.data, 'base64')); else out.shot = 'no image: ' + JSON.stringify(s.content).slice(0, 200);
    console.log(JSON.stringify(out));
  }
  await client.close();
})().catch(e => { console.error('mcp agent: ' + e.stack); process.exit(3); });
`

type mcpResult struct {
	URL, Text, Shot string
	IsError         bool
}

// TestBlockPageMCP: Playwright's MCP server (npm @playwright/mcp) runs as
// the worker under nsgate --block-page; an MCP client (the SDK's) outside
// drives it over stdio. browser_navigate to an unapproved name returns
// the block page in its page snapshot: the text a model reads names the
// refusal.
func TestBlockPageMCP(t *testing.T) {
	needPlaywright(t)
	_, err := os.Stat(filepath.Join(nodeModules, "@playwright", "mcp", "cli.js"))
	need(t, "npm @playwright/mcp in "+nodeModules+" (.ci/install)", err)
	_, err = os.Stat(filepath.Join(nodeModules, "@modelcontextprotocol", "sdk", "package.json"))
	need(t, "npm @modelcontextprotocol/sdk in "+nodeModules+" (.ci/install)", err)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		before := targetAt("198.51.100.20:8080/tcp").count()
		pol := writeFile(t, dir, "policy.yaml", blockPolicy)
		client := writeFile(t, dir, "client.js", mcpClientScript)
		out := filepath.Join(dir, "out")
		os.Mkdir(out, 0o755)
		if m.uid >= 0 {
			os.Chown(out, m.uid, m.gid)
		}
		log := filepath.Join(dir, "audit.jsonl")
		server := []string{nsgateBin, "run", "--policy", pol, "--audit", log, "--block-page", "--quiet", "--ro", dir, "--rw", out,
			"--allow-unix", "--exec-allow", chromiumBin, "--exec-allow", chromiumCrashpad}
		if m.uid >= 0 {
			server = append(server, "--allow-userns")
		}
		server = append(server, "--", "/usr/bin/node", filepath.Join(nodeModules, "@playwright", "mcp", "cli.js"),
			"--headless", "--isolated", "--executable-path", chromiumBin, "--output-dir", out)
		if m.uid < 0 {
			server = append(server, "--no-sandbox")
		}
		sj, _ := json.Marshal(server)
		cmd := nsgateCmdAt(m, "/usr/bin/node", client, out, "http://app.test/", "http://unapproved.test:8080/")
		cmd.Env = append(cmd.Env, "MCP_SDK="+filepath.Join(nodeModules, "@modelcontextprotocol", "sdk"), "MCP_SERVER="+string(sj))
		r := runBounded(t, cmd, 180*time.Second, "the MCP client with @playwright/mcp under nsgate", chromiumLog)
		t.Logf("mcp -> exit %d in %s\nstdout: %s\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stdout, chromiumLog(r.stderr))
		if r.code != 0 {
			t.Fatalf("the MCP client exited %d", r.code)
		}
		var res []mcpResult
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var x mcpResult
			if err := json.Unmarshal([]byte(l), &x); err != nil {
				t.Fatalf("client output %q: %v", l, err)
			}
			res = append(res, x)
		}
		if len(res) != 2 {
			t.Fatalf("%d results, want 2", len(res))
		}
		// The tool result names the page's title and status; the page's
		// accessibility snapshot, which the model reads next, is a file
		// in the output folder that the result links to.
		if strings.Contains(res[0].Text, "Refused") || res[0].IsError {
			t.Errorf("control: browser_navigate app.test returned %q", res[0].Text)
		}
		if t2 := res[1].Text; !strings.Contains(t2, "Page Title: Refused by nsgate: unapproved.test") || !strings.Contains(t2, "403") {
			t.Errorf("browser_navigate unapproved.test returned %q, want the block page's title and status", t2)
		}
		snaps, _ := filepath.Glob(filepath.Join(out, "page-*.yml"))
		var app, refused bool
		for _, s := range snaps {
			b, _ := os.ReadFile(s)
			app = app || strings.Contains(string(b), "hello from app")
			refused = refused || (strings.Contains(string(b), "Refused by policy: unapproved.test") && strings.Contains(string(b), "not a network fault"))
		}
		if !app || !refused {
			t.Errorf("page snapshots %v: the approved page's (%v) and the block page's text (%v), want both", snaps, app, refused)
		}
		for _, x := range res {
			if !isPNG(x.Shot) {
				t.Errorf("%s: no screenshot (%s)", x.URL, x.Shot)
			}
		}
		recs := readAudit(t, log)
		found := false
		for _, rec := range recs {
			if rec.str("event") == "flow" && rec.str("action") == "deny" && rec.str("host") == "unapproved.test" && strings.Contains(rec.str("reason"), "block page") {
				found = true
			}
		}
		if !found {
			t.Errorf("no block-page flow denial for unapproved.test in the audit log")
		}
		if got := targetAt("198.51.100.20:8080/tcp").count() - before; got != 0 {
			t.Errorf("the unapproved server saw %d connections, want 0", got)
		}
	})
}
