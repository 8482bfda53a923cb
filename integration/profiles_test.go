//go:build integration

package integration

import (
	"bytes"
	"image"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/profile"
)

// The worker stacks people run, each under its profile alone
// (profile/profiles/*.yaml; docs/agents.md): no flag hunt. Each test loads
// the approved page from the sealed internet, tries the refused ones (0
// hits at their fake servers), and, for Playwright, tries a shell, curl
// and python3 from node: refused and audited.

const profilePolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
`

// refusedURLs are pages the policy refuses: an unapproved name, an
// unapproved address and the metadata address.
var refusedURLs = []string{"http://unapproved.test:8080/", "http://198.51.100.20:8080/", "http://169.254.169.254/"}

var refusedTargets = []string{"198.51.100.20:8080/tcp", "169.254.169.254:80/tcp"}

func needStack(t *testing.T, what string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		_, err := os.Stat(p)
		need(t, what+" ("+p+"; .ci/install)", err)
	}
}

func hitsOf() map[string]int64 {
	m := map[string]int64{}
	for _, g := range refusedTargets {
		m[g] = targetAt(g).count()
	}
	return m
}

func checkNoHits(t *testing.T, before map[string]int64) {
	t.Helper()
	for _, g := range refusedTargets {
		if got := targetAt(g).count() - before[g]; got != 0 {
			t.Errorf("fake server %s saw %d connections, want 0", g, got)
		}
	}
}

// execRecords returns the exec records' paths, and fails on a refused one
// unless allowed by refusedOK.
func execPaths(recs []record) (allowed, refused []string) {
	for _, r := range recs {
		if r.str("event") != "exec" {
			continue
		}
		if r.str("action") == "allow" {
			allowed = append(allowed, r.str("path"))
		} else {
			refused = append(refused, r.str("path"))
		}
	}
	return
}

// checkNoShellRan: no exec record of the run names a shell, allowed or
// refused... allowed: a refused shell is the guard doing its work.
func checkNoShellRan(t *testing.T, recs []record) {
	t.Helper()
	allowed, _ := execPaths(recs)
	for _, p := range allowed {
		c, err := filepath.EvalSymlinks(p)
		if err != nil {
			c = p
		}
		if profile.IsShell(p) || profile.IsShell(c) {
			t.Errorf("the worker ran the shell %s", p)
		}
	}
}

const profPlaywrightScript = `
const { chromium } = require('` + nodeModules + `/playwright-core');
const cp = require('child_process');
(async () => {
  const b = await chromium.launch({ executablePath: '/usr/lib/chromium/chromium' });
  const p = await b.newPage();
  for (const u of process.argv.slice(2)) {
    try { await p.goto(u, { timeout: 20000 }); console.log('LOADED ' + u + ' ' + (await p.textContent('body')).trim()); }
    catch (e) { console.log('REFUSED ' + u + ' ' + e.message.split('\n')[0]); }
  }
  await b.close();
  for (const [what, f] of [
    ['execSync id', () => cp.execSync('id')],
    ['shell', () => cp.execFileSync('/bin/sh', ['-c', 'id'])],
    ['curl', () => cp.execFileSync('/usr/bin/curl', ['-s', 'http://198.51.100.20:8080/'])],
    ['python3', () => cp.execFileSync('/usr/bin/python3', ['-c', 'print(1)'])],
  ]) {
    try { f(); console.log('RAN ' + what); } catch (e) { console.log('BLOCKED ' + what + ' ' + (e.code || e.status)); }
  }
})().catch(e => { console.log('FAILED ' + e.message); process.exit(1); });
`

// checkPlaywrightAgent checks what profPlaywrightScript's run r left:
// the approved page loaded, every refusedURLs was refused and reached no
// fake server (before: hitsOf before the run), and the shell, curl and
// python3 were blocked, each with an exec deny record in log and no shell
// ran. TestProfilePlaywright and the Playwright recipe of docs/agents.md
// (TestDocRecipes) share it.
func checkPlaywrightAgent(t *testing.T, r result, log string, before map[string]int64) {
	t.Helper()
	if !strings.Contains(r.stdout, "LOADED http://app.test:8080/ hello from app") {
		t.Fatalf("the approved page did not load")
	}
	for _, u := range refusedURLs {
		if !strings.Contains(r.stdout, "REFUSED "+u) {
			t.Errorf("%s: not refused", u)
		}
	}
	checkNoHits(t, before)
	for _, what := range []string{"execSync id", "shell", "curl", "python3"} {
		if !strings.Contains(r.stdout, "BLOCKED "+what) {
			t.Errorf("%s: not blocked", what)
		}
	}
	recs := readAudit(t, log)
	_, refused := execPaths(recs)
	for _, p := range []string{"/bin/sh", "/usr/bin/curl", "/usr/bin/python3"} {
		if !slices.Contains(refused, p) {
			t.Errorf("no exec deny record for %s (refused: %v)", p, refused)
		}
	}
	checkNoShellRan(t, recs)
}

// TestProfilePlaywright: playwright-core driving Debian's Chromium under
// --profile playwright alone.
func TestProfilePlaywright(t *testing.T) {
	needChromium(t)
	needStack(t, "playwright-core", nodeModules+"/playwright-core", "/usr/bin/node")
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", profilePolicy)
		js := writeFile(t, dir, "agent.js", profPlaywrightScript)
		log := filepath.Join(dir, "audit.jsonl")
		before, app := hitsOf(), targetAt("203.0.113.10:8080/tcp").count()
		args := append([]string{"run", "--policy", pol, "--audit", log, "--profile", "playwright", "--ro", js, "--", "/usr/bin/node", js, "http://app.test:8080/"}, refusedURLs...)
		r := runBounded(t, nsgateCmd(m, args...), 150*time.Second, "playwright under nsgate", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		if targetAt("203.0.113.10:8080/tcp").count() == app {
			t.Error("the app server saw no connection")
		}
		checkPlaywrightAgent(t, r, log, before)
		if !strings.Contains(r.stderr, "deny exec /bin/sh") {
			t.Errorf("no live line for the refused shell")
		}
	})
}

const mcpClient = `
import { Client } from '` + nodeModules + `/@modelcontextprotocol/sdk/dist/esm/client/index.js';
import { StdioClientTransport } from '` + nodeModules + `/@modelcontextprotocol/sdk/dist/esm/client/stdio.js';
const argv = process.argv.slice(2);
const at = argv.indexOf('--urls');
const transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1, at), stderr: 'inherit', env: process.env });
const client = new Client({ name: 'nsgate-test', version: '1' });
await client.connect(transport);
for (const u of argv.slice(at + 1)) {
  const r = await client.callTool({ name: 'browser_navigate', arguments: { url: u } });
  console.log('NAVIGATE ' + u + ' ' + JSON.stringify(r.content.map(c => c.text).join(' ')));
  const s = await client.callTool({ name: 'browser_snapshot', arguments: {} });
  console.log('SNAPSHOT ' + u + ' ' + JSON.stringify(s.content.map(c => c.text).join(' ')));
}
await client.close();
`

// checkMCPAgent checks what mcpClient's run r left: the client
// succeeded, the approved page's snapshot shows it, the first two
// refusedURLs were refused and reached no fake server (before: hitsOf
// before the run), and no shell ran. It returns log's records.
// TestProfilePlaywrightMCP and the MCP recipe share it.
func checkMCPAgent(t *testing.T, r result, log string, before map[string]int64) []record {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("the client failed")
	}
	if !strings.Contains(r.stdout, "SNAPSHOT http://app.test:8080/ ") || !strings.Contains(r.stdout, "hello from app") {
		t.Errorf("the snapshot of the approved page does not show it")
	}
	for _, u := range refusedURLs[:2] {
		if !strings.Contains(r.stdout, "NAVIGATE "+u+` "### Error`) {
			t.Errorf("%s: the navigation was not refused", u)
		}
	}
	checkNoHits(t, before)
	recs := readAudit(t, log)
	checkNoShellRan(t, recs)
	return recs
}

