package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse:\n%v\nsource:\n%s", err, src)
	}
	return p
}

// TestParseErrors checks that each kind of bad input is reported at the node
// that caused it, as FILE:LINE:COL.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		why  string
		src  string
		want []string // "LINE:COL: substring", one per expected error
	}{
		{
			why:  "an empty file is not a policy",
			src:  "",
			want: []string{"1:1: empty policy"},
		},
		{
			why:  "a comment-only file is not a policy",
			src:  "# nothing\n",
			want: []string{"1:1: empty policy"},
		},
		{
			why:  "the version key is required",
			src:  "allow: []\n",
			want: []string{"1:1: version: missing"},
		},
		{
			why:  "only version 1 exists",
			src:  "version: 2\n",
			want: []string{"1:10: version: unsupported version 2"},
		},
		{
			why:  "version is an integer, not a string",
			src:  "version: \"1\"\n",
			want: []string{"1:10: version: expected an integer, found a string"},
		},
		{
			why:  "the top level is a mapping",
			src:  "- version: 1\n",
			want: []string{"1:1: policy: expected a mapping, found a list"},
		},
		{
			why:  "unknown top-level keys are errors",
			src:  "version: 1\nallw: []\n",
			want: []string{`2:1: policy: unknown key "allw"`},
		},
		{
			why:  "duplicate top-level keys are errors",
			src:  "version: 1\nallow: []\nallow: []\n",
			want: []string{`3:1: policy: duplicate key "allow" (first at line 2)`},
		},
		{
			why:  "a rule needs host or cidr",
			src:  "version: 1\nallow:\n  - {}\n",
			want: []string{"3:5: allow[0]: empty rule; give a host or a cidr"},
		},
		{
			why:  "a rule with only ports is empty",
			src:  "version: 1\ndeny:\n  - ports: [22]\n",
			want: []string{"3:5: deny[0]: empty rule"},
		},
		{
			why:  "host and cidr in one rule are two rules",
			src:  "version: 1\nallow:\n  - host: a.test\n    cidr: 10.0.0.0/8\n",
			want: []string{"4:5: allow[0]: has both host and cidr"},
		},
		{
			why:  "a rule is a mapping, not a bare name",
			src:  "version: 1\nallow:\n  - app.test\n",
			want: []string{"3:5: allow[0]: expected a rule"},
		},
		{
			why:  "unknown rule keys are errors",
			src:  "version: 1\nallow:\n  - host: a.test\n    port: 80\n",
			want: []string{`4:5: allow[0]: unknown key "port"; expected cidr, host, l7, ports, proto, requests or tls`},
		},
		{
			why:  "duplicate rule keys are errors",
			src:  "version: 1\nallow:\n  - host: a.test\n    host: b.test\n",
			want: []string{`4:5: allow[0]: duplicate key "host" (first at line 3)`},
		},
		{
			why:  "names with spaces are invalid",
			src:  "version: 1\nallow:\n  - host: exa mple.test\n",
			want: []string{"3:11: allow[0].host: invalid name"},
		},
		{
			why:  "names with empty labels are invalid",
			src:  "version: 1\nallow:\n  - host: a..test\n",
			want: []string{"3:11: allow[0].host: invalid name \"a..test\": empty label"},
		},
		{
			why:  "a label longer than 63 bytes is invalid",
			src:  "version: 1\nallow:\n  - host: " + strings.Repeat("a", 64) + ".test\n",
			want: []string{"3:11: allow[0].host: invalid name"},
		},
		{
			why:  "an IP literal is not a host; say which cidr to write",
			src:  "version: 1\nallow:\n  - host: 10.0.0.1\n",
			want: []string{"3:11: allow[0].host: \"10.0.0.1\" is an IP address; use a cidr rule such as cidr: 10.0.0.1/32"},
		},
		{
			why:  "a tab in the indentation is named at its own line (the YAML library says the line before)",
			src:  "version: 1\nallow:\n  - host: app.test\n\tports: [80]\n",
			want: []string{"4:1: a tab in the indentation; YAML indents with spaces only"},
		},
		{
			why:  "a tab before a list item too",
			src:  "version: 1\nallow:\n\t- host: app.test\n",
			want: []string{"3:1: a tab in the indentation; YAML indents with spaces only"},
		},
		{
			why:  "a URL is not a host; say which name to write",
			src:  "version: 1\nallow:\n  - host: https://app.test:8443/path\n",
			want: []string{"3:11: allow[0].host: \"https://app.test:8443/path\" is a URL; a host is a name, as in host: app.test (the port goes in ports)"},
		},
		{
			why:  "a port goes in ports",
			src:  "version: 1\nallow:\n  - host: app.test:443\n",
			want: []string{"3:11: allow[0].host: \"app.test:443\" has a port; write host: app.test and ports: [443]"},
		},
		{
			why:  "a path is not part of a host",
			src:  "version: 1\nallow:\n  - host: app.test/api\n",
			want: []string{"3:11: allow[0].host: \"app.test/api\" has a path; a host is a name, as in host: app.test"},
		},
		{
			why:  "a name a URL parser reads as an address is not a host",
			src:  "version: 1\nallow:\n  - host: \"0x7f000001\"\n",
			want: []string{"3:11: allow[0].host: invalid name \"0x7f000001\": looks like an IP address"},
		},
		{
			why:  "the wildcard is only the whole first label",
			src:  "version: 1\nallow:\n  - host: \"a.*.test\"\n",
			want: []string{"3:11: allow[0].host: \"*\" is allowed only as the whole first label"},
		},
		{
			why:  "a partial-label wildcard is rejected",
			src:  "version: 1\nallow:\n  - host: \"*cdn.test\"\n",
			want: []string{"3:11: allow[0].host: \"*\" is allowed only"},
		},
		{
			why:  "a bare wildcard is rejected",
			src:  "version: 1\nallow:\n  - host: \"*\"\n",
			want: []string{"3:11: allow[0].host: \"*\" is allowed only"},
		},
		{
			why:  "host must be a string",
			src:  "version: 1\nallow:\n  - host: [a.test]\n",
			want: []string{"3:11: allow[0].host: expected a string, found a list"},
		},
		{
			why:  "non-canonical CIDRs are errors that give the canonical form",
			src:  "version: 1\nallow:\n  - cidr: 10.0.0.1/8\n",
			want: []string{"3:11: allow[0].cidr: 10.0.0.1/8 is not canonical (host bits set); use 10.0.0.0/8"},
		},
		{
			why:  "non-canonical IPv6 CIDRs too",
			src:  "version: 1\ndeny:\n  - cidr: 2001:db8::1/32\n",
			want: []string{"3:11: deny[0].cidr: 2001:db8::1/32 is not canonical (host bits set); use 2001:db8::/32"},
		},
		{
			why:  "prefix length beyond the address size",
			src:  "version: 1\nallow:\n  - cidr: 10.0.0.0/33\n",
			want: []string{"3:11: allow[0].cidr: \"10.0.0.0/33\" is not a CIDR prefix"},
		},
		{
			why:  "an address without length is not a CIDR; say which to write",
			src:  "version: 1\ndeny:\n  - cidr: 203.0.113.66\n",
			want: []string{"3:11: deny[0].cidr: 203.0.113.66 has no prefix length; write 203.0.113.66/32"},
		},
		{
			why:  "port 0 is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [80, 0]\n",
			want: []string{"4:17: allow[0].ports[1]: port 0 out of range 1-65535"},
		},
		{
			why:  "port 65536 is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [65536]\n",
			want: []string{"4:13: allow[0].ports[0]: port 65536 out of range 1-65535"},
		},
		{
			why:  "a port string out of range is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"0-80\"]\n",
			want: []string{"4:13: allow[0].ports[0]: range \"0-80\": port 0 out of range 1-65535"},
		},
		{
			why:  "reversed ranges are errors that give the right order",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"9-3\"]\n",
			want: []string{"4:13: allow[0].ports[0]: range 9-3 is reversed; write 3-9"},
		},
		{
			why:  "a port must be a number or a range",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [https]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535 or a range such as \"8000-8100\", not \"https\""},
		},
		{
			why:  "a float is not a port",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [80.5]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535, not \"80.5\""},
		},
		{
			why:  "a hexadecimal port is an error, though YAML reads it as 443",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [0x1BB]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535, not \"0x1BB\""},
		},
		{
			why:  "an octal port is an error, though YAML reads it as 80",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [0o120]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535, not \"0o120\""},
		},
		{
			why:  "a leading zero is an error: YAML reads 0120 as octal 80",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [0120]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535 without leading zeros, not \"0120\""},
		},
		{
			why:  "080 is a YAML float; still a leading zero",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [080]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535 without leading zeros"},
		},
		{
			why:  "digit separators are an error, though YAML reads 1_000 as 1000",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [1_000]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535, not \"1_000\""},
		},
		{
			why:  "a binary port is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [0b101]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number"},
		},
		{
			why: "a signed port is an error",
			src: "version: 1\nallow:\n  - host: a.test\n    ports: [+80, -1]\n",
			want: []string{
				"4:13: allow[0].ports[0]: port must be a decimal number 1-65535, not \"+80\"",
				"4:18: allow[0].ports[1]: port must be a decimal number 1-65535, not \"-1\"",
			},
		},
		{
			why:  "an exponent is not a port",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [1e3]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535, not \"1e3\""},
		},
		{
			why:  "a hexadecimal port string is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"0x1BB\"]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535 or a range such as \"8000-8100\", not \"0x1BB\""},
		},
		{
			why:  "a leading zero in a quoted port is an error too",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"0443\"]\n",
			want: []string{"4:13: allow[0].ports[0]: port must be a decimal number 1-65535 without leading zeros, not \"0443\""},
		},
		{
			why:  "a range of hexadecimal ports is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"0x1F40-0x1FA4\"]\n",
			want: []string{"4:13: allow[0].ports[0]: range \"0x1F40-0x1FA4\": port must be a decimal number 1-65535, not \"0x1F40\""},
		},
		{
			why:  "a range with an octal end is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"8000-0o17500\"]\n",
			want: []string{"4:13: allow[0].ports[0]: range \"8000-0o17500\": port must be a decimal number 1-65535, not \"0o17500\""},
		},
		{
			why:  "a range with separators is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"8_000-8_100\"]\n",
			want: []string{"4:13: allow[0].ports[0]: range \"8_000-8_100\": port must be a decimal number"},
		},
		{
			why:  "a range with a leading zero is an error",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [\"8000-08100\"]\n",
			want: []string{"4:13: allow[0].ports[0]: range \"8000-08100\": port must be a decimal number 1-65535 without leading zeros"},
		},
		{
			why: "a range without a start is an error",
			src: "version: 1\nallow:\n  - host: a.test\n    ports: [\"-80\", \"80-\"]\n",
			want: []string{
				"4:13: allow[0].ports[0]: port must be a decimal number 1-65535 or a range such as \"8000-8100\", not \"-80\"",
				"4:20: allow[0].ports[1]: port must be a decimal number 1-65535 or a range such as \"8000-8100\", not \"80-\"",
			},
		},
		{
			why:  "a very long decimal port is out of range, not a crash",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: [99999999999999999999999]\n",
			want: []string{"4:13: allow[0].ports[0]: port 99999999999999999999999 out of range 1-65535"},
		},
		{
			why:  "ports must be a list",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: 443\n",
			want: []string{"4:12: allow[0].ports: expected a list, found an integer"},
		},
		{
			why:  "an empty ports list would match nothing",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: []\n",
			want: []string{"4:12: allow[0].ports: empty list; omit the key to allow all ports"},
		},
		{
			why:  "bad protocols are errors",
			src:  "version: 1\nallow:\n  - host: a.test\n    proto: icmp\n",
			want: []string{"4:12: allow[0].proto: \"icmp\" is not a protocol; use tcp, udp or any"},
		},
		{
			why: "every error is reported, not just the first",
			src: "version: 1\nallow:\n  - host: a..test\n  - cidr: 10.0.0.1/8\n    ports: [0]\ndeny:\n  - {}\n",
			want: []string{
				"3:11: allow[0].host: invalid name",
				"4:11: allow[1].cidr: 10.0.0.1/8 is not canonical",
				"5:13: allow[1].ports[0]: port 0 out of range",
				"7:5: deny[0]: empty rule",
			},
		},
		{
			why:  "allow must be a list",
			src:  "version: 1\nallow:\n  host: a.test\n",
			want: []string{"3:3: allow: expected a list, found a mapping"},
		},
		{
			why:  "upstreams are IP addresses",
			src:  "version: 1\ndns:\n  upstream: [dns.test]\n",
			want: []string{"3:14: dns.upstream[0]: \"dns.test\" is not an IP address"},
		},
		{
			why:  "an empty upstream list is a mistake",
			src:  "version: 1\ndns:\n  upstream: []\n",
			want: []string{"3:13: dns.upstream: empty list"},
		},
		{
			why:  "static answers are IP addresses",
			src:  "version: 1\ndns:\n  hosts:\n    app.test: [localhost]\n",
			want: []string{"4:16: dns.hosts.app.test[0]: \"localhost\" is not an IP address"},
		},
		{
			why:  "static names are exact names",
			src:  "version: 1\ndns:\n  hosts:\n    \"*.app.test\": [127.0.0.1]\n",
			want: []string{"4:5: dns.hosts: invalid name"},
		},
		{
			why:  "static names that normalize to the same name are duplicates",
			src:  "version: 1\ndns:\n  hosts:\n    app.test: [127.0.0.1]\n    App.Test.: [127.0.0.2]\n",
			want: []string{"5:5: dns.hosts: duplicate name app.test (first at line 4)"},
		},
		{
			why:  "unknown dns keys are errors",
			src:  "version: 1\ndns:\n  upstreams: [127.0.0.53]\n",
			want: []string{`3:3: dns: unknown key "upstreams"; expected block_page, hosts or upstream`},
		},
		{
			why:  "booleans are true or false, not yes",
			src:  "version: 1\ntls: {verify_sni: yes}\n",
			want: []string{"2:19: tls.verify_sni: expected true or false, found a string"},
		},
		{
			why:  "unknown tls keys are errors",
			src:  "version: 1\ntls: {verify: true}\n",
			want: []string{`2:7: tls: unknown key "verify"; expected refusal_alert, upstream_ca or verify_sni`},
		},
		{
			why:  "exec paths are absolute",
			src:  "version: 1\nexec: {allow: [usr/bin/]}\n",
			want: []string{"2:16: exec.allow[0]: \"usr/bin/\" is not an absolute path"},
		},
		{
			why:  "filesystem keys are write and hide",
			src:  "version: 1\nfilesystem:\n  read: [/srv]\n",
			want: []string{`3:3: filesystem: unknown key "read"; expected hide or write`},
		},
		{
			why:  "filesystem is a mapping",
			src:  "version: 1\nfilesystem: [/srv]\n",
			want: []string{"2:13: filesystem: expected a mapping, found a list"},
		},
		{
			why:  "duplicate filesystem keys are errors",
			src:  "version: 1\nfilesystem:\n  write: [/srv]\n  write: [/opt]\n",
			want: []string{`4:3: filesystem: duplicate key "write" (first at line 3)`},
		},
		{
			why:  "filesystem paths are a list",
			src:  "version: 1\nfilesystem: {write: /srv}\n",
			want: []string{"2:21: filesystem.write: expected a list, found a string"},
		},
		{
			why:  "filesystem paths are strings",
			src:  "version: 1\nfilesystem: {hide: [1]}\n",
			want: []string{"2:21: filesystem.hide[0]: expected a string, found an integer"},
		},
		{
			why:  "a relative write path is an error",
			src:  "version: 1\nfilesystem:\n  write: [proj]\n",
			want: []string{`3:11: filesystem.write[0]: "proj" is not an absolute path; start it with / or ~/`},
		},
		{
			why:  "a relative hide path is an error",
			src:  "version: 1\nfilesystem:\n  hide: [./.ssh]\n",
			want: []string{`3:10: filesystem.hide[0]: "./.ssh" is not an absolute path`},
		},
		{
			why:  "the root is never writable",
			src:  "version: 1\nfilesystem:\n  write: [/]\n",
			want: []string{`3:11: filesystem.write[0]: "/" is the root: the whole host cannot be writable`},
		},
		{
			why:  "the root is caught after cleaning too",
			src:  "version: 1\nfilesystem:\n  write: [\"/usr/..//\"]\n",
			want: []string{`3:11: filesystem.write[0]: "/usr/..//" is the root: the whole host cannot be writable`},
		},
		{
			why:  "the root cannot be hidden",
			src:  "version: 1\nfilesystem:\n  hide: [/]\n",
			want: []string{`3:10: filesystem.hide[0]: "/" is the root: the whole host cannot be hidden`},
		},
		{
			why:  "~user is not expanded",
			src:  "version: 1\nfilesystem:\n  write: [~root/x]\n",
			want: []string{`3:11: filesystem.write[0]: "~root/x": only ~ (your home) is expanded, not ~user`},
		},
		{
			why:  "a home path may not climb out of home",
			src:  "version: 1\nfilesystem:\n  write: [~/../other]\n",
			want: []string{`3:11: filesystem.write[0]: "~/../other" leaves the home directory; write an absolute path`},
		},
		{
			why:  "a NUL byte is not part of a path",
			src:  "version: 1\nfilesystem:\n  hide: [\"/a\\0b\"]\n",
			want: []string{"3:10: filesystem.hide[0]: path contains a NUL byte"},
		},
		{
			why:  "an over-long path is an error",
			src:  "version: 1\nfilesystem:\n  hide: [/" + strings.Repeat("a", 4096) + "]\n",
			want: []string{"3:10: filesystem.hide[0]: path longer than 4096 bytes"},
		},
		{
			why:  "a path both writable and hidden is an error, compared cleaned",
			src:  "version: 1\nfilesystem:\n  write: [~/proj, /srv]\n  hide: [\"~/proj/\"]\n",
			want: []string{"4:10: filesystem.hide: ~/proj is also in filesystem.write (line 3); a path is writable or hidden, not both"},
		},
		{
			why:  "YAML syntax errors carry the line",
			src:  "version: 1\nallow:\n  - host: a.test\n   ports: [80\n",
			want: []string{":1: yaml: "},
		},
		{
			why:  "one document per file",
			src:  "version: 1\n---\nversion: 1\n",
			want: []string{"2:1: more than one YAML document"},
		},
		{
			why:  "aliases are not supported",
			src:  "version: 1\nallow:\n  - host: a.test\n    ports: &web [80]\n  - host: b.test\n    ports: *web\n",
			want: []string{"6:12: aliases (*web) are not supported"},
		},
		{
			why:  "a merge key cannot smuggle a destination into a rule",
			src:  "version: 1\nallow:\n  - host: a.test\n    <<: {cidr: 0.0.0.0/0}\n    ports: [443]\n",
			want: []string{"4:5: allow[0]: keys must be plain names, found a !!merge value"},
		},
		{
			why:  "an alias bomb is refused at its first alias, never expanded",
			src:  "version: 1\nx: &a [l, l, l, l, l, l, l, l, l]\ny: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nz: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n",
			want: []string{"3:8: aliases (*a) are not supported"},
		},
		{
			why:  "a complex key is not a plain name",
			src:  "version: 1\n? [a]\n: 1\n",
			want: []string{"2:3: policy: keys must be plain names, found a list"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			p, err := Parse("test.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("parsed, want errors %q; summary:\n%s", tt.want, p.Summary())
			}
			if p != nil {
				t.Errorf("got a policy with an error")
			}
			var errs *Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T is not *Errors: %v", err, err)
			}
			if len(*errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(*errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				got := (*errs)[i].Error()
				if !strings.HasPrefix(got, "test.yaml:") || !strings.Contains(got, w) {
					t.Errorf("error %d = %q, want it to contain %q", i, got, w)
				}
			}
		})
	}
}

