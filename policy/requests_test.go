package policy

import (
	"strings"
	"testing"
)

const termPolicy = `
version: 1
allow:
  - host: api.example.test
    ports: [443]
    tls: terminate
    requests:
      - methods: [GET, HEAD]
        paths: ["/repos/acme/*", "/user"]
      - methods: [POST]
        paths: ["/repos/acme/app/issues"]
      - methods: [GET]
        paths: ["/search/**"]
        query: {q: "repo:acme*"}
  - host: open.example.test
    ports: [443]
    tls: terminate
  - host: pass.example.test
    ports: [443]
tls:
  upstream_ca: /etc/nsgate/test-ca.pem
credentials:
  - name: github
    from: {env: GITHUB_TOKEN}
    placeholder_env: GITHUB_TOKEN
    hosts: [API.example.test.]
    rules: ["allow[0].requests[1]"]
    header: Authorization
    format: "Bearer {}"
`

func TestDecideRequest(t *testing.T) {
	p := mustParse(t, termPolicy)
	tests := []struct {
		why, rule, method, target string
		over                      []string
		allow                     bool
		wantRule, wantPath        string
	}{
		{"listed method and glob", "allow[0]", "GET", "/repos/acme/app", nil, true, "allow[0].requests[0]", "/repos/acme/app"},
		{"query is not the path", "allow[0]", "GET", "/repos/acme/app?x=1", nil, true, "allow[0].requests[0]", "/repos/acme/app"},
		{"* stays in one segment", "allow[0]", "GET", "/repos/acme/app/keys", nil, false, "allow[0]", "/repos/acme/app/keys"},
		{"method not listed", "allow[0]", "DELETE", "/repos/acme/app", nil, false, "allow[0]", "/repos/acme/app"},
		{"second rule", "allow[0]", "POST", "/repos/acme/app/issues", nil, true, "allow[0].requests[1]", "/repos/acme/app/issues"},
		{"** spans segments, query glob matches", "allow[0]", "GET", "/search/code/x?q=repo:acme/app", nil, true, "allow[0].requests[2]", "/search/code/x"},
		{"query glob missing", "allow[0]", "GET", "/search/code", nil, false, "allow[0]", "/search/code"},
		{"query glob fails", "allow[0]", "GET", "/search/code?q=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter repeated", "allow[0]", "GET", "/search/code?q=repo:acme&q=repo:other", nil, false, "allow[0]", "/search/code"},
		// The query as lenient servers read it: each alias of the name
		// counts, and ';' may split it (Rack 2).
		{"query parameter after ';'", "allow[0]", "GET", "/search/code?q=repo:acme&z=1;q=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter in another case", "allow[0]", "GET", "/search/code?q=repo:acme&Q=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter as an array", "allow[0]", "GET", "/search/code?q=repo:acme&q[]=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter with a NUL", "allow[0]", "GET", "/search/code?q=repo:acme&q%00x=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter in brackets", "allow[0]", "GET", "/search/code?q=repo:acme&%5Bq%5D=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter with a leading space", "allow[0]", "GET", "/search/code?q=repo:acme&+q=repo:other", nil, false, "allow[0]", "/search/code"},
		{"query parameter spelled otherwise alone", "allow[0]", "GET", "/search/code?Q=repo:acme", nil, false, "allow[0]", "/search/code"},
		{"query value holding ';' split", "allow[0]", "GET", "/search/code?q=repo:acme;x", nil, true, "allow[0].requests[2]", "/search/code"},
		{"query value holding ';', split short", "allow[0]", "GET", "/search/code?q=repo:ac;me", nil, false, "allow[0]", "/search/code"},
		{"query with a malformed escape", "allow[0]", "GET", "/search/code?q=repo:acme&x=%zz", nil, false, "allow[0]", "/search/code"},
		{"override to a method the rule lacks", "allow[0]", "GET", "/repos/acme/app", []string{"DELETE"}, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"override to a method the rule has", "allow[0]", "GET", "/repos/acme/app", []string{"head"}, true, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override", "allow[0]", "GET", "/repos/acme/app?_method=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		// The query as PHP and Rack 2 read it (Laravel falls back to the
		// query's _method).
		{"_method query override, PHP's .method", "allow[0]", "GET", "/repos/acme/app?.method=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override, leading space", "allow[0]", "GET", "/repos/acme/app?+_method=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override, any case, encoded", "allow[0]", "GET", "/repos/acme/app?%5F%4Dethod=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override after ';'", "allow[0]", "GET", "/repos/acme/app?a=1;_method=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override, bad escape beside it", "allow[0]", "GET", "/repos/acme/app?_method=DELETE&x=%zz", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override in Rack's brackets", "allow[0]", "GET", "/repos/acme/app?%5B_method%5D=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override, a trailing bracket", "allow[0]", "GET", "/repos/acme/app?_method%5D=DELETE", nil, false, "allow[0].requests[0]", "/repos/acme/app"},
		{"_method query override naming GET", "allow[0]", "GET", "/repos/acme/app?.method=get", nil, true, "allow[0].requests[0]", "/repos/acme/app"},
		{"a field named method is no override", "allow[0]", "GET", "/repos/acme/app?method=DELETE", nil, true, "allow[0].requests[0]", "/repos/acme/app"},
		{"override garbage", "allow[0]", "GET", "/repos/acme/app", []string{"DE LETE"}, false, "allow[0]", "/repos/acme/app"},
		{"encoded slash", "allow[0]", "GET", "/repos/acme%2fapp", nil, false, "allow[0]", ""},
		{"dot segment", "allow[0]", "GET", "/repos/acme/../evil", nil, false, "allow[0]", ""},
		{"no requests list: everything", "allow[1]", "DELETE", "/x", nil, true, "allow[1]", "/x"},
		{"no requests list: no override", "allow[1]", "GET", "/x", []string{"DELETE"}, false, "allow[1]", "/x"},
		{"not terminated", "allow[2]", "GET", "/", nil, false, "allow[2]", ""},
		{"no such rule", "allow[9]", "GET", "/", nil, false, "allow[9]", ""},
		{"bad method token", "allow[1]", "get", "/", nil, false, "allow[1]", "/"},
	}
	for _, tt := range tests {
		d := p.DecideRequest(tt.rule, Request{Method: tt.method, Target: tt.target, Overrides: tt.over})
		if (d.Verdict == Allow) != tt.allow || d.Rule != tt.wantRule || d.Path != tt.wantPath {
			t.Errorf("%s: %s %s = %+v; want allow=%v rule=%s path=%q", tt.why, tt.method, tt.target, d, tt.allow, tt.wantRule, tt.wantPath)
		}
		if d.Reason == "" {
			t.Errorf("%s: no reason", tt.why)
		}
	}
}

func TestNormalizePath(t *testing.T) {
	ok := []struct{ in, path, query string }{
		{"/", "/", ""},
		{"/a/b?c=d", "/a/b", "c=d"},
		{"/a%41b", "/aAb", ""},
		{"/caf%C3%A9", "/café", ""},
		{"/a/", "/a/", ""},
		{"/a?x=%2f..", "/a", "x=%2f.."},
	}
	for _, tt := range ok {
		p, q, err := NormalizePath(tt.in)
		if err != nil || p != tt.path || q != tt.query {
			t.Errorf("%q = %q %q %v; want %q %q", tt.in, p, q, err, tt.path, tt.query)
		}
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"a/b", "relative"},
		{"http://evil.test/a", "absolute form"},
		{"*", "asterisk form"},
		{"//a", "empty first segment"},
		{"/a//b", "empty segment"},
		{"/a/./b", "dot"},
		{"/a/../b", "dot dot"},
		{"/..", "dot dot at end"},
		{"/a/..", "dot dot at end 2"},
		{"/a/%2e%2e/b", "encoded dots"},
		{"/a/%2E./b", "mixed encoded dot"},
		{"/a/.%2e/b", "mixed encoded dot 2"},
		{"/a%2fb", "encoded slash"},
		{"/a%2Fb", "encoded slash upper"},
		{"/a%5cb", "encoded backslash"},
		{"/a\\b", "backslash"},
		{"/a;b=c/d", "path parameter"},
		{"/a%3bb", "encoded semicolon"},
		{"/a%252e", "double encoding"},
		{"/a%00b", "NUL"},
		{"/a%0d%0ab", "CRLF"},
		{"/a%zz", "malformed escape"},
		{"/a%2", "truncated escape"},
		{"/a%c0%ae%c0%ae/b", "overlong dot"},
		{"/a%c0%af", "overlong slash"},
		{"/a%e0%80%ae", "three-byte overlong dot"},
		{"/a%ff", "invalid utf-8"},
		{"/a b", "space"},
		{"/a\x00", "raw NUL"},
		{"/caf\xc3\xa9", "raw non-ASCII"},
		{"/a#frag", "fragment"},
		{"/a?b\x7f", "control in query"},
		{"/" + strings.Repeat("a", 9000), "too long"},
	}
	for _, tt := range bad {
		if p, _, err := NormalizePath(tt.in); err == nil {
			t.Errorf("%s: %q normalized to %q; want a refusal", tt.why, tt.in, p)
		}
	}
}

// FuzzNormalizePath checks that what NormalizePath accepts is a path that
// reads the same every way: no dot segments, no empty segments, no
// backslash or ; after decoding, valid UTF-8; and that decoding it again
// changes nothing a second decoder could read differently.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/b?c", "/%2e%2e/", "/a%c0%ae", "/a;b", "/a%252f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, _, err := NormalizePath(in)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.ContainsAny(p, "\\;%?#\x00") {
			t.Fatalf("%q normalized to ambiguous %q", in, p)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q normalized to %q with a dot segment", in, p)
			}
		}
	})
}

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		g, p string
		want bool
	}{
		{"/a/*", "/a/b", true},
		{"/a/*", "/a/b/c", false},
		{"/a/*", "/a", false},
		{"/a/**", "/a", true},
		{"/a/**", "/a/b/c", true},
		{"/a/**/z", "/a/z", true},
		{"/a/**/z", "/a/b/c/z", true},
		{"/a/**/z", "/a/b/c/y", false},
		{"/a/b", "/a/b/", false},
		{"/a/b/", "/a/b/", true},
		{"/v?/x", "/v1/x", true},
		{"/user", "/users", false},
	}
	for _, tt := range tests {
		if got := matchGlob(tt.g, tt.p); got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v", tt.g, tt.p, got)
		}
	}
}

