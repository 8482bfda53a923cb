package learn

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// learnedFlow is a flow the learning step allowed.
func learnedFlow(proto, host, dst string) audit.Flow {
	return audit.Flow{Action: "allow", Proto: proto, Src: "10.0.2.100:40000", Dst: dst, Host: host, Rule: policy.RuleLearn}
}

// patterns returns the destinations of res's rules.
func patterns(res Result) []string {
	var out []string
	for _, r := range res.Rules {
		p := r.Spec.Host
		if p == "" {
			p = r.Spec.CIDR.String()
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func TestWildcardGrouping(t *testing.T) {
	for _, tc := range []struct {
		why   string
		names []string
		want  []string
	}{
		{"three siblings under one parent make a wildcard",
			[]string{"img1.cdn.test", "img2.cdn.test", "img3.cdn.test"}, []string{"*.cdn.test"}},
		{"two siblings stay exact",
			[]string{"a.two.test", "b.two.test"}, []string{"a.two.test", "b.two.test"}},
		{"the parent itself is no sibling: it keeps its own rule (a wildcard does not cover it)",
			[]string{"cdn.test", "a.cdn.test", "b.cdn.test", "c.cdn.test"}, []string{"cdn.test", "*.cdn.test"}},
		{"a deeper name under a wildcard's parent folds into it",
			[]string{"a.cdn.test", "b.cdn.test", "c.cdn.test", "x.y.cdn.test"}, []string{"*.cdn.test"}},
		{"siblings under a public suffix (an unlisted top-level label) stay exact",
			[]string{"a.test", "b.test", "c.test"}, []string{"a.test", "b.test", "c.test"}},
		{"siblings under a listed public suffix stay exact",
			[]string{"a.co.uk", "b.co.uk", "c.co.uk"}, []string{"a.co.uk", "b.co.uk", "c.co.uk"}},
		{"siblings under a private public suffix (different owners) stay exact",
			[]string{"a.github.io", "b.github.io", "c.github.io"}, []string{"a.github.io", "b.github.io", "c.github.io"}},
		{"no wildcard over a parent that holds a public suffix among the names seen (found in attack review: *.amazonaws.com would allow anyone's bucket under s3.amazonaws.com)",
			[]string{"s3.amazonaws.com", "sts.amazonaws.com", "iam.amazonaws.com"}, []string{"iam.amazonaws.com", "s3.amazonaws.com", "sts.amazonaws.com"}},
		{"a deeper group gets its own wildcard when its parent's does not qualify",
			[]string{"a.x.site.test", "b.x.site.test", "c.x.site.test", "www.site.test"}, []string{"www.site.test", "*.x.site.test"}},
		{"a broader wildcard covers a narrower one",
			[]string{"a.x.site.test", "b.x.site.test", "c.x.site.test", "p.site.test", "q.site.test", "r.site.test"}, []string{"*.site.test"}},
	} {
		c := NewCollector(Learned)
		for _, n := range tc.names {
			c.Observe(learnedFlow("tcp", n, "198.18.0.5:443"))
		}
		if got := patterns(c.Result(nil)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v -> %v, want %v", tc.why, tc.names, got, tc.want)
		}
	}
}

func TestPortsAndProtos(t *testing.T) {
	c := NewCollector(Learned)
	for _, p := range []string{"80", "443", "8080", "8081", "8082", "8080"} {
		c.Observe(learnedFlow("tcp", "app.test", "198.18.0.5:"+p))
	}
	c.Observe(learnedFlow("udp", "app.test", "198.18.0.5:443"))
	c.Observe(learnedFlow("udp", "app.test", "198.18.0.5:3478"))
	c.Observe(learnedFlow("tcp", "", "203.0.113.9:81"))
	c.Observe(learnedFlow("tcp", "", "[2001:db8::7]:443"))
	c.Observe(learnedFlow("tcp", "", "[::ffff:198.51.100.7]:443"))
	res := c.Result(nil)
	var got []string
	for _, r := range res.Rules {
		got = append(got, r.Spec.YAML())
	}
	want := []string{
		`{host: "app.test", proto: tcp, ports: [80, "8080-8082"]}`,
		`{host: "app.test", proto: udp, ports: [3478]}`,
		`{host: "app.test", proto: any, ports: [443]}`,
		`{cidr: "198.51.100.7/32", proto: tcp, ports: [443]}`,
		`{cidr: "203.0.113.9/32", proto: tcp, ports: [81]}`,
		`{cidr: "2001:db8::7/128", proto: tcp, ports: [443]}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if res.Hosts != 1 || res.Addrs != 3 {
		t.Errorf("hosts %d, addrs %d; want 1 and 3", res.Hosts, res.Addrs)
	}
}

// TestLearnedPolicy: the file parses, round-trips through Summary, keeps
// the starting policy, allows every flow that was learned, says what it
// did not learn, and never names the built-in sets' addresses.
func TestLearnedPolicy(t *testing.T) {
	base, err := policy.Parse("base.yaml", []byte(`version: 1
allow:
  - host: app.test
    ports: [8080]
deny:
  - host: ads.test
dns:
  upstream: ["127.0.0.53:53"]
  hosts:
    static.test: [203.0.113.14]
http: {verify_host: false}
exec: {allow: [/usr/lib/chromium/]}
filesystem: {write: [/tmp/work], hide: ["~/.aws"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := NewCollector(Learned)
	flows := []audit.Flow{
		learnedFlow("tcp", "img1.cdn.test", "198.18.0.6:8080"),
		learnedFlow("tcp", "img2.cdn.test", "198.18.0.7:8080"),
		learnedFlow("tcp", "img3.cdn.test", "198.18.0.8:8443"),
		learnedFlow("tcp", "js.assets.test", "198.18.0.9:8080"),
		learnedFlow("udp", "", "198.51.100.20:3478"),
	}
	for _, f := range flows {
		c.Observe(f)
		c.Observe(&f) // pointers count too
	}
	// Kept, not learned: the base allowed it.
	c.Observe(audit.Flow{Action: "allow", Proto: "tcp", Dst: "198.18.0.5:8080", Host: "app.test", Rule: "allow[0]"})
	// Refused by the built-in sets and the deny rule: counted, never named.
	c.Observe(audit.Flow{Action: "deny", Proto: "tcp", Dst: "169.254.169.254:80", Rule: policy.RuleMetadata, Reason: "169.254.169.254 is a cloud metadata address"})
	c.Observe(audit.Flow{Action: "deny", Proto: "tcp", Dst: "198.18.0.10:8080", Host: "private.ok.test", Rule: policy.RuleSpecialRange, Refused: []string{"10.1.2.3"}})
	c.Observe(audit.DNS{Action: "allow", QName: "private.ok.test", QType: "A", Rule: policy.RuleLearn})
	c.Observe(audit.DNS{Action: "deny", QName: "metadata.google.internal", QType: "A", Rule: policy.RuleMetadata})
	c.Observe(audit.Flow{Action: "deny", Proto: "tcp", Dst: "198.18.0.11:443", Host: "ads.test", Rule: "deny[0]"})
	// Answered, never connected to.
	c.Observe(audit.DNS{Action: "allow", QName: "lookup-only.test", QType: "A", Rule: policy.RuleLearn})
	// Allowed but failed upstream.
	c.Observe(audit.Flow{Action: "deny", Proto: "tcp", Dst: "198.18.0.12:443", Host: "gone.test", Rule: policy.RuleLearn, Reason: "resolve: no such host\nsecond line"})
	c.Observe(audit.L7{Action: "deny", Host: "js.assets.test", SNI: "other.test"})
	c.Observe(audit.Exec{Action: "deny", Path: "/usr/bin/git", PID: 7, Reason: "/usr/bin/git" + audit.ExecNotListed})
	c.Observe(audit.Exec{Action: "deny", Path: "/usr/local/bin/git", PID: 7, Missing: true})
	c.Observe(audit.Exec{Action: "allow", Path: "/usr/lib/chromium/chromium", PID: 8})

	res := c.Result(nil)
	out, err := LearnedPolicy(res, Run{
		Argv: []string{"chromium", "--dump-dom", "http://app.test:8080/", "a b"}, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Base: base, BasePath: "base.yaml", ExecAllow: []string{"/usr/lib/chromium/chrome_crashpad_handler"},
	})
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	t.Logf("learned:\n%s", text)
	p, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatalf("the learned file does not parse: %v", err)
	}
	// Round trip: the normalized form parses to the same normalized form.
	q, err := policy.Parse("summary", []byte(p.Summary()))
	if err != nil || q.Summary() != p.Summary() {
		t.Errorf("Summary does not round-trip: %v", err)
	}
	for _, f := range flows {
		ap := netip.MustParseAddrPort(f.Dst)
		fl := policy.Flow{Proto: policy.TCP, Host: f.Host, Port: ap.Port()}
		if f.Proto == "udp" {
			fl.Proto = policy.UDP
		}
		if f.Host == "" {
			fl.Addr = ap.Addr()
		}
		if d := p.Decide(fl); d.Verdict != policy.Allow {
			t.Errorf("learned policy refuses a learned flow %+v: %v", fl, d)
		}
	}
	for _, tc := range []struct {
		f    policy.Flow
		want string
	}{
		{policy.Flow{Proto: policy.TCP, Host: "app.test", Port: 8080}, "allow[0]"},
		{policy.Flow{Proto: policy.TCP, Host: "ads.test", Port: 443}, "deny[0]"},
		{policy.Flow{Proto: policy.TCP, Host: "img1.cdn.test", Port: 22}, policy.RuleDefault},
		{policy.Flow{Proto: policy.TCP, Host: "lookup-only.test", Port: 443}, policy.RuleDefault},
		{policy.Flow{Proto: policy.TCP, Host: "gone.test", Port: 443}, policy.RuleDefault},
		{policy.Flow{Proto: policy.TCP, Addr: netip.MustParseAddr("198.51.100.20"), Port: 3478}, policy.RuleDefault},
	} {
		if d := p.Decide(tc.f); d.Rule != tc.want {
			t.Errorf("learned policy: %+v -> %v, want rule %s", tc.f, d, tc.want)
		}
	}
	if got := p.ExecAllow(); !slices.Equal(got, []string{"/usr/lib/chromium/", "/usr/lib/chromium/chrome_crashpad_handler"}) {
		t.Errorf("exec.allow %v: want the starting policy's and --exec-allow", got)
	}
	if ups := p.Upstreams(); !slices.Equal(ups, []string{"127.0.0.53:53"}) {
		t.Errorf("dns.upstream %v not kept", ups)
	}
	if a, ok := p.StaticHosts("static.test"); !ok || len(a) != 1 {
		t.Errorf("dns.hosts not kept")
	}
	if p.VerifyHost() || !p.VerifySNI() {
		t.Errorf("tls/http settings not kept")
	}
	if w, h := p.FilesystemPaths(); len(w) != 1 || len(h) != 1 {
		t.Errorf("filesystem not kept: %v %v", w, h)
	}
	for _, want := range []string{
		"# command: chromium --dump-dom http://app.test:8080/ \"a b\"\n",
		"# date: 2026-01-02T03:04:05Z",
		"starting policy: base.yaml (sha256 " + base.SHA256(),
		"    # refused during learning (the worker did not run them); uncomment to allow:",
		`    # - "/usr/bin/git"  # refused 1 time`,
		`{host: "*.cdn.test", proto: tcp, ports: [8080, 8443]}  # 3 names seen: img1.cdn.test, img2.cdn.test, img3.cdn.test; 6 flows`,
		`{host: "js.assets.test", proto: tcp, ports: [8080]}`,
		`{cidr: "198.51.100.20/32", proto: udp, ports: [3478]}`,
		"not learned: 3 refused by the cloud-metadata set",
		"1 by the TLS SNI",
		"they now get NXDOMAIN): lookup-only.test",
		`#   tcp gone.test:443: resolve: no such host\nsecond line`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("learned file lacks %q", want)
		}
	}
	for _, never := range []string{"169.254", "metadata.google", "private.ok.test", "10.1.2.3", "/usr/local/bin/git"} {
		if strings.Contains(text, never) {
			t.Errorf("learned file names %q (refused by the built-in sets, or a missing file)", never)
		}
	}
}

// TestLearnedEmpty: a run that used nothing writes a valid deny-all file.
func TestLearnedEmpty(t *testing.T) {
	out, err := LearnedPolicy(NewCollector(Learned).Result(nil), Run{Argv: []string{"true"}, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("empty", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if d := p.Decide(policy.Flow{Proto: policy.TCP, Host: "x.test", Port: 1}); d.Verdict != policy.Deny {
		t.Errorf("empty learned policy allows: %v", d)
	}
	// Only refused programs: exec stays commented out.
	c := NewCollector(Learned)
	c.Observe(audit.Exec{Action: "deny", Path: "/bin/sh", Reason: "/bin/sh" + audit.ExecNotListed})
	out, err = LearnedPolicy(c.Result(nil), Run{Argv: []string{"x"}, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := policy.Parse("x", out); err != nil || len(p.ExecAllow()) != 0 {
		t.Errorf("refused programs became exec.allow entries (%v): %s", err, out)
	}
}

// TestObserveConcurrent runs Observe from many goroutines (go test -race).
func TestObserveConcurrent(t *testing.T) {
	c := NewCollector(Learned)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				c.Observe(learnedFlow("tcp", fmt.Sprintf("h%d.site%d.test", i%5, g), fmt.Sprintf("198.18.0.1:%d", 1000+i%3)))
				c.Observe(audit.DNS{Action: "allow", QName: "x.test", Rule: policy.RuleLearn})
			}
		}()
	}
	wg.Wait()
	res := c.Result(nil)
	if res.Flows != 1600 || res.Wildcards != 8 {
		t.Errorf("flows %d wildcards %d, want 1600 and 8", res.Flows, res.Wildcards)
	}
}

// TestBounded: a worker cannot make the collector grow past its bound.
func TestBounded(t *testing.T) {
	c := NewCollector(Learned)
	for i := range maxDests + 10 {
		c.Observe(learnedFlow("tcp", fmt.Sprintf("h%d.x%d.test", i, i), "198.18.0.1:443"))
	}
	res := c.Result(nil)
	if res.Dropped != 10 || res.Hosts != maxDests {
		t.Errorf("dropped %d hosts %d", res.Dropped, res.Hosts)
	}
	if _, err := LearnedPolicy(res, Run{Time: time.Now()}); err == nil || !strings.Contains(err.Error(), "more than a policy may hold") {
		t.Errorf("a file past the rule bound: err %v", err)
	}
}

// logOf writes events as an audit log and returns its path.
func logOf(t *testing.T, evs ...audit.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		l.Log(ev)
	}
	if _, err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// deniedFlow is a flow no rule allowed.
func deniedFlow(proto, host, dst, rule string) audit.Flow {
	return audit.Flow{Action: "deny", Proto: proto, Src: "10.0.2.100:40000", Dst: dst, Host: host, Rule: rule, Reason: "r"}
}

func suggestLog(t *testing.T) string {
	return logOf(t,
		audit.Start{Version: "test"},
		deniedFlow("tcp", "", "203.0.113.9:81", policy.RuleDefault),
		deniedFlow("tcp", "", "203.0.113.9:81", policy.RuleDefault), // folded by the log
		deniedFlow("tcp", "app.test", "198.18.0.5:9090", policy.RuleDefault),
		deniedFlow("udp", "app.test", "198.18.0.5:443", policy.RuleDefault),
		deniedFlow("tcp", "", "169.254.169.254:80", policy.RuleMetadata),
		deniedFlow("tcp", "", "10.1.2.3:8080", policy.RuleSpecialRange),
		deniedFlow("tcp", "ads.test", "198.18.0.6:443", "deny[0]"),
		deniedFlow("tcp", "slow.test", "198.18.0.7:443", "allow[3]"), // allowed, dial failed
		audit.DNS{Action: "deny", QName: "new.test", QType: "A", Rule: policy.RuleDefault},
		audit.DNS{Action: "deny", QName: "metadata.google.internal", QType: "A", Rule: policy.RuleMetadata},
		audit.DNS{Action: "deny", Rule: "builtin:dns-malformed"},
		audit.DNS{Action: "deny", QName: "zone.evil.test", QType: "SOA", Rule: "builtin:dns-opcode"},
		audit.L7{Action: "deny", FlowSeq: 2, Host: "app.test", SNI: "evil.test", Reason: "sni mismatch"},
		audit.Exec{Action: "deny", Path: "/usr/bin/git", PID: 3, Reason: "/usr/bin/git" + audit.ExecNotListed},
		audit.Exec{Action: "deny", Path: "/usr/local/sbin/git", PID: 3, Missing: true},
		audit.Exit{Code: 0},
	)
}

func TestSuggestWithoutPolicy(t *testing.T) {
	log := suggestLog(t)
	var out, errb bytes.Buffer
	if code := PolicyMain([]string{"suggest", log}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	t.Logf("suggestion:\n%s", text)
	p, err := policy.Parse("suggestion", out.Bytes())
	if err != nil {
		t.Fatalf("the suggestion is not a policy: %v", err)
	}
	for _, f := range []policy.Flow{
		{Proto: policy.TCP, Addr: netip.MustParseAddr("203.0.113.9"), Port: 81},
		{Proto: policy.TCP, Host: "app.test", Port: 9090},
		{Proto: policy.UDP, Host: "app.test", Port: 443},
	} {
		if d := p.Decide(f); d.Verdict != policy.Allow {
			t.Errorf("suggestion does not allow %+v: %v", f, d)
		}
	}
	if d := p.NameAllowed("new.test"); d.Verdict != policy.Allow {
		t.Errorf("suggestion does not let new.test resolve: %v", d)
	}
	for _, f := range []policy.Flow{
		{Proto: policy.TCP, Host: "ads.test", Port: 443},
		{Proto: policy.TCP, Host: "slow.test", Port: 443},
		{Proto: policy.TCP, Host: "evil.test", Port: 443},
		{Proto: policy.TCP, Host: "zone.evil.test", Port: 53},
	} {
		if d := p.Decide(f); d.Verdict != policy.Deny {
			t.Errorf("suggestion allows %+v, which was no missing rule: %v", f, d)
		}
	}
	if !slices.Equal(p.ExecAllow(), []string{"/usr/bin/git"}) {
		t.Errorf("exec.allow %v, want /usr/bin/git only (a missing file is no refusal)", p.ExecAllow())
	}
	for _, want := range []string{
		`{cidr: "203.0.113.9/32", proto: tcp, ports: [81]}  # 2 flows refused`,
		"skipped, no rule opens them: 5 refusals by the built-in sets",
		"tcp 169.254.169.254:80 (builtin:metadata)",
		"a DNS message without a readable question (builtin:dns-malformed)",
		"name zone.evil.test (builtin:dns-opcode)",
		"skipped: 1 refusal by deny rules",
		"not turned into rules: 1 refusal by the TLS SNI or HTTP Host check",
		"not a missing rule",
		"1 flow the policy allowed that failed afterwards",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("suggestion lacks %q", want)
		}
	}
}

func TestSuggestAgainstPolicy(t *testing.T) {
	log := suggestLog(t)
	cur := filepath.Join(t.TempDir(), "current.yaml")
	os.WriteFile(cur, []byte(`version: 1
allow:
  - host: app.test
    ports: [9090]
exec: {allow: [/usr/bin/]}
`), 0o644)
	var out, errb bytes.Buffer
	if code := PolicyMain([]string{"suggest", "--policy", cur, log}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	t.Logf("diff:\n%s", text)
	var plus []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
			plus = append(plus, l)
		}
	}
	want := []string{
		`+  - {host: "app.test", proto: udp, ports: [443]}  # 1 flow refused`,
		`+  - {cidr: "203.0.113.9/32", proto: tcp, ports: [81]}  # 2 flows refused`,
		`+  - {host: "new.test", proto: tcp}  # only its DNS query was seen (refused), so the ports are unknown: narrow them`,
	}
	if !slices.Equal(plus, want) {
		t.Errorf("+ lines:\n%s\nwant:\n%s", strings.Join(plus, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(text, "--- "+cur+"\n+++ "+cur+" with the suggested rules\n") || !strings.Contains(text, "\n   - {host: \"app.test\", proto: tcp, ports: [9090]}\n") {
		t.Errorf("no diff header or context lines")
	}
	// The same log suggested against the suggestion: nothing left.
	full := filepath.Join(t.TempDir(), "full.yaml")
	out.Reset()
	PolicyMain([]string{"suggest", log}, &out, &errb)
	os.WriteFile(full, out.Bytes(), 0o644)
	out.Reset()
	if code := PolicyMain([]string{"suggest", log, "--policy", full}, &out, &errb); code != 0 || !strings.Contains(out.String(), "# nothing to suggest") {
		t.Errorf("suggest against its own suggestion: exit %d\n%s", code, out.String())
	}
}

func TestSuggestBadInput(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.jsonl")
	log := suggestLog(t)
	good, _ := os.ReadFile(log)
	lines := bytes.SplitAfter(good, []byte("\n"))
	os.WriteFile(broken, append(append(lines[0], lines[1][:20]...), '\n'), 0o644)
	notLog := filepath.Join(dir, "policy.yaml")
	os.WriteFile(notLog, []byte("version: 1\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	badPol := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badPol, []byte("version: 2\n"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"suggest", broken}, 2, "broken.jsonl:2: "},
		{[]string{"suggest", "--unverified", broken}, 2, "audit line 2"},
		{[]string{"suggest", notLog}, 2, "policy.yaml:1: "},
		{[]string{"suggest", "--head", "nothex", log}, 2, "--head"},
		{[]string{"suggest", "--key", filepath.Join(dir, "missing.key"), log}, 2, "--key"},
		{[]string{"suggest", empty}, 2, "has no audit records"},
		{[]string{"suggest", filepath.Join(dir, "missing.jsonl")}, 2, "no such file"},
		{[]string{"suggest", dir}, 2, "not a regular file"},
		{[]string{"suggest", log, "--policy", badPol}, 2, "--policy"},
		{[]string{"suggest"}, 2, "want one audit log"},
		{[]string{"suggest", log, log}, 2, "want one audit log"},
		{[]string{"suggest", "--polcy", "x", log}, 2, "did you mean --policy"},
		{[]string{"frobnicate"}, 2, "want a subcommand"},
		{[]string{}, 2, "want a subcommand"},
		{[]string{"--help"}, 0, ""},
		{[]string{"suggest", "--help"}, 0, ""},
	} {
		var out, errb bytes.Buffer
		code := PolicyMain(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
		if code != 0 && !slices.Contains(tc.args, "--unverified") && strings.Count(strings.TrimSpace(errb.String()), "\n") > 0 {
			t.Errorf("%v: more than one line on stderr: %q", tc.args, errb.String())
		}
	}
}

func TestOpenOutput(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenOutput(filepath.Join(dir, "no", "such", "dir", "out.yaml")); err == nil || !strings.Contains(err.Error(), "--learn") {
		t.Errorf("a missing directory: %v", err)
	}
	if _, err := OpenOutput(dir); err == nil || !strings.Contains(err.Error(), "--learn") {
		t.Errorf("a directory: %v", err)
	}
	out := filepath.Join(dir, "out.yaml")
	os.WriteFile(out, []byte("keep me until the end\n"), 0o644)
	f, err := OpenOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "keep me until the end\n" {
		t.Errorf("OpenOutput truncated the file at start")
	}
	if err := WriteFile(f, []byte("version: 1\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(out); string(b) != "version: 1\n" {
		t.Errorf("file after WriteFile: %q", b)
	}
}

// TestSuggestReadsOnlyVerified: a log `audit verify` rejects (a record
// edited after it was written) is refused, one line naming why; with
// --unverified it is read, and both stderr and the output say loudly
// that it could not be verified.
func TestSuggestReadsOnlyVerified(t *testing.T) {
	log := suggestLog(t)
	data, _ := os.ReadFile(log)
	forged := bytes.Replace(data, []byte(`"dst":"203.0.113.9:81"`), []byte(`"dst":"198.51.100.77:81"`), 1)
	if bytes.Equal(forged, data) {
		t.Fatal("the log has no record to forge")
	}
	if err := os.WriteFile(log, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := PolicyMain([]string{"suggest", log}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "does not verify") || !strings.Contains(errb.String(), "--unverified") || out.Len() != 0 {
		t.Errorf("a forged log: exit %d, stdout %q, stderr %q; want a refusal naming --unverified and no output", code, out.String(), errb.String())
	}
	if strings.Count(strings.TrimSpace(errb.String()), "\n") > 0 {
		t.Errorf("more than one line on stderr: %q", errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := PolicyMain([]string{"suggest", "--unverified", log}, &out, &errb); code != 0 {
		t.Fatalf("--unverified: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "WARNING") || !strings.Contains(errb.String(), "NOT verified") {
		t.Errorf("--unverified: stderr %q does not warn that the log was not verified", errb.String())
	}
	if !strings.HasPrefix(out.String(), "# WARNING: UNVERIFIED INPUT") {
		t.Errorf("--unverified: the output does not start with the warning:\n%s", out.String())
	}
	// A log that verifies carries no such warning.
	out.Reset()
	errb.Reset()
	if code := PolicyMain([]string{"suggest", suggestLog(t)}, &out, &errb); code != 0 || strings.Contains(out.String()+errb.String(), "UNVERIFIED") {
		t.Errorf("a good log: exit %d, output warns of no verification:\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestSuggestRedecidesBuiltins: a denial recorded as rule default is
// decided again under the built-in sets; one they refuse (a forged or
// hand-edited record: nsgate itself records those as builtin:*) becomes no
// rule, and a warning names it. A host rule for a name whose dns.hosts
// entry in the current policy lies in a special range is proposed with a
// warning naming the address.
func TestSuggestRedecidesBuiltins(t *testing.T) {
	log := logOf(t,
		audit.Start{Version: "test"},
		deniedFlow("tcp", "", "127.0.0.1:22", policy.RuleDefault),
		deniedFlow("tcp", "", "10.0.0.5:6379", policy.RuleDefault),
		deniedFlow("udp", "", "[fd00::5]:53", policy.RuleDefault),
		deniedFlow("tcp", "", "169.254.169.254:80", policy.RuleDefault),
		deniedFlow("tcp", "", "[::ffff:169.254.169.254]:80", policy.RuleDefault),
		deniedFlow("tcp", "metadata.google.internal", "198.18.0.9:80", policy.RuleDefault),
		audit.DNS{Action: "deny", QName: "metadata.google.internal", QType: "A", Rule: policy.RuleDefault},
		deniedFlow("tcp", "", "203.0.113.9:81", policy.RuleDefault),
		deniedFlow("tcp", "lan.test", "198.18.0.5:6379", policy.RuleDefault),
		audit.Exit{Code: 0},
	)
	var out, errb bytes.Buffer
	if code := PolicyMain([]string{"suggest", log}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	t.Logf("suggestion:\n%s\nstderr:\n%s", text, errb.String())
	p, err := policy.Parse("suggestion", out.Bytes())
	if err != nil {
		t.Fatalf("the suggestion is not a policy: %v", err)
	}
	for _, f := range []policy.Flow{
		{Proto: policy.TCP, Addr: netip.MustParseAddr("127.0.0.1"), Port: 22},
		{Proto: policy.TCP, Addr: netip.MustParseAddr("10.0.0.5"), Port: 6379},
		{Proto: policy.UDP, Addr: netip.MustParseAddr("fd00::5"), Port: 53},
		{Proto: policy.TCP, Addr: netip.MustParseAddr("169.254.169.254"), Port: 80},
	} {
		if d := p.Decide(f); d.Verdict == policy.Allow {
			t.Errorf("the suggestion allows %+v: %v", f, d)
		}
	}
	for _, never := range []string{"127.0.0.1/32", "10.0.0.5/32", "fd00::5/128", "169.254.169.254/32", "\"metadata.google.internal\""} {
		for _, l := range strings.Split(text, "\n") {
			if !strings.HasPrefix(l, "#") && strings.Contains(l, never) {
				t.Errorf("the suggestion proposes %q: %s", never, l)
			}
		}
	}
	for _, want := range []string{"127.0.0.1:22", "10.0.0.5:6379", "[fd00::5]:53", "169.254.169.254:80", "metadata.google.internal"} {
		if !strings.Contains(text, want) || !strings.Contains(errb.String(), want) {
			t.Errorf("no warning names %s (in the output and on stderr)", want)
		}
	}
	if !strings.Contains(text, "# WARNING") {
		t.Errorf("the output has no WARNING comment")
	}
	if d := p.Decide(policy.Flow{Proto: policy.TCP, Addr: netip.MustParseAddr("203.0.113.9"), Port: 81}); d.Verdict != policy.Allow {
		t.Errorf("the public denial is not suggested: %v", d)
	}

	// Against a policy whose dns.hosts points lan.test at a private address,
	// the rule for lan.test:6379 is proposed with a warning naming it.
	cur := filepath.Join(t.TempDir(), "current.yaml")
	os.WriteFile(cur, []byte("version: 1\ndns:\n  hosts:\n    lan.test: [10.5.5.5]\n"), 0o644)
	out.Reset()
	errb.Reset()
	if code := PolicyMain([]string{"suggest", "--policy", cur, log}, &out, &errb); code != 0 {
		t.Fatalf("--policy: exit %d: %s", code, errb.String())
	}
	t.Logf("diff:\n%s\nstderr:\n%s", out.String(), errb.String())
	if !strings.Contains(out.String(), `+  - {host: "lan.test", proto: tcp, ports: [6379]}`) {
		t.Errorf("lan.test:6379 not proposed")
	}
	for _, s := range []string{out.String(), errb.String()} {
		if !strings.Contains(s, "lan.test") || !strings.Contains(s, "10.5.5.5") || !strings.Contains(s, "dns.hosts") {
			t.Errorf("no warning names lan.test's dns.hosts address 10.5.5.5 in %q", s)
		}
	}
}