// TestProfilePlaywrightMCP: the MCP SDK's client drives @playwright/mcp
// over stdio, the server under nsgate run --profile playwright-mcp.
func TestProfilePlaywrightMCP(t *testing.T) {
	needChromium(t)
	cli := nodeModules + "/@playwright/mcp/cli.js"
	needStack(t, "@playwright/mcp and the MCP SDK", cli, nodeModules+"/@modelcontextprotocol/sdk", "/usr/bin/node")
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", profilePolicy)
		client := writeFile(t, dir, "client.mjs", mcpClient)
		log := filepath.Join(dir, "audit.jsonl")
		before := hitsOf()
		args := append([]string{client, nsgateBin, "run", "--policy", pol, "--audit", log, "--profile", "playwright-mcp", "--", "/usr/bin/node", cli, "--urls", "http://app.test:8080/"}, refusedURLs[:2]...)
		cmd := nsgateCmdAt(m, "/usr/bin/node", args...)
		r := runBounded(t, cmd, 180*time.Second, "the MCP client", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		recs := checkMCPAgent(t, r, log, before)
		if _, refused := execPaths(recs); len(refused) != 0 {
			t.Errorf("the profile is incomplete: refused execs %v", refused)
		}
	})
}

const desktopAgent = `
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const [url, out, asRoot] = process.argv.slice(2);
const wait = ms => new Promise(r => setTimeout(r, ms));
async function until(f, what) {
  for (let i = 0; i < 300; i++) { try { if (f()) return; } catch (e) {} await wait(100); }
  throw new Error('timed out waiting for ' + what);
}
(async () => {
  const x = spawn('/usr/bin/Xvfb', [':99', '-screen', '0', '1280x800x24', '-nolisten', 'tcp'], { stdio: 'inherit' });
  await until(() => { execFileSync('/usr/bin/xdotool', ['getdisplaygeometry'], { stdio: 'ignore' }); return true; }, 'the X server');
  const wm = spawn('/usr/bin/openbox', [], { stdio: 'inherit' });
  const args = ['--no-first-run', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--user-data-dir=/tmp/chromium', '--window-size=1200,700', url];
  if (asRoot === 'root') args.unshift('--no-sandbox');
  const c = spawn('/usr/lib/chromium/chromium', args, { stdio: 'inherit' });
  await until(() => execFileSync('/usr/bin/xdotool', ['search', '--onlyvisible', '--class', 'chromium']).toString().trim() !== '', 'the browser window');
  await wait(3000);
  execFileSync('/usr/bin/xdotool', ['mousemove', '600', '400', 'click', '1']);
  execFileSync('/usr/bin/import', ['-window', 'root', out]);
  console.log('SCREENSHOT ' + fs.statSync(out).size);
  c.kill(); wm.kill(); x.kill();
  await wait(500);
})().catch(e => { console.log('FAILED ' + e.message); process.exit(1); });
`