func TestTerminateParse(t *testing.T) {
	p := mustParse(t, termPolicy)
	if !p.Terminates("allow[0]") || !p.Terminates("allow[1]") || p.Terminates("allow[2]") || p.Terminates("deny[0]") {
		t.Error("Terminates wrong")
	}
	if got := strings.Join(p.TerminatedHosts(), ","); got != "api.example.test,open.example.test" {
		t.Errorf("TerminatedHosts = %s", got)
	}
	if p.UpstreamCA() != "/etc/nsgate/test-ca.pem" {
		t.Errorf("UpstreamCA = %q", p.UpstreamCA())
	}
	cs := p.Credentials()
	if len(cs) != 1 || cs[0].Hosts[0] != "api.example.test" || cs[0].Format != "Bearer {}" || cs[0].FromEnv != "GITHUB_TOKEN" || cs[0].Rules[0] != "allow[0].requests[1]" {
		t.Errorf("credentials = %+v", cs)
	}
	s := p.Summary()
	for _, want := range []string{"tls: terminate", `paths: ["/repos/acme/*", "/user"]`, `upstream_ca: "/etc/nsgate/test-ca.pem"`, `format: "Bearer {}"`, `query: {"q": "repo:acme*"}`} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	q, err := Parse("summary.yaml", []byte(s))
	if err != nil {
		t.Fatalf("summary does not parse: %v\n%s", err, s)
	}
	if q.Summary() != s {
		t.Errorf("summary changed on reparse:\n%s\n---\n%s", s, q.Summary())
	}
}

