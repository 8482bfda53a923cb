package judge

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
)

// mdCells splits a Markdown table row into its cells the way GitHub
// does: a backslash escapes the next character, every other | separates.
func mdCells(row string) []string {
	row = strings.TrimSpace(row)
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			cur.WriteByte(row[i])
			if i+1 < len(row) {
				i++
				cur.WriteByte(row[i])
			}
		case '|':
			cells = append(cells, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	cells = append(cells, cur.String())
	// A row starts and ends with |: drop the empty outer pieces.
	if len(cells) >= 2 && strings.TrimSpace(cells[0]) == "" && strings.TrimSpace(cells[len(cells)-1]) == "" {
		cells = cells[1 : len(cells)-1]
	}
	return cells
}

// mdTables returns the tables of md: each a list of rows (header first),
// each row its cells.
func mdTables(md string) [][][]string {
	var tables [][][]string
	var cur [][]string
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "|") {
			cur = append(cur, mdCells(line))
			continue
		}
		if cur != nil {
			tables = append(tables, cur)
			cur = nil
		}
	}
	if cur != nil {
		tables = append(tables, cur)
	}
	return tables
}

// checkTables fails t for a table whose rows do not all have as many
// cells as its header, or whose second row is not a delimiter row.
func checkTables(t *testing.T, md string) [][][]string {
	t.Helper()
	tables := mdTables(md)
	for i, tab := range tables {
		if len(tab) < 2 || strings.Trim(strings.Join(tab[1], ""), "-: ") != "" {
			t.Errorf("table %d has no delimiter row: %q", i, tab)
			continue
		}
		for j, row := range tab {
			if len(row) != len(tab[0]) {
				t.Errorf("table %d row %d has %d cells, the header %d: %q", i, j, len(row), len(tab[0]), row)
			}
		}
	}
	return tables
}

// attemptsTable is the table whose header starts with "attempt".
func attemptsTable(t *testing.T, tables [][][]string) [][]string {
	t.Helper()
	for _, tab := range tables {
		if strings.TrimSpace(tab[0][0]) == "attempt" {
			return tab
		}
	}
	t.Fatal("no attempts table")
	return nil
}

// column returns the index of the header cell named name.
func column(t *testing.T, tab [][]string, name string) int {
	t.Helper()
	for i, c := range tab[0] {
		if strings.TrimSpace(c) == name {
			return i
		}
	}
	t.Fatalf("no column %q in %q", name, tab[0])
	return -1
}

func TestSummarize(t *testing.T) {
	r := goodRun()
	r.obs[1].Observed = attack.Allowed   // meta got through
	r.obs[0].Observed = attack.Blocked   // the control failed
	r.recs = slices.Delete(r.recs, 4, 5) // name (dns) loses its deny record: blocked, but failed
	rep := judgeCanned(r)
	s := Summarize(rep.Results)
	want := Summary{Attempts: 6, Attacks: 5, Controls: 1, Passed: 3, Failed: 3, AttacksThrough: 1, ControlsFailed: 1, Categories: 5,
		AttacksBlocked: 4, AttacksFailed: 2, ControlsOK: 0}
	got := s
	got.ByCategory = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summary\n got %+v\nwant %+v", got, want)
	}
	byCat := map[string]CategoryCount{}
	for _, c := range s.ByCategory {
		byCat[c.Category] = c
	}
	for _, tc := range []struct {
		want CategoryCount
		why  string
	}{
		{CategoryCount{Category: "control", Controls: 1, ControlsFailed: 1}, "the control was blocked"},
		{CategoryCount{Category: "metadata", Attacks: 1, AttacksThrough: 1, AttacksFailed: 1}, "meta got through"},
		{CategoryCount{Category: "dns", Attacks: 2, AttacksBlocked: 2, AttacksFailed: 1}, "name lost its record: blocked, but failed"},
		{CategoryCount{Category: "local", Attacks: 1, AttacksBlocked: 1}, "lo needs no record"},
		{CategoryCount{Category: "ip-literal", Attacks: 1, AttacksBlocked: 1}, "meta2 has its record"},
	} {
		if got := byCat[tc.want.Category]; got != tc.want {
			t.Errorf("%s: %+v, want %+v (%s)", tc.want.Category, got, tc.want, tc.why)
		}
	}
	if s.ByCategory[0].Category != "control" || s.ByCategory[1].Category != "metadata" {
		t.Errorf("categories not in the results' order: %+v", s.ByCategory)
	}
}