func TestErrorsAs(t *testing.T) {
	_, err := Parse("f.yaml", []byte("version: 1\nallow:\n  - {}\n  - host: a..b\n"))
	if err == nil {
		t.Fatal("no error")
	}
	var ptr *Errors
	var val Errors
	var one Error
	if !errors.As(err, &ptr) || len(*ptr) != 2 {
		t.Errorf("errors.As(*Errors) failed: %v", err)
	}
	if !errors.As(err, &val) || len(val) != 2 {
		t.Errorf("errors.As(Errors) failed: %v", err)
	}
	if !errors.As(err, &one) || one.Line != 3 || one.Col != 5 || one.File != "f.yaml" {
		t.Errorf("errors.As(Error) = %+v", one)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "f.yaml:3:5: ") || !strings.HasPrefix(lines[1], "f.yaml:4:11: ") {
		t.Errorf("Error() = %q", err.Error())
	}
}

// TestParseExample parses the example of docs/policy.md, kept in testdata.
func TestParseExample(t *testing.T) {
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse("example.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Upstreams(); !slices.Equal(got, []string{"127.0.0.53:53"}) {
		t.Errorf("Upstreams = %q", got)
	}
	if got, ok := p.StaticHosts("app.test"); !ok || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("127.0.0.1")}) {
		t.Errorf("StaticHosts(app.test) = %v, %v", got, ok)
	}
	if got := p.ExecAllow(); !slices.Equal(got, []string{"/usr/lib/chromium/"}) {
		t.Errorf("ExecAllow = %q", got)
	}
	if !p.VerifySNI() || !p.VerifyHost() {
		t.Error("verify defaults off")
	}
	if w := p.Warnings(); len(w) != 0 {
		t.Errorf("Warnings = %q", w)
	}
	if len(p.SHA256()) != 64 || p.SHA256() != hashOf(data) {
		t.Errorf("SHA256 = %q", p.SHA256())
	}
}