func TestTerminateParseErrors(t *testing.T) {
	tests := []struct{ why, body, want string }{
		{"tls mode", "allow:\n  - {host: a.test, ports: [443], tls: passthrough}", "not a tls mode"},
		{"deny rule", "deny:\n  - {host: a.test, tls: terminate}", "only allow rules take tls"},
		{"cidr rule", "allow:\n  - {cidr: 192.0.2.0/24, ports: [443], tls: terminate}", "only host rules take tls"},
		{"udp", "allow:\n  - {host: a.test, ports: [443], proto: any, tls: terminate}", "needs proto: tcp"},
		{"requests without terminate", "allow:\n  - {host: a.test, ports: [443], requests: [{methods: [GET]}]}", "need tls: terminate"},
		{"bad method", "allow:\n  - {host: a.test, ports: [443], tls: terminate, requests: [{methods: [get]}]}", "not an HTTP method"},
		{"bad glob", "allow:\n  - {host: a.test, ports: [443], tls: terminate, requests: [{paths: [a]}]}", "starts with /"},
		{"glob with dots", "allow:\n  - {host: a.test, ports: [443], tls: terminate, requests: [{paths: [/a/../b]}]}", "no . or .."},
		{"unknown request key", "allow:\n  - {host: a.test, ports: [443], tls: terminate, requests: [{method: [GET]}]}", `unknown key "method"`},
		{"relative upstream_ca", "tls: {upstream_ca: ca.pem}", "not an absolute path"},
		{"credential to passthrough host", "allow:\n  - {host: a.test, ports: [443]}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_env: X, hosts: [a.test], header: Authorization}", "not the host of a tls: terminate"},
		{"credential in Host", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_env: X, hosts: [a.test], header: Host}", "cannot carry a credential"},
		{"credential format", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_env: X, hosts: [a.test], header: A, format: \"Bearer\"}", "must hold {} once"},
		{"credential both sources", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X, file: /x}, placeholder_env: X, hosts: [a.test], header: A}", "not both"},
		{"credential missing header", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_env: X, hosts: [a.test]}", "header missing"},
		{"credential unknown key", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, secret: y}", `unknown key "secret"`},
		{"credential bad rule", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_env: X, hosts: [a.test], header: A, rules: [\"allow[0].requests[0]\"]}", "is not a tls: terminate rule"},
		{"placeholder file outside home", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_file: /etc/x, hosts: [a.test], header: A}", "private home"},
		{"placeholder env twice", "allow:\n  - {host: a.test, ports: [443], tls: terminate}\ncredentials:\n  - {name: x, from: {env: X}, placeholder_env: X, hosts: [a.test], header: A}\n  - {name: y, from: {env: X}, placeholder_env: X, hosts: [a.test], header: B}", "already holds"},
	}
	for _, tt := range tests {
		_, err := Parse("t.yaml", []byte("version: 1\n"+tt.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v; want it to contain %q", tt.why, err, tt.want)
		}
	}
}

func TestQUICToTerminatedHostRefused(t *testing.T) {
	p := mustParse(t, "version: 1\nallow:\n  - {host: api.example.test, ports: [443], tls: terminate}\n  - {host: \"*.example.test\", ports: [443], proto: any}\n")
	d := p.Decide(Flow{Proto: UDP, Host: "api.example.test", Port: 443})
	if d.Verdict != Deny || d.Rule != "allow[0]" || !strings.Contains(d.Reason, "QUIC") {
		t.Errorf("QUIC to the terminated host: %v", d)
	}
	if d := p.Decide(Flow{Proto: UDP, Host: "b.example.test", Port: 443}); d.Verdict != Allow {
		t.Errorf("QUIC to another host: %v", d)
	}
	if d := p.Decide(Flow{Proto: TCP, Host: "api.example.test", Port: 443}); d.Verdict != Allow || d.Rule != "allow[0]" {
		t.Errorf("TCP: %v", d)
	}
}

// TestMethodOverrideHeader: the override headers in any case and with
// '_' for '-' (CGI-style servers read both alike); others are not.
func TestMethodOverrideHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"X-HTTP-Method-Override": true, "x-http-method-override": true, "X_HTTP_Method_Override": true,
		"X-Http-Method": true, "x_method_override": true, "X-Method": false, "X-HTTP-Method-Overrides": false,
		"Authorization": false, "X-HTTP_Method-Override": true,
	} {
		if got := MethodOverrideHeader(name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}
