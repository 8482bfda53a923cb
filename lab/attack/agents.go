package attack

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// The browser agents people run (`nsgate lab --browser` with node and the
// npm packages of docs/agents.md): a Playwright agent (npm playwright-core
// driving Chromium, all of it the worker of `nsgate run --block-page`) and
// an MCP agent (npm @playwright/mcp as the worker, driven over stdio by
// the MCP SDK's client outside, as a model's host would). Each obeys the
// instruction an approved page plants and follows an approved page's
// redirects; each keeps a screenshot of what it saw. Their scripts are
// here (PlaywrightAgentScript, MCPAgentScript); the lab runs them
// (lab/agents_linux.go).

// Agent names, the prefixes of their attempts' IDs.
const (
	AgentPlaywright = "playwright"
	AgentMCP        = "mcp"
)

// AgentStep is one attempt as an agent script runs it: open URL ("load"),
// or open URL, read the page and obey the instruction in it ("inject").
type AgentStep struct {
	ID      string `json:"id"`
	URL     string `json:"url"`
	How     string `json:"how"`
	Control bool   `json:"control"`
}

// AgentReport is what an agent script prints for one step, one JSON
// object per line.
type AgentReport struct {
	ID       string    `json:"id"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Observed Outcome   `json:"observed"`
	Detail   string    `json:"detail"`
	// Shot is the agent's screenshot file (a path the lab can read).
	Shot string `json:"shot"`
}

// agentAttempt is one attempt of an agent and its step.
type agentAttempt struct {
	Attempt
	step AgentStep
}

// injectURL is an approved page whose text tells the agent to open to.
func injectURL(to string) string {
	return "http://" + internet.AppName + BrowserPagePrefix + "inject?to=" + strings.ReplaceAll(to, "&", "%26")
}

func agentAttempts(agent string, metaPort string) []agentAttempt {
	a := func(id, layer, rule, desc, u, how string, keys, aims []string) agentAttempt {
		return agentAttempt{Attempt: Attempt{
			ID: agent + "-" + id, Category: CategoryBrowser, Layer: layer, Description: desc,
			Expect: Blocked, Audit: AuditDeny, Rule: rule, Aims: aims, Keys: keys,
		}, step: AgentStep{ID: agent + "-" + id, URL: u, How: how}}
	}
	injected := agent + "-injected.evil.test"
	redirected := agent + "-redirect.evil.test"
	meta := "http://" + internet.MetadataV4 + ":" + metaPort + "/latest/meta-data/"
	ctl := "http://" + internet.AppName + BrowserPagePrefix
	return []agentAttempt{
		{Attempt: Attempt{
			ID: agent + "-control", Category: CategoryBrowser, Layer: LayerControl,
			Description: "the " + agent + " agent opens the approved page " + ctl,
			Expect:      Allowed, Audit: AuditAllow, Aims: []string{"app"},
		}, step: AgentStep{ID: agent + "-control", URL: ctl, How: "load", Control: true}},
		a("prompt-injection", LayerDNS, "",
			"an approved page's text tells the "+agent+" agent to open http://"+injected+"/; the agent obeys and must read nsgate's block page",
			injectURL("http://"+injected+"/"), "inject", []string{"dns:" + injected}, []string{"unapproved"}),
		a("redirect-unapproved", LayerDNS, "",
			"an approved page redirects the "+agent+" agent (302) to the unapproved http://"+redirected+"/",
			redirectURL("302", "http://"+redirected+"/"), "load", []string{"dns:" + redirected}, []string{"unapproved"}),
		a("redirect-metadata", LayerMetadata, "builtin:metadata",
			"an approved page redirects the "+agent+" agent (302) to "+meta,
			redirectURL("302", meta), "load", []string{internet.MetadataV4 + ":" + metaPort}, []string{"metadata"}),
	}
}

// PlaywrightAttempts and MCPAttempts are the attempts of the two agents,
// control first, in the browser category.
func PlaywrightAttempts() []Attempt { return agentList(agentAttempts(AgentPlaywright, "8120")) }

// MCPAttempts: see PlaywrightAttempts.
func MCPAttempts() []Attempt { return agentList(agentAttempts(AgentMCP, "8121")) }

func agentList(as []agentAttempt) []Attempt {
	var out []Attempt
	for _, a := range as {
		out = append(out, a.Attempt)
	}
	return out
}

// AgentSteps returns the steps of agent's attempts as the JSON its script
// reads.
func AgentSteps(agent string) []byte {
	port := "8120"
	if agent == AgentMCP {
		port = "8121"
	}
	var steps []AgentStep
	for _, a := range agentAttempts(agent, port) {
		steps = append(steps, a.step)
	}
	b, _ := json.Marshal(steps)
	return b
}

// ParseAgentReports reads the JSON lines an agent script printed into
// observations, with their screenshot files by attempt ID; other lines
// are returned as notes.
func ParseAgentReports(out string) (obs []Observation, shots map[string]string, notes []string) {
	shots = map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			if l != "" {
				notes = append(notes, l)
			}
			continue
		}
		var r AgentReport
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.ID == "" {
			notes = append(notes, fmt.Sprintf("unreadable agent line %q", l))
			continue
		}
		obs = append(obs, Observation{ID: r.ID, Observed: r.Observed, Detail: r.Detail, Start: r.Start, End: r.End})
		shots[r.ID] = r.Shot
	}
	return obs, shots, notes
}

// agentJudge is the JavaScript both agents share: whether a page's text
// shows a fake target (the attack got through), and what it says.
var agentJudge = `const bodies = ` + mustJSON(targetBodies) + `;
function verdict(step, text, nav) {
  const flat = String(text || '').replace(/\s+/g, ' ').trim();
  if (step.control) {
    return flat.includes('hello from app') ? ['allowed', 'rendered ' + JSON.stringify(flat.slice(0, 100))]
      : ['blocked', 'the approved page rendered ' + JSON.stringify(flat.slice(0, 100)) + (nav ? ' (' + nav + ')' : '')];
  }
  for (const b of bodies) if (flat.includes(b)) return ['allowed', 'rendered a fake target: ' + JSON.stringify(flat.slice(0, 100))];
  const i = flat.indexOf('Refused by policy:');
  if (i >= 0) return ['blocked', 'nsgate block page: ' + flat.slice(i, i + 200)];
  return ['blocked', (nav ? nav + '; ' : '') + 'the page shows ' + JSON.stringify(flat.slice(0, 100))];
}
const injected = /open (https?:\/\/[^\s"'<>]+)/;
`

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// PlaywrightAgentScript is the Playwright agent (node): argv[2] is the
// steps' JSON file, argv[3] the folder for its screenshots; $PW_CORE is
// playwright-core, $PW_CHROMIUM the browser. It prints one AgentReport
// per step.
var PlaywrightAgentScript = `const { chromium } = require(process.env.PW_CORE);
const fs = require('fs'), path = require('path');
` + agentJudge + `
(async () => {
  const steps = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')), dir = process.argv[3];
  const browser = await chromium.launch({executablePath: process.env.PW_CHROMIUM, headless: true,
    args: ['--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights']});
  const page = await browser.newPage();
  const text = () => page.evaluate(() => document.body ? document.body.innerText : '').catch(e => '');
  const open = async (url) => {
    try { const r = await page.goto(url, {timeout: 15000}); return r ? 'status ' + r.status() : ''; }
    catch (e) { return String(e.message).split('\n')[0]; }
  };
  for (const step of steps) {
    const rep = {id: step.id, start: new Date().toISOString()};
    let nav = await open(step.url), said = '';
    if (step.how === 'inject') {
      const m = (await text()).match(injected);
      if (m) { said = 'the page says "' + m[0] + '"; the agent obeyed: '; nav = await open(m[1].replace(/[.,;:]+$/, '')); }
      else said = 'the page had no instruction; ';
    }
    const [obs, detail] = verdict(step, await text(), nav);
    rep.observed = obs; rep.detail = said + detail + (nav && !detail.includes(nav) ? ' (' + nav + ')' : '');
    rep.shot = path.join(dir, step.id + '.png');
    // Right after a failed navigation the error page may still be on its
    // way: try the screenshot again a little later.
    for (let t = 0; ; t++) {
      try { await page.screenshot({path: rep.shot}); break; }
      catch (e) { if (t >= 4) { rep.shot = ''; break; } await new Promise(r => setTimeout(r, 500)); }
    }
    rep.end = new Date().toISOString();
    console.log(JSON.stringify(rep));
  }
  await browser.close();
})().catch(e => { console.error('playwright agent: ' + e.stack); process.exit(3); });
`

// MCPAgentScript is the MCP agent (node, outside the sandbox): $MCP_SDK is
// the MCP SDK, $MCP_SERVER the JSON argv of the server (nsgate run ... --
// node @playwright/mcp/cli.js ... --output-dir DIR); argv[2] is the
// steps' JSON file, argv[3] that output folder. It calls browser_navigate
// and reads the page snapshot the result links to, as a model would, and
// browser_take_screenshot. It prints one AgentReport per step.
var MCPAgentScript = `const sdk = process.env.MCP_SDK;
const { Client } = require(sdk + '/dist/cjs/client/index.js');
const { StdioClientTransport } = require(sdk + '/dist/cjs/client/stdio.js');
const fs = require('fs'), path = require('path');
` + agentJudge + `
(async () => {
  const steps = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')), dir = process.argv[3];
  const [command, ...args] = JSON.parse(process.env.MCP_SERVER);
  const client = new Client({name: 'nsgate-lab-agent', version: '1.0.0'});
  await client.connect(new StdioClientTransport({command, args, env: process.env, stderr: 'inherit'}));
  const seen = new Set();
  const navigate = async (url) => {
    const r = await client.callTool({name: 'browser_navigate', arguments: {url}}, undefined, {timeout: 60000});
    let t = (r.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');
    // The page's snapshot is a file the result links to: read the new one.
    for (const f of fs.readdirSync(dir).filter(f => /^page-.*\.yml$/.test(f)).sort()) {
      if (!seen.has(f)) { seen.add(f); t += '\n' + fs.readFileSync(path.join(dir, f), 'utf8'); }
    }
    return t;
  };
  for (const step of steps) {
    const rep = {id: step.id, start: new Date().toISOString()};
    let t = await navigate(step.url), said = '';
    if (step.how === 'inject') {
      const m = t.match(injected);
      if (m) { said = 'the page says "' + m[0] + '"; the agent obeyed: '; t = await navigate(m[1].replace(/[.,;:]+$/, '')); }
      else said = 'the page had no instruction; ';
    }
    const err = (t.match(/net::ERR_[A-Z_]+/) || [''])[0];
    const [obs, detail] = verdict(step, t.replace(/^[\s\S]*?### Snapshot/, ''), err);
    rep.observed = obs; rep.detail = said + detail;
    // A page still settling (an error page loading) can give a result
    // without an image: try again a few times.
    let img;
    for (let i = 0; i < 4 && !img; i++) {
      if (i > 0) await new Promise(r => setTimeout(r, 500));
      try {
        const s = await client.callTool({name: 'browser_take_screenshot', arguments: {type: 'png'}}, undefined, {timeout: 60000});
        img = (s.content || []).find(c => c.type === 'image');
      } catch (e) { if (i === 3) throw e; }
    }
    rep.shot = '';
    if (img) { rep.shot = path.join(dir, step.id + '.png'); fs.writeFileSync(rep.shot, Buffer.from(img.data, 'base64')); }
    rep.end = new Date().toISOString();
    console.log(JSON.stringify(rep));
  }
  await client.close();
})().catch(e => { console.error('mcp agent: ' + e.stack); process.exit(3); });
`