// TestProfileDesktop: an X11 desktop in the worker (Xvfb, openbox, headful
// Chromium, xdotool, ImageMagick's import) under --profile desktop,
// driven by a Node.js agent: the screenshot shows a page, and the exec
// records, one per program the stack ran, name no shell (Xvfb's keymap
// compiler is executed directly through the profile's shim).
func TestProfileDesktop(t *testing.T) {
	needChromium(t)
	needStack(t, "the X11 desktop stack", "/usr/bin/Xvfb", "/usr/bin/xkbcomp", "/usr/bin/openbox", "/usr/bin/xdotool", "/usr/bin/import", "/usr/local/lib/nsgate/noshell.so", "/usr/bin/node")
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", profilePolicy)
		js := writeFile(t, dir, "desktop.js", desktopAgent)
		out := filepath.Join(dir, "out")
		if err := os.Mkdir(out, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(out, 0o777)
		shot := filepath.Join(out, "screen.png")
		log := filepath.Join(dir, "audit.jsonl")
		who := "user"
		if m.uid < 0 {
			who = "root"
		}
		args := []string{"run", "--policy", pol, "--audit", log, "--profile", "desktop", "--ro", js, "--rw", out, "--", "/usr/bin/node", js, "http://app.test:8080/", shot, who}
		r := runBounded(t, nsgateCmd(m, args...), 150*time.Second, "the desktop stack under nsgate", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, chromiumLog(r.stderr))
		if !strings.Contains(r.stdout, "SCREENSHOT ") {
			t.Fatalf("no screenshot")
		}
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("the screenshot is no PNG: %v", err)
		}
		if n := colours(img); n < 16 {
			t.Errorf("the screenshot has %d colours: a blank screen, not a browser window", n)
		}
		recs := readAudit(t, log)
		allowed, refused := execPaths(recs)
		t.Logf("exec records: allowed %v, refused %v", allowed, refused)
		for _, p := range []string{"/usr/bin/Xvfb", "/usr/bin/xkbcomp", "/usr/bin/openbox", "/usr/lib/chromium/chromium", "/usr/bin/xdotool", "/usr/bin/import"} {
			if !slices.Contains(allowed, p) {
				t.Errorf("no exec record for %s: the records do not cover the stack", p)
			}
		}
		for _, p := range append(allowed, refused...) {
			if profile.IsShell(p) {
				t.Errorf("the stack tried the shell %s", p)
			}
		}
		checkNoShellRan(t, recs)
		if targetAt("203.0.113.10:8080/tcp").count() == 0 {
			t.Error("the app server never saw the browser")
		}
	})
}

