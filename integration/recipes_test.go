//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The recipes of docs/agents.md, run as written. Each recipe is a fenced
// block whose info string is "LANG nsgate-recipe NAME". The test replaces
// only the placeholders below (recipePlaceholders: the policy, the audit
// log, the agent's files), the command `nsgate` by the binary under test,
// and nothing else; a placeholder left over fails the test.

const agentsDoc = "../docs/agents.md"

var recipeFence = regexp.MustCompile("(?ms)^```[a-z]+ nsgate-recipe ([a-z-]+)\n(.*?)^```")

// docRecipes returns the recipes of docs/agents.md by name.
func docRecipes(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(agentsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range recipeFence.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = m[2]
	}
	for _, n := range []string{"playwright", "playwright-mcp", "desktop"} {
		if out[n] == "" {
			t.Fatalf("%s has no recipe %q (a fenced block with the info string \"... nsgate-recipe %s\")", agentsDoc, n, n)
		}
	}
	return out
}

// substitute replaces the command nsgate and each placeholder word; it
// fails on a word that still looks like a placeholder.
func substitute(t *testing.T, words []string, ph map[string]string) []string {
	t.Helper()
	out := make([]string, len(words))
	for i, w := range words {
		if i == 0 && w == "nsgate" {
			w = nsgateBin
		} else if v, ok := ph[w]; ok {
			w = v
		}
		if strings.Contains(w, "/path/to/") || (i > 0 && w == "nsgate") {
			t.Fatalf("the recipe has a placeholder the test does not know: %q in %q", w, words)
		}
		out[i] = w
	}
	return out
}

// shellWords splits a one-command sh recipe: backslash-newline joins
// lines, words are separated by blanks. Quotes, variables and other shell
// syntax are refused: a recipe must be a plain command line.
func shellWords(t *testing.T, body string) []string {
	t.Helper()
	line := strings.TrimSpace(strings.ReplaceAll(body, "\\\n", " "))
	if strings.ContainsAny(line, "'\"$`;|&<>*\n") {
		t.Fatalf("the recipe is not one plain command line: %q", line)
	}
	return strings.Fields(line)
}

// TestDocRecipes runs each recipe of docs/agents.md as written, root and
// as an ordinary user, in the sealed internet.
func TestDocRecipes(t *testing.T) {
	needChromium(t)
	needStack(t, "the agent stacks", nodeModules+"/playwright-core", nodeModules+"/@playwright/mcp/cli.js",
		nodeModules+"/@modelcontextprotocol/sdk", "/usr/bin/node", "/usr/bin/Xvfb", "/usr/bin/xdotool", "/usr/bin/openbox",
		"/usr/bin/import", "/usr/local/lib/nsgate/noshell.so")
	recipes := docRecipes(t)
	forEachMode(t, func(t *testing.T, m mode) {
		t.Run("playwright", func(t *testing.T) { recipePlaywright(t, m, recipes["playwright"]) })
		t.Run("playwright-mcp", func(t *testing.T) { recipeMCP(t, m, recipes["playwright-mcp"]) })
		t.Run("desktop", func(t *testing.T) { recipeDesktop(t, m, recipes["desktop"]) })
	})
}

// argvPush makes a script take its arguments from its own first line: the
// recipes' command lines pass none.
func argvPush(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return "process.argv.push(" + strings.Join(q, ", ") + ");\n"
}

func recipePlaywright(t *testing.T, m mode, body string) {
	dir := workDir(t, m)
	pol := writeFile(t, dir, "policy.yaml", profilePolicy)
	js := writeFile(t, dir, "agent.js", argvPush(append([]string{"http://app.test:8080/"}, refusedURLs...)...)+profPlaywrightScript)
	log := filepath.Join(dir, "audit.jsonl")
	argv := substitute(t, shellWords(t, body), map[string]string{"policy.yaml": pol, "audit.jsonl": log, "/path/to/agent.js": js})
	t.Logf("recipe: %q", argv)
	before := hitsOf()
	r := runBounded(t, nsgateCmdAt(m, argv[0], argv[1:]...), 150*time.Second, "the Playwright recipe", nil)
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	checkPlaywrightAgent(t, r, log, before)
}

func recipeMCP(t *testing.T, m mode, body string) {
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatalf("the MCP client configuration in %s is not JSON: %v", agentsDoc, err)
	}
	srv, ok := cfg.MCPServers["playwright"]
	if !ok {
		t.Fatalf("the MCP configuration has no server \"playwright\"")
	}
	dir := workDir(t, m)
	pol := writeFile(t, dir, "policy.yaml", profilePolicy)
	client := writeFile(t, dir, "client.mjs", mcpClient)
	log := filepath.Join(dir, "audit.jsonl")
	argv := substitute(t, append([]string{srv.Command}, srv.Args...), map[string]string{"/etc/nsgate/agent.yaml": pol, "/var/log/nsgate/mcp.jsonl": log})
	t.Logf("server command: %q", argv)
	before := hitsOf()
	args := append(append([]string{client}, argv...), "--urls", "http://app.test:8080/")
	args = append(args, refusedURLs[:2]...)
	r := runBounded(t, nsgateCmdAt(m, "/usr/bin/node", args...), 180*time.Second, "the MCP client with the recipe's server", nil)
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	checkMCPAgent(t, r, log, before)
}

func recipeDesktop(t *testing.T, m mode, body string) {
	dir := workDir(t, m)
	pol := writeFile(t, dir, "policy.yaml", profilePolicy)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o777)
	shot := filepath.Join(out, "screen.png")
	who := "user"
	if m.uid < 0 {
		who = "root"
	}
	js := writeFile(t, dir, "desktop.js", argvPush("http://app.test:8080/", shot, who)+desktopAgent)
	log := filepath.Join(dir, "audit.jsonl")
	argv := substitute(t, shellWords(t, body), map[string]string{"policy.yaml": pol, "audit.jsonl": log, "/path/to/desktop.js": js, "/path/to/screenshots": out})
	t.Logf("recipe: %q", argv)
	app := targetAt("203.0.113.10:8080/tcp").count()
	r := runBounded(t, nsgateCmdAt(m, argv[0], argv[1:]...), 150*time.Second, "the desktop recipe", nil)
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
	if targetAt("203.0.113.10:8080/tcp").count() == app {
		t.Error("the app server never saw the browser")
	}
	checkNoShellRan(t, readAudit(t, log))
}
