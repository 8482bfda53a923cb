//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// BenchmarkPlaywrightPageLoad: page load with and without nsgate for the
// Playwright stack, side by side in one run (docs/performance.md, "Page
// load: Playwright"). A page of app.test pulls 20 subresources from four
// other names (6 images each from img1, img2 and img3.cdn.test, 2 scripts
// from js.assets.test), all served by the sealed internet. Two Playwright
// drivers run at once, each with its Chromium launched once: one directly
// in the sealed namespace (its names mapped by Chromium's
// --host-resolver-rules, since the namespace has no resolver), one as the
// worker of `nsgate run --profile playwright` (names answered by nsgate).
// Each load is a fresh browser context (empty cache), timed from goto to
// the load event; the two sides take turns, alternating who goes first.
// It reports p50 and p90 per side and their ratio; it asserts no time,
// only that every load got all 20 subresources. Not run by CI (a
// benchmark): `make bench-pageload`.

const (
	benchPagePath = "/bench/page"
	benchLoads    = 20
	benchWarmup   = 2
)

// benchPages serves the benchmark's page and script (from sitePages).
func benchPages(u *url.URL) (string, bool) {
	switch u.Path {
	case benchPagePath:
		var b strings.Builder
		b.WriteString(`<!doctype html><html><head><title>pageload</title><script>window.__ok = 0;</script></head><body><p>pageload</p>`)
		n := 0
		for _, h := range internet.SiteCDNNames {
			for i := 0; i < 6; i++ {
				n++
				fmt.Fprintf(&b, `<img src="http://%s:8080/learn/img.svg?n=%d" onload="window.__ok++">`, h, n)
			}
		}
		for i := 0; i < 2; i++ {
			n++
			fmt.Fprintf(&b, `<script src="http://%s:8080/bench/s.js?n=%d"></script>`, internet.SiteAssetsName, n)
		}
		b.WriteString(`</body></html>`)
		return b.String(), true
	case "/bench/s.js":
		return `window.__ok++;`, true
	}
	return "", false
}

const benchSubresources = 20

const benchPolicy = `version: 1
allow:
  - host: app.test
    ports: [8080]
  - host: "*.cdn.test"
    ports: [8080]
  - host: js.assets.test
    ports: [8080]
dns:
  hosts:
    app.test: [203.0.113.10]
    img1.cdn.test: [203.0.113.31]
    img2.cdn.test: [203.0.113.31]
    img3.cdn.test: [203.0.113.31]
    js.assets.test: [203.0.113.32]
`

const benchDriver = `
const { chromium } = require('` + nodeModules + `/playwright-core');
const readline = require('readline');
const [url, ...args] = process.argv.slice(2);
(async () => {
  const b = await chromium.launch({ executablePath: '/usr/lib/chromium/chromium', args });
  console.log('READY');
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const ctx = await b.newContext();
    const p = await ctx.newPage();
    let ok = 0, err = '';
    const t0 = process.hrtime.bigint();
    try {
      await p.goto(url + '?i=' + line, { waitUntil: 'load', timeout: 30000 });
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      ok = await p.evaluate(() => window.__ok);
      console.log('LOAD ' + line + ' ' + ms.toFixed(1) + ' ' + ok);
    } catch (e) { console.log('ERROR ' + line + ' ' + JSON.stringify(e.message.split('\n')[0])); }
    await ctx.close();
  }
  await b.close();
})().catch(e => { console.log('FAILED ' + e.message); process.exit(1); });
`

type benchSide struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	times []float64
}

func (s *benchSide) start(b *testing.B) {
	b.Helper()
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	o, err := s.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if s.cmd.Stderr == nil {
		s.cmd.Stderr = os.Stderr
	}
	if err := s.cmd.Start(); err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	s.out = bufio.NewScanner(o)
	if l := s.line(b); l != "READY" {
		b.Fatalf("%s: want READY, got %q", s.name, l)
	}
}

// line reads the driver's next line, giving up after a minute.
func (s *benchSide) line(b *testing.B) string {
	b.Helper()
	c := make(chan string, 1)
	go func() {
		if s.out.Scan() {
			c <- s.out.Text()
		}
		close(c)
	}()
	select {
	case l, ok := <-c:
		if !ok {
			b.Fatalf("%s: the driver exited", s.name)
		}
		return l
	case <-time.After(time.Minute):
		b.Fatalf("%s: no answer in a minute", s.name)
	}
	return ""
}