func TestParseValues(t *testing.T) {
	p := mustParse(t, `
version: 1
allow:
  - host: Bücher.Test.
    ports: ["443", 80, "8000 - 8100", 8050, 8101, 81]
  - host: all.test
  - host: udp.test
    proto: udp
deny:
  - host: "*.ads.test"
dns:
  upstream: ["10.0.0.1", "[2001:db8::53]", "127.0.0.53:5353", "::1", "10.0.0.1:53"]
  hosts:
    Local.Test.: ["::ffff:127.0.0.1", "::1", "127.0.0.1"]
tls: {verify_sni: false}
http: {verify_host: false}
exec:
  allow: [/bin/sh, /usr/lib/chromium/, /bin/sh]
`)
	r := p.allow.rules[0]
	if r.host != "xn--bcher-kva.test" || r.wild || r.protos != maskTCP {
		t.Errorf("rule 0 = %+v", r)
	}
	if got := r.portsString(); got != "80-81,443,8000-8101" {
		t.Errorf("ports = %q", got)
	}
	if p.allow.rules[1].ports != nil {
		t.Error("omitted ports should be all ports")
	}
	if p.allow.rules[2].protos != maskUDP {
		t.Error("proto udp not read")
	}
	if p.deny.rules[0].protos != maskAny || p.deny.rules[0].ports != nil {
		t.Errorf("deny rule defaults = %+v, want any proto and all ports", p.deny.rules[0])
	}
	wantUp := []string{"10.0.0.1:53", "[2001:db8::53]:53", "127.0.0.53:5353", "[::1]:53"}
	if got := p.Upstreams(); !slices.Equal(got, wantUp) {
		t.Errorf("Upstreams = %q, want %q", got, wantUp)
	}
	got, ok := p.StaticHosts("LOCAL.test.")
	want := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("StaticHosts = %v, %v; want %v", got, ok, want)
	}
	got[0] = netip.Addr{}
	if again, _ := p.StaticHosts("local.test"); again[0] != want[0] {
		t.Error("StaticHosts returned the policy's own slice")
	}
	if _, ok := p.StaticHosts("other.test"); ok {
		t.Error("StaticHosts(other.test) found an entry")
	}
	if p.VerifySNI() || p.VerifyHost() {
		t.Error("verify_sni/verify_host false not read")
	}
	if got := p.ExecAllow(); !slices.Equal(got, []string{"/bin/sh", "/usr/lib/chromium/"}) {
		t.Errorf("ExecAllow = %q", got)
	}
	if got := DenyAll().Upstreams(); got != nil {
		t.Errorf("DenyAll upstreams = %q, want nil", got)
	}
}