// TestDecision: nsgate's rule and reason come from the audit record that
// refused the attempt, never from what the attacker saw.
func TestDecision(t *testing.T) {
	r := goodRun()
	r.recs[3] = rec(4, 30, `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:1001","dst":"169.254.169.254:80","rule":"builtin:metadata","reason":"169.254.169.254 is a cloud metadata address"`)
	for i := range r.obs {
		r.obs[i].Detail = "dial tcp: connection refused (the attacker's words)"
	}
	rep := judgeCanned(r)
	for _, tc := range []struct {
		id                  string
		seq                 uint64
		event, rule, reason string
		why                 string
	}{
		{"ctl", 3, "flow", "allow[0]", "", "a control's decision is its allowed flow"},
		{"meta", 4, "flow", "builtin:metadata", "169.254.169.254 is a cloud metadata address", "the deny flow's rule and reason"},
		{"name", 5, "dns", "default", "query evil.test A refused", "a DNS record has no reason: the judge states what it records"},
		{"mixed", 7, "flow", "allow[1]", "; refused answers 127.0.0.1", "the allowed flow that refused an answer"},
		{"meta2", 8, "flow", "builtin:metadata", "", "its own record, not the earlier attempt's"},
	} {
		d := resultOf(rep, tc.id).Decision
		if d == nil {
			t.Errorf("%s: no decision (%s)", tc.id, tc.why)
			continue
		}
		if d.Seq != tc.seq || d.Event != tc.event || d.Rule != tc.rule || d.Reason != tc.reason {
			t.Errorf("%s: decision %+v, want seq %d %s rule %q reason %q (%s)", tc.id, *d, tc.seq, tc.event, tc.rule, tc.reason, tc.why)
		}
		if strings.Contains(d.Reason, "attacker") {
			t.Errorf("%s: the reason quotes the attacker: %q", tc.id, d.Reason)
		}
	}
	if d := resultOf(rep, "lo").Decision; d != nil {
		t.Errorf("lo: decision %+v; the worker's own loopback leaves no record", *d)
	}

	// The deny record whose key matches wins over another deny record in
	// the attempt's window.
	at := attack.Attempt{ID: "x", Expect: attack.Blocked, Keys: []string{"dns:evil.test"}}
	recs := []rec4{
		{10, `,"event":"dns","qname":"update.example","qtype":"A","action":"deny","rule":"default"`},
		{11, `,"event":"dns","qname":"evil.test","qtype":"A","action":"deny","rule":"default","count":3`},
		{12, `,"event":"dns","qname":"evil.test","qtype":"AAAA","action":"deny","rule":"default"`},
	}
	if d := decisionOf(at, canned4(recs)); d == nil || d.Seq != 12 {
		t.Errorf("decision %+v; want seq 12, the keyed record standing for itself", d)
	}
	at.Keys = nil
	if d := decisionOf(at, canned4(recs)); d == nil || d.Seq != 10 {
		t.Errorf("without keys: decision %+v; want seq 10, the first deny record", d)
	}
}

type rec4 struct {
	seq    uint64
	fields string
}

func canned4(rs []rec4) []audit.Record {
	out := make([]audit.Record, len(rs))
	for i, r := range rs {
		out[i] = rec(r.seq, 100+i, r.fields)
	}
	return out
}

