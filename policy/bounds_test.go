package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestParseListBounds: each list besides allow and deny (exec.allow,
// filesystem.write and .hide, dns.upstream, the addresses of one
// dns.hosts name) holds at most 1,000 entries. Past that one located
// error, at the first entry too many: a file of 1 MiB of distinct paths
// would otherwise cost time quadratic in their number (each is checked
// against the others), minutes for one `nsgate check` or reload.
func TestParseListBounds(t *testing.T) {
	list := func(head string, n int, item func(i int) string) string {
		var b strings.Builder
		b.WriteString("version: 1\n" + head)
		for i := range n {
			b.WriteString("\n    - " + item(i))
		}
		return b.String() + "\n"
	}
	path := func(i int) string { return fmt.Sprintf("/p%d", i) }
	addr := func(i int) string { return fmt.Sprintf("\"10.0.%d.%d\"", i/250, 1+i%250) }
	for _, tc := range []struct {
		what, head string
		item       func(int) string
		first      int // the line of the first entry
	}{
		{"exec.allow", "exec:\n  allow:", path, 4},
		{"filesystem.write", "filesystem:\n  write:", path, 4},
		{"filesystem.hide", "filesystem:\n  hide:", path, 4},
		{"dns.upstream", "dns:\n  upstream:", addr, 4},
		{"dns.hosts.a.test", "dns:\n  hosts:\n   a.test:", addr, 5},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if _, err := Parse("test.yaml", []byte(list(tc.head, 1000, tc.item))); err != nil {
				t.Fatalf("1,000 entries: %.300v", err)
			}
			_, err := Parse("test.yaml", []byte(list(tc.head, 1001+5000, tc.item)))
			var errs *Errors
			if !errors.As(err, &errs) || len(*errs) != 1 {
				t.Fatalf("6,001 entries: %.300v; want one located error", err)
			}
			want := fmt.Sprintf("test.yaml:%d:", tc.first+1000)
			if got := (*errs)[0].Error(); !strings.HasPrefix(got, want) || !strings.Contains(got, tc.what+": too many entries: at most 1000") {
				t.Errorf("error %q, want %s... %s: too many entries: at most 1000", got, want, tc.what)
			}
		})
	}
}

// TestParseErrorCap: a file with a problem on every item says the first
// 100 and then how many more there are, in one last error; the error
// text stays short enough for a terminal and an audit record.
func TestParseErrorCap(t *testing.T) {
	src := "version: 1\nallow:\n" + strings.Repeat("  - {host: \"a b\"}\n", 5000)
	_, err := Parse("test.yaml", []byte(src))
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v", err)
	}
	if len(*errs) != 101 {
		t.Fatalf("%d errors, want 100 and one that counts the rest", len(*errs))
	}
	last := (*errs)[100]
	if last.Line != 103 || !strings.Contains(last.Msg, "4900 more problems") {
		t.Errorf("last error %v, want one at line 103 counting 4900 more problems", last)
	}
	if len(err.Error()) > 64<<10 {
		t.Errorf("error text of %d bytes", len(err.Error()))
	}
}