func TestParseWarnings(t *testing.T) {
	tests := []struct {
		why  string
		src  string
		want []string
	}{
		{
			why:  "omitted ports on an allow rule allow every port",
			src:  "version: 1\nallow:\n  - host: a.test\n",
			want: []string{"test.yaml:3:5: allow[0]: ports omitted: all ports allowed"},
		},
		{
			why: "omitted ports on a deny rule are the natural reading",
			src: "version: 1\ndeny:\n  - host: a.test\n",
		},
		{
			why: "a broad allow cidr does not open the special ranges inside it",
			src: "version: 1\nallow:\n  - cidr: 0.0.0.0/0\n    ports: [443]\n",
			want: []string{
				"test.yaml:3:11: allow[0].cidr: 0.0.0.0/0 does not open the special ranges inside it (0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, 192.0.0.0/24, 192.168.0.0/16, 198.18.0.0/15, 224.0.0.0/4, 240.0.0.0/4, 255.255.255.255/32); flows there stay denied unless a cidr rule inside the range or dns.hosts allows them",
				"test.yaml:3:11: allow[0].cidr: 0.0.0.0/0 contains cloud metadata addresses; they stay denied",
			},
		},
		{
			why: "::/0 does not open the IPv6 special ranges",
			src: "version: 1\nallow:\n  - cidr: \"::/0\"\n    ports: [443]\n",
			want: []string{
				"test.yaml:3:11: allow[0].cidr: ::/0 does not open the special ranges inside it (::/128, ::1/128, fc00::/7, fe80::/10, ff00::/8)",
				"test.yaml:3:11: allow[0].cidr: ::/0 contains cloud metadata addresses",
			},
		},
		{
			why:  "a cidr inside a special range opens it, which is worth a word",
			src:  "version: 1\nallow:\n  - cidr: 10.1.2.0/24\n    ports: [443]\n",
			want: []string{"test.yaml:3:11: allow[0].cidr: 10.1.2.0/24 is inside special range 10.0.0.0/8 (private); flows there that this rule matches are allowed"},
		},
		{
			why: "a cidr equal to a range opens it, but not a narrower range inside it",
			src: "version: 1\nallow:\n  - cidr: 240.0.0.0/4\n    ports: [443]\n",
			want: []string{
				"test.yaml:3:11: allow[0].cidr: 240.0.0.0/4 is inside special range 240.0.0.0/4 (reserved)",
				"test.yaml:3:11: allow[0].cidr: 240.0.0.0/4 does not open the special ranges inside it (255.255.255.255/32)",
			},
		},
		{
			why: "a deny cidr over special ranges needs no word",
			src: "version: 1\ndeny:\n  - cidr: 0.0.0.0/0\n",
		},
		{
			why: "a public cidr needs no word",
			src: "version: 1\nallow:\n  - cidr: 203.0.113.0/24\n    ports: [443]\n",
		},
		{
			why:  "the whole home directory writable is worth a word",
			src:  "version: 1\nfilesystem:\n  write: [\"~\", /srv]\n",
			want: []string{"test.yaml:3:11: filesystem.write[0]: ~ makes the whole home directory writable"},
		},
		{
			why: "hiding the home directory is fine",
			src: "version: 1\nfilesystem:\n  hide: [\"~\"]\n",
		},
		{
			why:  "a static answer that is a metadata address stays denied",
			src:  "version: 1\ndns:\n  hosts:\n    meta.test: [\"::ffff:169.254.169.254\"]\n",
			want: []string{"test.yaml:4:17: dns.hosts.meta.test[0]: 169.254.169.254 is a cloud metadata address"},
		},
		{
			why: "a wildcard over a public suffix allows names of every owner under it",
			src: "version: 1\nallow:\n  - {host: \"*.co.uk\", ports: [443]}\n  - {host: \"*.Test.\", ports: [443]}\n  - {host: \"*.github.io\", ports: [443]}\n",
			want: []string{
				"test.yaml:3:12: allow[0].host: co.uk is a public suffix",
				"test.yaml:4:12: allow[1].host: test is a public suffix",
				"test.yaml:5:12: allow[2].host: github.io is a public suffix",
			},
		},
		{
			why: "a wildcard under a registrable name, and a deny wildcard over a suffix, need no word",
			src: "version: 1\nallow:\n  - {host: \"*.cdn.example.co.uk\", ports: [443]}\ndeny:\n  - host: \"*.co.uk\"\n",
		},
		{
			why:  "exec.allow of the root, however written, turns the exec guard into nothing",
			src:  "version: 1\nexec:\n  allow: [/usr/lib/../.., /usr/bin]\n",
			want: []string{"test.yaml:3:11: exec.allow[0]: \"/usr/lib/../..\" is the root"},
		},
		{
			why:  "turning verification off is worth a word",
			src:  "version: 1\ntls: {verify_sni: false}\n",
			want: []string{"test.yaml:2:19: tls.verify_sni is false"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			got := mustParse(t, tt.src).Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %d = %q, want prefix %q", i, got[i], w)
				}
			}
		})
	}
}