// TestMarkdownSummary: the summary says who ran the lab (the caller's
// real uid, not uid 0 inside the namespace), the kernel features, the
// verdict, the counts per category and the audit head; the attempts
// table shows nsgate's rule and reason from the audit record.
func TestMarkdownSummary(t *testing.T) {
	r := goodRun()
	r.recs[3] = rec(4, 30, `,"event":"flow","action":"deny","proto":"tcp","src":"10.0.2.100:1001","dst":"169.254.169.254:80","rule":"builtin:metadata","reason":"169.254.169.254 is a cloud metadata address"`)
	r.obs[1].Detail = "Get \"http://169.254.169.254/\": dial tcp 169.254.169.254:80: connect: connection refused"
	ev := cannedEvidence(t, r)
	ev.Environment = Environment{OS: "linux", Arch: "amd64", Kernel: "6.1.0-test", Rootless: true, UID: 0,
		CallerUID: 1001, CallerGID: 1002, CallerUser: "nsgate-test", LandlockABI: 7, Seccomp: true, SeccompNotify: true,
		UserNamespaces: true, IA32Emulation: "absent", TunMode: "-rw-rw-rw-"}
	var b bytes.Buffer
	ev.WriteMarkdown(&b)
	md := b.String()
	summary := md[:strings.Index(md, "## Attempts")]
	if n := strings.Count(summary, "\n"); n > 40 {
		t.Errorf("the summary takes %d lines; want one screen (40)", n)
	}
	for _, want := range []string{
		"# nsgate security lab: PASS",
		"**PASS**: all 5 attacks were blocked and all 1 controls succeeded",
		"| caller | uid 1001 (nsgate-test), gid 1002, rootless: the lab's user namespace maps this uid to uid 0 inside |",
		"Landlock ABI 7; seccomp filters: yes; seccomp user notifications: yes; user namespaces: yes; IA32 emulation: absent",
		"| kernel | 6.1.0-test, linux/amd64 |",
		"head `" + strings.Repeat("cd", 32) + "`, verified",
		"| metadata | 1 | 1 | 0 | 0 | 0 | 0 | 0 |",
		"| **all 6** | 5 | 5 | 0 | 0 | 1 | 1 | 0 |",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(summary, "uid 0 (") {
		t.Errorf("the summary names uid 0 as the caller:\n%s", summary)
	}
	for _, want := range []string{"## Legend", "- **metadata**:", "- **exec-guard**:", "**blocked**", "**allowed**", "**error**"} {
		if !strings.Contains(md, want) {
			t.Errorf("the legend lacks %q", want)
		}
	}
	tab := attemptsTable(t, checkTables(t, md))
	if len(tab) != 2+len(ev.Attempts) {
		t.Errorf("attempts table has %d rows, want %d", len(tab)-2, len(ev.Attempts))
	}
	rule, reason, saw := column(t, tab, "nsgate rule"), column(t, tab, "nsgate reason"), column(t, tab, "attacker saw")
	for _, row := range tab[2:] {
		if strings.TrimSpace(row[0]) != "`meta`" {
			continue
		}
		if got := strings.TrimSpace(row[rule]); got != "`builtin:metadata`" {
			t.Errorf("meta's rule cell %q", got)
		}
		if got := strings.TrimSpace(row[reason]); got != "169.254.169.254 is a cloud metadata address" {
			t.Errorf("meta's reason cell %q; want the audit record's reason", got)
		}
		if got := strings.TrimSpace(row[saw]); !strings.HasSuffix(got, "connection refused") || len(got) > 3*mdAttackerWidth {
			t.Errorf("meta's attacker cell %q; want the end of the attacker's error, kept narrow", got)
		}
	}
}

// TestMarkdownHostile: strings from the attacker and from audit records
// (which quote names and paths the worker chose) cannot break a table,
// forge a row, open a code span or HTML, or put control characters in the
// file.
func TestMarkdownHostile(t *testing.T) {
	hostile := []string{
		"a|b||c\\|d\\\\|e",
		"line one\n| `forged` | control | control | x | allowed | allowed | - | - | - | - | ok |\nline three",
		"cr\rlf\r\n| `forged2` | x |",
		"```\n# heading\n```",
		"`tick` ``two`` \\`",
		"\x1b[31mred\x1b[0m \x00 \x07 \u202e gnp.exe \u2028 sep \u2029",
		"<!-- hide the rest --> <script>alert(1)</script> <img src=x>",
		"[click](http://evil.test) ![img](x) *em* _em_ ~~del~~ &#124; &lt;",
		"\xff\xfe invalid utf-8",
	}
	r := goodRun()
	for i, h := range hostile {
		r.recs = append(r.recs, rec(uint64(100+i), 1210+i, `,"event":"exec","action":"deny","path":`+jsonString(h)+`,"pid":1,"reason":`+jsonString(h+" is not in the exec allowlist")))
	}
	ev := cannedEvidence(t, r)
	for i := range ev.Attempts {
		h := hostile[i%len(hostile)]
		ev.Attempts[i].Detail = h
		ev.Attempts[i].Why = h
		ev.Attempts[i].HostCheck = h
		ev.Attempts[i].Evidence = h
		if ev.Attempts[i].Decision != nil {
			ev.Attempts[i].Decision.Reason = h
			ev.Attempts[i].Decision.Rule = h
		}
	}
	ev.Reasons = hostile
	ev.Environment.Kernel = hostile[1]
	ev.Environment.Notes = hostile
	ev.Version = hostile[3]
	ev.Policy.Text = "```\n" + hostile[3] + "\n"
	ev.Verdict = "fail"
	var b bytes.Buffer
	ev.WriteMarkdown(&b)
	md := b.String()

	tables := checkTables(t, md)
	tab := attemptsTable(t, tables)
	if len(tab) != 2+len(ev.Attempts) {
		t.Errorf("attempts table has %d rows, want %d", len(tab)-2, len(ev.Attempts))
	}
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| `forged") || strings.HasPrefix(line, "`forged") {
			t.Errorf("a forged row or code span: %q", line)
		}
	}
	for i, c := range md {
		if c < 0x20 && c != '\n' || c == 0x7f || c == '\u202e' || c == '\u2028' || c == '\u2029' || c == '\ufffd' {
			t.Fatalf("control or invisible character %U at byte %d: %q", c, i, md[max(0, i-40):min(len(md), i+40)])
		}
	}
	// Outside fenced blocks, every <, backtick run and | in a hostile
	// string is escaped: count what is not.
	fence := "" // the open fence, if any
	for _, line := range strings.Split(md, "\n") {
		run := line[:len(line)-len(strings.TrimLeft(line, "`"))]
		switch {
		case fence == "" && len(run) >= 3:
			fence = run
			continue
		case fence != "" && line == run && len(run) >= len(fence):
			fence = ""
			continue
		case fence != "":
			continue
		}
		for i := 0; i < len(line); i++ {
			if line[i] == '\\' {
				i++
				continue
			}
			if line[i] == '<' {
				t.Errorf("an unescaped < opens HTML: %q", line)
				break
			}
		}
	}
	if fence != "" {
		t.Errorf("a fenced block is left open: the policy's backticks closed it early")
	}
	if !strings.Contains(md, "\\|") || !strings.Contains(md, `\n`) || !strings.Contains(md, `\x1b`) || !strings.Contains(md, `\u202e`) {
		t.Errorf("hostile text is not shown escaped")
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range []byte(s) {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(r)
		case r < 0x20 || r >= 0x7f:
			b.WriteString(`\u00`)
			b.WriteString("0123456789abcdef"[r>>4 : r>>4+1])
			b.WriteString("0123456789abcdef"[r&15 : r&15+1])
		default:
			b.WriteByte(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func TestMdText(t *testing.T) {
	for _, tc := range []struct{ in, want, why string }{
		{"plain text, 10.0.2.100:80", "plain text, 10.0.2.100:80", "nothing to escape"},
		{"CAP_NET_RAW and _em_", `CAP_NET_RAW and \_em\_`, "an underscore inside a word cannot emphasize"},
		{"a|b", `a\|b`, "a pipe ends a cell"},
		{`a\|b`, `a\\\|b`, "a backslash cannot escape the escape"},
		{"x\ny", `x\ny`, "a newline ends the row"},
		{"<b>", `\<b>`, "HTML"},
		{"-> 10.0.0.1", "-> 10.0.0.1", "> alone is harmless inside a cell"},
		{"\u202e", `\u202e`, "bidi override"},
	} {
		if got := mdText(tc.in); got != tc.want {
			t.Errorf("mdText(%q) = %q, want %q (%s)", tc.in, got, tc.want, tc.why)
		}
	}
}