// load asks for one load and returns its time in ms.
func (s *benchSide) load(b *testing.B, i int) float64 {
	b.Helper()
	fmt.Fprintf(s.in, "%d\n", i)
	l := s.line(b)
	f := strings.Fields(l)
	if len(f) != 4 || f[0] != "LOAD" || f[3] != strconv.Itoa(benchSubresources) {
		b.Fatalf("%s: load %d: %q (want all %d subresources)", s.name, i, l, benchSubresources)
	}
	ms, err := strconv.ParseFloat(f[2], 64)
	if err != nil {
		b.Fatal(err)
	}
	return ms
}

func (s *benchSide) stop() {
	if s.in != nil {
		s.in.Close()
	}
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	// nearest rank
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func BenchmarkPlaywrightPageLoad(b *testing.B) {
	if sealErr != nil || inet == nil {
		b.Fatalf("no sealed internet: %v", sealErr)
	}
	for _, p := range []string{"/usr/lib/chromium/chromium", "/usr/bin/node", nodeModules + "/playwright-core"} {
		if _, err := os.Stat(p); err != nil {
			b.Fatalf("needs %s (.ci/install): %v", p, err)
		}
	}
	dir, err := os.MkdirTemp("", "nsgate-pageload-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	js := filepath.Join(dir, "driver.js")
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(js, []byte(benchDriver), 0o644)
	os.WriteFile(pol, []byte(benchPolicy), 0o644)
	page := "http://" + internet.AppName + ":8080" + benchPagePath
	rules := "--host-resolver-rules=MAP app.test " + internet.AppV4 + ",MAP *.cdn.test " + internet.SiteCDNV4 + ",MAP js.assets.test " + internet.SiteAssetsV4
	direct := &benchSide{name: "direct", cmd: exec.Command("/usr/bin/node", js, page, rules)}
	direct.cmd.Env = append(os.Environ(), "HOME="+dir)
	gated := &benchSide{name: "nsgate", cmd: exec.Command(nsgateBin, "run", "--policy", pol, "--audit", filepath.Join(dir, "audit.jsonl"),
		"--profile", "playwright", "--ro", js, "--", "/usr/bin/node", js, page)}
	gated.cmd.Env = append(os.Environ(), "HOME=/tmp")
	// nsgate's live lines (a refused HTTPS-record query per name and load)
	// go to a file; its tail is printed at the end.
	errf, err := os.Create(filepath.Join(dir, "nsgate.stderr"))
	if err != nil {
		b.Fatal(err)
	}
	defer errf.Close()
	gated.cmd.Stderr = errf
	loadBefore := loadavg()
	for _, s := range []*benchSide{direct, gated} {
		s.start(b)
		defer s.stop()
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		direct.times, gated.times = nil, nil
		for i := 0; i < benchWarmup+benchLoads; i++ {
			order := []*benchSide{direct, gated}
			if i%2 == 1 {
				order = []*benchSide{gated, direct}
			}
			for _, s := range order {
				ms := s.load(b, i)
				if i >= benchWarmup {
					s.times = append(s.times, ms)
				}
			}
		}
	}
	b.StopTimer()
	fmt.Printf("pageload: %s, %d subresources from %d names besides app.test, %d loads per side after %d warm-up, interleaved\n",
		page, benchSubresources, len(internet.SiteCDNNames)+1, benchLoads, benchWarmup)
	fmt.Printf("%-8s %8s %8s %8s %8s\n", "side", "p50_ms", "p90_ms", "min_ms", "max_ms")
	for _, s := range []*benchSide{direct, gated} {
		fmt.Printf("%-8s %8.1f %8.1f %8.1f %8.1f\n", s.name, quantile(s.times, .5), quantile(s.times, .9), slices.Min(s.times), slices.Max(s.times))
	}
	fmt.Printf("ratio nsgate/direct: p50 %.2f, p90 %.2f\n", quantile(gated.times, .5)/quantile(direct.times, .5), quantile(gated.times, .9)/quantile(direct.times, .9))
	fmt.Printf("raw direct ms: %v\nraw nsgate ms: %v\n", direct.times, gated.times)
	fmt.Printf("load average (/proc/loadavg) before: %s, after: %s\n", loadBefore, loadavg())
	if e, err := os.ReadFile(errf.Name()); err == nil {
		lines := strings.Split(strings.TrimSpace(string(e)), "\n")
		fmt.Printf("nsgate's stderr: %d lines, the last 5:\n  %s\n", len(lines), strings.Join(lines[max(0, len(lines)-5):], "\n  "))
	}
	b.ReportMetric(quantile(direct.times, .5), "direct-p50-ms")
	b.ReportMetric(quantile(gated.times, .5), "nsgate-p50-ms")
	b.ReportMetric(quantile(gated.times, .5)/quantile(direct.times, .5), "p50-ratio")
}