// TestSummary checks that the summary is normalized: equivalent files give
// the same summary, and a summary parses back to itself.
func TestSummary(t *testing.T) {
	a := mustParse(t, `
version: 1
allow:
  - host: APP.test.
    ports: [443, 80, 80]
  - cidr: "::ffff:203.0.113.0/120"
    ports: ["1000-2000", "1500-2500"]
deny:
  - host: "*.Ads.test"
    proto: any
dns:
  upstream: [127.0.0.53]
  hosts: {b.test: [127.0.0.2], a.test: [127.0.0.1]}
filesystem:
  write: ["~/proj/", "/srv//data", "~/proj"]
  hide: ["~/./.ssh"]
`)
	b := mustParse(t, `
version: 1
allow:
  - {host: app.test, ports: [80, "443"], proto: tcp}
  - {cidr: 203.0.113.0/24, ports: ["1000-2500"]}
deny:
  - {host: "*.ads.test"}
dns:
  upstream: ["127.0.0.53:53"]
  hosts:
    a.test: [127.0.0.1]
    b.test: [127.0.0.2]
tls: {verify_sni: true}
filesystem: {hide: ["~/.ssh"], write: ["~/proj", /srv/data/]}
`)
	if a.Summary() != b.Summary() {
		t.Errorf("equivalent policies differ:\n%s\n---\n%s", a.Summary(), b.Summary())
	}
	for _, p := range []*Policy{a, DenyAll(), DenyAll().WithLocal(netip.MustParsePrefix("10.0.2.0/24"))} {
		s := p.Summary()
		q, err := Parse("summary.yaml", []byte(s))
		if err != nil {
			t.Fatalf("summary does not parse: %v\n%s", err, s)
		}
		if p.local == nil && q.Summary() != s {
			t.Errorf("summary changed on reparse:\n%s\n---\n%s", s, q.Summary())
		}
	}
	for _, want := range []string{
		`- {host: "app.test", proto: tcp, ports: [80, 443]}  # allow[0]`,
		`- {cidr: "203.0.113.0/24", proto: tcp, ports: ["1000-2500"]}  # allow[1]`,
		`- {host: "*.ads.test", proto: any}  # deny[0], all ports`,
		"filesystem:\n  write:\n    - \"~/proj\"\n    - \"/srv/data\"\n  hide:\n    - \"~/.ssh\"\n",
		"denied unless an allow cidr rule inside the range, or dns.hosts, covers the address",
	} {
		if !strings.Contains(a.Summary(), want) {
			t.Errorf("summary lacks %q:\n%s", want, a.Summary())
		}
	}
	if s := DenyAll().Summary(); !strings.Contains(s, "# filesystem: no write or hide paths\n") || strings.Contains(s, "gateway's own") {
		t.Errorf("DenyAll summary:\n%s", s)
	}
	local := DenyAll().WithLocal(netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("198.18.0.0/15")).Summary()
	if !strings.Contains(local, "# the gateway's own addresses (10.0.2.0/24, 198.18.0.0/15) always denied: no rule opens them\n") {
		t.Errorf("WithLocal summary:\n%s", local)
	}
}