// colours counts the distinct colours of img (up to 1000).
func colours(img image.Image) int {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[r>>8<<16|g>>8<<8|bl>>8] = true
			if len(seen) >= 1000 {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// TestUnixSocketRefusalAudited: without --allow-unix a worker's
// socket(AF_UNIX) fails with EPERM, gets a syscall record and a live line
// naming --allow-unix; with it, the worker makes and uses its own.
func TestUnixSocketRefusalAudited(t *testing.T) {
	needStack(t, "node", "/usr/bin/node")
	const js = `const net = require('net');
const s = net.createServer(c => c.end('pong')).on('error', e => { console.log('LISTEN ' + e.code); process.exit(0); });
s.listen('/tmp/own.sock', () => net.connect('/tmp/own.sock').on('data', d => { console.log('GOT ' + d); process.exit(0); }));`
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		for _, allow := range []bool{false, true} {
			log := filepath.Join(dir, "audit.jsonl")
			os.Remove(log)
			args := []string{"run", "--audit", log}
			if allow {
				args = append(args, "--allow-unix")
			}
			args = append(args, "--", "/usr/bin/node", "-e", js)
			r := runBounded(t, nsgateCmd(m, args...), 60*time.Second, "node under nsgate", nil)
			t.Logf("allow-unix=%v: exit %d\nstdout: %s\nstderr: %s", allow, r.code, r.stdout, r.stderr)
			var rec record
			for _, x := range readAudit(t, log) {
				if x.str("event") == "syscall" {
					rec = x
				}
			}
			if allow {
				if !strings.Contains(r.stdout, "GOT pong") || rec != nil {
					t.Errorf("with --allow-unix the worker's own socket must work, unrecorded (record %v)", rec)
				}
				continue
			}
			if !strings.Contains(r.stdout, "LISTEN EPERM") {
				t.Errorf("the worker did not see EPERM")
			}
			if rec == nil || rec.str("action") != "deny" || rec.str("syscall") != "socket" || !strings.HasPrefix(rec.str("args"), "AF_UNIX") {
				t.Errorf("no syscall deny record for socket(AF_UNIX): %v", rec)
			}
			if !strings.Contains(r.stderr, "deny socket(AF_UNIX") || !strings.Contains(r.stderr, "--allow-unix") {
				t.Errorf("no live line naming --allow-unix")
			}
		}
	})
}