func TestDenyAll(t *testing.T) {
	p := DenyAll()
	if p.SHA256() != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("SHA256 = %s", p.SHA256())
	}
	if !p.VerifySNI() || !p.VerifyHost() || p.ExecAllow() != nil || p.Warnings() != nil {
		t.Error("DenyAll defaults wrong")
	}
	for _, f := range []Flow{
		{Proto: TCP, Addr: netip.MustParseAddr("203.0.113.1"), Port: 443},
		{Proto: UDP, Host: "app.test", Port: 53},
	} {
		if d := p.Decide(f); d.Verdict != Deny || d.Rule != RuleDefault {
			t.Errorf("Decide(%v) = %v", f, d)
		}
	}
	if d := p.NameAllowed("app.test"); d.Verdict != Deny {
		t.Errorf("NameAllowed = %v", d)
	}
}

// TestWithLocalWarnings: allow cidr rules that overlap the gateway's own
// addresses get a warning once WithLocal knows them, in file order with
// the parse warnings.
func TestWithLocalWarnings(t *testing.T) {
	p := mustParse(t, "version: 1\nallow:\n  - cidr: 10.0.2.2/32\n    ports: [80]\n  - host: a.test\n  - cidr: 203.0.113.0/24\n    ports: [443]\n  - cidr: \"::/0\"\n    ports: [443]\ndeny:\n  - cidr: 10.0.2.0/24\n")
	before := p.Warnings()
	q := p.WithLocal(netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00::/64"))
	want := []string{
		"test.yaml:3:11: allow[0].cidr: 10.0.2.2/32 is inside special range 10.0.0.0/8",
		"test.yaml:3:11: allow[0].cidr: 10.0.2.2/32 overlaps 10.0.2.0/24, the gateway's own addresses: flows there stay denied (no rule opens them)",
		"test.yaml:5:5: allow[1]: ports omitted",
		"test.yaml:8:11: allow[3].cidr: ::/0 does not open",
		"test.yaml:8:11: allow[3].cidr: ::/0 contains cloud metadata",
		"test.yaml:8:11: allow[3].cidr: ::/0 overlaps fd00::/64, the gateway's own addresses",
	}
	got := q.Warnings()
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("warning %d = %q, want prefix %q", i, got[i], w)
		}
	}
	if !slices.Equal(p.Warnings(), before) {
		t.Error("WithLocal changed the original's warnings")
	}
	if again := q.WithLocal(netip.MustParsePrefix("10.0.2.0/24")).Warnings(); !slices.Equal(again, got) {
		t.Errorf("a prefix given twice warns twice:\n%s", strings.Join(again, "\n"))
	}
}

// TestBounds: the rule, dns.hosts and size bounds are errors located at
// the first entry past them, and input at a bound still parses.
func TestBounds(t *testing.T) {
	rules := func(nAllow, nDeny int) string {
		var b strings.Builder
		b.WriteString("version: 1\nallow:\n")
		for i := range nAllow {
			fmt.Fprintf(&b, "  - {host: h%d.test, ports: [443]}\n", i)
		}
		b.WriteString("deny:\n")
		for i := range nDeny {
			fmt.Fprintf(&b, "  - {host: d%d.test}\n", i)
		}
		return b.String()
	}
	hosts := func(n int) string {
		var b strings.Builder
		b.WriteString("version: 1\ndns:\n  hosts:\n")
		for i := range n {
			fmt.Fprintf(&b, "    h%d.test: [203.0.113.1]\n", i)
		}
		return b.String()
	}
	padded := func(n int) string {
		s := "version: 1\n#"
		return s + strings.Repeat("x", n-len(s)-1) + "\n"
	}
	tests := []struct {
		why  string
		src  string
		want string // "" for a policy that parses
	}{
		{"MaxRules allow rules parse", rules(MaxRules, 0), ""},
		{"MaxRules rules across allow and deny parse", rules(MaxRules-1, 1), ""},
		{"one allow rule too many", rules(MaxRules+1, 0), fmt.Sprintf("test.yaml:%d:5: allow[%d]: too many rules: allow and deny hold at most %d rules together", MaxRules+3, MaxRules, MaxRules)},
		{"the bound counts deny rules too", rules(MaxRules-1, 2), fmt.Sprintf("test.yaml:%d:5: deny[1]: too many rules", MaxRules+4)},
		{"far past the bound, one error", rules(MaxRules+500, 500), fmt.Sprintf("test.yaml:%d:5: allow[%d]: too many rules", MaxRules+3, MaxRules)},
		{"MaxHosts names parse", hosts(MaxHosts), ""},
		{"one name too many", hosts(MaxHosts + 1), fmt.Sprintf("test.yaml:%d:5: dns.hosts: too many names: at most %d", MaxHosts+4, MaxHosts)},
		{"a policy of exactly MaxFileSize bytes parses", padded(MaxFileSize), ""},
		{"one byte more is refused before parsing", padded(MaxFileSize + 1), "test.yaml:1:1: policy larger than the limit of 1048576 bytes (1 MiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			p, err := Parse("test.yaml", []byte(tt.src))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("error %.300v", err)
				}
				return
			}
			var errs *Errors
			if !errors.As(err, &errs) || len(*errs) != 1 {
				t.Fatalf("got %v, %.300v; want one located error", p != nil, err)
			}
			if got := (*errs)[0].Error(); !strings.HasPrefix(got, tt.want) {
				t.Errorf("error %q, want prefix %q", got, tt.want)
			}
		})
	}
}