// socketSweep walks the worker's whole view (but /proc and /sys) for
// unix sockets and connects to each, then to every abstract socket in
// /proc/net/unix; it prints CONNECTED for each it reached, and its own
// socket (made first) must be among them, or the sweep proves nothing.
const socketSweep = `
const fs = require('fs'), net = require('net'), path = require('path');
const own = '/tmp/own.sock';
const found = [];
function walk(d, depth) {
  if (depth > 12 || d === '/proc' || d === '/sys') return;
  let ents; try { ents = fs.readdirSync(d, { withFileTypes: true }); } catch (e) { return; }
  for (const e of ents) {
    const p = path.join(d, e.name);
    if (e.isSocket()) found.push(p); else if (e.isDirectory()) walk(p, depth + 1);
  }
}
function tryOne(addr) {
  return new Promise(res => {
    const c = net.connect(addr);
    const t = setTimeout(() => { c.destroy(); res('timeout'); }, 2000);
    c.on('connect', () => { clearTimeout(t); c.destroy(); res('connected'); });
    c.on('error', e => { clearTimeout(t); res(e.code); });
  });
}
const srv = net.createServer(c => c.end()).listen(own, async () => {
  walk('/', 0);
  for (const l of fs.readFileSync('/proc/net/unix', 'utf8').split('\n').slice(1)) {
    const f = l.trim().split(/\s+/);
    if (f.length >= 8 && f[7].startsWith('@')) found.push('\0' + f[7].slice(1));
  }
  for (const s of found) {
    const r = await tryOne(s);
    console.log((r === 'connected' ? 'CONNECTED ' : 'REFUSED ') + JSON.stringify(s) + ' ' + r);
  }
  console.log('SWEPT ' + found.length);
  srv.close();
});
`

// TestAllowUnixReachesNoHostSocket: a worker with --allow-unix makes and
// uses its own socket, but reaches none of the host's: the test's own
// listeners (in a directory the view shows, and an abstract one in the
// namespace nsgate runs in) count no connection, and a sweep of every
// socket in the worker's view connects to its own socket alone.
func TestAllowUnixReachesNoHostSocket(t *testing.T) {
	needStack(t, "node", "/usr/bin/node")
	realRoot(t, "a host socket outside every private directory (/run)")
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		js := writeFile(t, dir, "sweep.js", socketSweep)
		hostDir, err := os.MkdirTemp("/run", "nsgate-it-sweep-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(hostDir)
		os.Chmod(hostDir, 0o755)
		var hits atomic.Int64
		var lns []net.Listener
		for _, addr := range []string{filepath.Join(hostDir, "app.sock"), "@nsgate-it-sweep-" + filepath.Base(hostDir)} {
			ln, err := net.Listen("unix", addr)
			if err != nil {
				t.Fatal(err)
			}
			lns = append(lns, ln)
			os.Chmod(addr, 0o777)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					hits.Add(1)
					c.Close()
				}
			}()
		}
		defer func() {
			for _, ln := range lns {
				ln.Close()
			}
		}()
		log := filepath.Join(dir, "audit.jsonl")
		r := runBounded(t, nsgateCmd(m, "run", "--audit", log, "--allow-unix", "--ro", js, "--", "/usr/bin/node", js), 120*time.Second, "the socket sweep", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		if !strings.Contains(r.stdout, "SWEPT ") {
			t.Fatal("the sweep did not finish")
		}
		if !strings.Contains(r.stdout, `CONNECTED "/tmp/own.sock"`) {
			t.Error("the worker could not reach its own socket: the sweep proves nothing")
		}
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "CONNECTED ") && !strings.HasPrefix(l, `CONNECTED "/tmp/own.sock"`) {
				t.Errorf("the worker reached a socket that is not its own: %s", l)
			}
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the host's sockets counted %d connections, want 0", n)
		}
	})
}