func TestFilesystem(t *testing.T) {
	p := mustParse(t, `
version: 1
filesystem:
  write: ["~/proj/", /srv//data/, "~/proj", "~//cache/../tmp"]
  hide: ["~/.ssh", "~/.aws/./credentials", /etc/shadow]
`)
	fs, err := p.Filesystem("/home/u/")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/home/u/proj", "/srv/data", "/home/u/tmp"}; !slices.Equal(fs.Write, want) {
		t.Errorf("Write = %q, want %q", fs.Write, want)
	}
	if want := []string{"/home/u/.ssh", "/home/u/.aws/credentials", "/etc/shadow"}; !slices.Equal(fs.Hide, want) {
		t.Errorf("Hide = %q, want %q", fs.Hide, want)
	}
	fs.Write[0] = "/"
	if again, _ := p.Filesystem("/home/u"); again.Write[0] != "/home/u/proj" {
		t.Error("Filesystem returned the policy's own slice")
	}

	tests := []struct {
		why  string
		src  string
		home string
		want []string // Write, then Hide; or nil with err
		err  string
	}{
		{"no section, no paths", "version: 1\n", "", nil, ""},
		{"absolute paths need no home", "version: 1\nfilesystem: {write: [/srv], hide: [/etc/ssh]}\n", "", []string{"/srv", "/etc/ssh"}, ""},
		{"~ needs a home", "version: 1\nfilesystem: {write: [~/proj]}\n", "", nil, `filesystem.write: ~/proj needs the home directory, and "" is not an absolute path`},
		{"~ needs an absolute home", "version: 1\nfilesystem: {hide: [~/.ssh]}\n", "home/u", nil, `filesystem.hide: ~/.ssh needs the home directory, and "home/u" is not an absolute path`},
		{"a home of / may not make the whole host writable", "version: 1\nfilesystem: {write: [\"~\"]}\n", "/", nil, "filesystem.write: ~ expands to /: the whole host cannot be writable"},
		{"nor hidden", "version: 1\nfilesystem: {hide: [\"~\"]}\n", "/", nil, "filesystem.hide: ~ expands to /: the whole host cannot be hidden"},
		{"a home of / is fine below it", "version: 1\nfilesystem: {write: [~/srv]}\n", "/", []string{"/srv"}, ""},
		{"written and hidden once expanded", "version: 1\nfilesystem: {write: [~/x], hide: [/home/u/x]}\n", "/home/u", nil, "filesystem: /home/u/x is both in write and in hide; a path is writable or hidden, not both"},
		{"the same path twice once expanded is listed once", "version: 1\nfilesystem: {write: [~/x, /home/u/x]}\n", "/home/u", []string{"/home/u/x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.why, func(t *testing.T) {
			fs, err := mustParse(t, tt.src).Filesystem(tt.home)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("Filesystem(%q) = %q, %v; want error %q", tt.home, fs, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := append(fs.Write, fs.Hide...); !slices.Equal(got, tt.want) {
				t.Errorf("Filesystem(%q) = %q, want %q", tt.home, got, tt.want)
			}
		})
	}
}

func TestBlockPageKey(t *testing.T) {
	p := mustParse(t, "version: 1\ndns: {block_page: true}\n")
	if !p.BlockPage() || mustParse(t, "version: 1\n").BlockPage() {
		t.Fatalf("dns.block_page: got %v, and off by default", p.BlockPage())
	}
	q, err := Parse("s.yaml", []byte(p.Summary()))
	if err != nil || !q.BlockPage() || !strings.Contains(p.Summary(), "block_page: true") {
		t.Fatalf("summary loses dns.block_page (%v):\n%s", err, p.Summary())
	}
	if _, err := Parse("b.yaml", []byte("version: 1\ndns: {block_page: 1}\n")); err == nil {
		t.Error("dns.block_page: 1 accepted, want a boolean")
	}
}
