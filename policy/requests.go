package policy

import (
	"errors"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// reqRule is one entry of a terminated rule's requests list: a request
// matches when its method is listed (nil: any), its normalized path
// matches one of the globs (nil: any) and every named query parameter is
// present once and matches its glob.
type reqRule struct {
	methods []string          // upper case, sorted
	paths   []string          // globs, as written
	query   map[string]string // parameter name → glob
}

// MethodOverrideHeaders are the request headers that some servers read as
// the request's real method. A terminated request carrying one is judged
// as if it used that method too (docs/policy.md, "Requests").
var MethodOverrideHeaders = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// MethodOverrideHeader reports whether a request header named name is one
// of MethodOverrideHeaders as a server may read it: any case, and with
// '_' read as '-' (a CGI-style server such as Rack's or PHP's maps both to
// HTTP_X_HTTP_METHOD_OVERRIDE).
func MethodOverrideHeader(name string) bool {
	if len(name) < len("X-HTTP-Method") || len(name) > len("X-HTTP-Method-Override") {
		return false
	}
	n := strings.ReplaceAll(name, "_", "-")
	for _, h := range MethodOverrideHeaders {
		if strings.EqualFold(n, h) {
			return true
		}
	}
	return false
}

// MethodOverrideField reports whether a form, query or JSON field named
// name (already percent-decoded) may be read by a server as the request's
// method, as Rails, Laravel and Symfony read "_method": in any case, and
// with PHP's renaming of fields applied (leading spaces dropped, '.' and
// ' ' read as '_', the name cut at a NUL), so ".method" and " _method"
// count; an index ("_method[0]") counts too, and Rack's brackets around
// a name ("[_method]"); see fieldName.
func MethodOverrideField(name string) bool {
	name = fieldName(name)
	if len(name) != len("_method") {
		return false
	}
	if c := name[0]; c != '_' && c != '.' && c != ' ' {
		return false
	}
	return strings.EqualFold(name[1:], "method")
}

// queryOverrides returns the values of a raw query's fields that
// MethodOverrideField names, read leniently: '&' and ';' (Rack 2) both
// separate fields, and a field whose escapes do not decode is read with
// them as they stand.
func queryOverrides(raw string) []string {
	var out []string
	for _, kv := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(kv, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if !MethodOverrideField(k) {
			continue
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		out = append(out, v)
	}
	return out
}

// Request is one HTTP request inside a terminated flow, as the worker sent
// it. Target is the request-target exactly as it arrived (origin form,
// "/path?query"; still percent-encoded). Overrides are the values of the
// MethodOverrideHeaders present.
type Request struct {
	Method    string
	Target    string
	Overrides []string
}

// RequestDecision is the verdict on one Request. Rule is the request rule
// that allowed it ("allow[0].requests[1]"), or the flow's rule ("allow[0]")
// when the rule has no requests list or when none matched. Path is the
// normalized path, without the query (empty when the target was refused
// before it could be read): the form audit records carry.
type RequestDecision struct {
	Verdict Verdict
	Rule    string
	Reason  string
	Path    string
}

// Terminates reports whether the allow rule with the given id ("allow[3]")
// has tls: terminate.
func (p *Policy) Terminates(ruleID string) bool {
	r := p.allowByID(ruleID)
	return r != nil && r.terminate
}

// TerminatedHosts returns the host patterns of the tls: terminate rules
// (a name, or "*." and a name), in file order, without repeats.
func (p *Policy) TerminatedHosts() []string {
	var out []string
	for i := range p.allow.rules {
		r := &p.allow.rules[i]
		if r.terminate && !slices.Contains(out, r.pattern()) {
			out = append(out, r.pattern())
		}
	}
	return out
}

// UpstreamCA returns tls.upstream_ca: a PEM file whose certificates are
// trusted, besides the host's roots, for the upstream side of terminated
// flows; "" for none.
func (p *Policy) UpstreamCA() string { return p.upstreamCA }

// HasRequests reports whether the terminated allow rule ruleID
// ("allow[0]") has a requests list: whether methods are judged on its
// flows at all.
func (p *Policy) HasRequests(ruleID string) bool {
	r := p.allowByID(ruleID)
	return r != nil && r.terminate && r.requests != nil
}

func (p *Policy) allowByID(id string) *rule {
	s, ok := strings.CutPrefix(id, "allow[")
	if !ok {
		return nil
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return nil
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(p.allow.rules) {
		return nil
	}
	return &p.allow.rules[i]
}

// DecideRequest decides one request of a flow that the allow rule ruleID
// terminated. It normalizes the target (NormalizePath) and refuses one that
// does not normalize to itself; then the first request rule matching the
// method, path and query allows it. A method override (a header of
// MethodOverrideHeaders, or a _method query parameter) must name a method
// the same request rule allows. It does no I/O and is safe for concurrent
// use.
func (p *Policy) DecideRequest(ruleID string, q Request) RequestDecision {
	r := p.allowByID(ruleID)
	if r == nil || !r.terminate {
		return RequestDecision{Deny, ruleID, "not a terminated rule", ""}
	}
	clean, rawQuery, err := NormalizePath(q.Target)
	if err != nil {
		return RequestDecision{Deny, ruleID, "path refused: " + err.Error(), ""}
	}
	method := q.Method
	if !validMethod(method) {
		return RequestDecision{Deny, ruleID, "method refused: not an HTTP method token", clean}
	}
	overrides := slices.Clone(q.Overrides)
	overrides = append(overrides, queryOverrides(rawQuery)...)
	for i, o := range overrides {
		o = strings.ToUpper(strings.TrimSpace(o))
		if !validMethod(o) {
			return RequestDecision{Deny, ruleID, "method override refused: " + strconv.Quote(audit64(o)) + " is not a method", clean}
		}
		overrides[i] = o
	}
	if r.requests == nil {
		if len(overrides) > 0 {
			return RequestDecision{Deny, ruleID, "method override refused: " + ruleID + " has no requests list to allow it", clean}
		}
		return RequestDecision{Allow, ruleID, "matches " + ruleID + " (every request)", clean}
	}
	for j := range r.requests {
		rr := &r.requests[j]
		if !rr.allowsMethod(method) || !rr.matchPath(clean) {
			continue
		}
		if len(rr.query) > 0 {
			if !rr.matchQuery(rawQuery) {
				continue
			}
		}
		id := ruleID + ".requests[" + strconv.Itoa(j) + "]"
		for _, o := range overrides {
			if !rr.allowsMethod(o) {
				return RequestDecision{Deny, id, "method override to " + o + " refused: " + id + " does not allow " + o, clean}
			}
		}
		return RequestDecision{Allow, id, "matches " + id, clean}
	}
	return RequestDecision{Deny, ruleID, "no request rule of " + ruleID + " allows " + method + " " + clean, clean}
}

// audit64 cuts a worker-chosen string for a reason.
func audit64(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

func (rr *reqRule) allowsMethod(m string) bool {
	if rr.methods == nil {
		return true
	}
	_, ok := slices.BinarySearch(rr.methods, m)
	return ok
}

func (rr *reqRule) matchPath(clean string) bool {
	if rr.paths == nil {
		return true
	}
	for _, g := range rr.paths {
		if matchGlob(g, clean) {
			return true
		}
	}
	return false
}

// matchQuery reports whether raw, a request's raw query, holds each
// parameter the rule names exactly once, matching its glob, however a
// server splits and names the fields:
//   - split at '&' alone and at '&' and ';' (Rack 2), it must match both
//     ways;
//   - a field whose name a server may read as the parameter's (queryName:
//     any case, PHP's renaming, an index) counts as the parameter too, so
//     "q=ok&Q=x", "q=ok&q[]=x" or "a_b=ok&a.b=x" hold it twice; the one
//     field must spell the name exactly;
//   - a malformed escape anywhere refuses it.
func (rr *reqRule) matchQuery(raw string) bool {
	for _, seps := range []string{"&", "&;"} {
		var fields [][2]string
		for _, kv := range strings.FieldsFunc(raw, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
			k, v, _ := strings.Cut(kv, "=")
			k, err1 := url.QueryUnescape(k)
			v, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil {
				return false
			}
			fields = append(fields, [2]string{k, v})
		}
		for name, g := range rr.query {
			want, n, val := queryName(name), 0, ""
			for _, f := range fields {
				if queryName(f[0]) != want {
					continue
				}
				if n++; f[0] != name {
					return false
				}
				val = f[1]
			}
			if n != 1 || !matchValue(g, val) {
				return false // absent, repeated (parameter pollution) or not matching
			}
		}
	}
	return true
}

// queryName is a query field's name as the most lenient server reads it:
// leading spaces dropped, cut at a NUL or an index ('['), '.' and ' ' read
// as '_' (PHP), in lower case (ASP.NET).
func queryName(k string) string {
	return strings.ToLower(phpRenames.Replace(fieldName(k)))
}

// phpRenames are PHP's renamings of a field's name ('.' and ' ' read as
// '_'), made once: queryName runs for every field of every judged query.
var phpRenames = strings.NewReplacer(".", "_", " ", "_")

// fieldName is a form or query field's name with what lenient parsers
// strip from around it taken away: leading spaces (PHP), leading brackets
// (Rack reads "[_method]" and "_method]" as "_method"), and all from a
// NUL (PHP) or the first bracket (an index) on.
func fieldName(k string) string {
	k = strings.TrimLeft(k, " []")
	if i := strings.IndexAny(k, "\x00[]"); i >= 0 {
		k = k[:i]
	}
	return k
}

// matchValue matches a query value against a glob in which "*" matches any
// run of bytes ("/" included) and every other byte itself.
func matchValue(g, s string) bool {
	star := strings.IndexByte(g, '*')
	if star < 0 {
		return g == s
	}
	if !strings.HasPrefix(s, g[:star]) {
		return false
	}
	s, g = s[star:], g[star+1:]
	for i := 0; i <= len(s); i++ {
		if matchValue(g, s[i:]) {
			return true
		}
	}
	return false
}

// matchGlob matches a normalized path against a path glob: the glob's
// segments match the path's one by one with path.Match ("*" within one
// segment, "?", classes), and a segment "**" matches any number of
// segments, none included. A trailing slash counts as a segment of its
// own (an empty one).
func matchGlob(glob, p string) bool {
	return matchSegs(strings.Split(glob[1:], "/"), strings.Split(p[1:], "/"))
}

func matchSegs(g, s []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			if len(g) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if matchSegs(g[1:], s[i:]) {
					return true
				}
			}
			return false
		}
		if len(s) == 0 {
			return false
		}
		if ok, err := path.Match(g[0], s[0]); err != nil || !ok {
			return false
		}
		g, s = g[1:], s[1:]
	}
	return len(s) == 0
}

// validGlob checks a path glob of a requests rule.
func validGlob(g string) error {
	if !strings.HasPrefix(g, "/") {
		return errors.New("a path glob starts with /")
	}
	for _, seg := range strings.Split(g[1:], "/") {
		if seg == "." || seg == ".." {
			return errors.New("a path glob has no . or .. segments")
		}
		if seg == "**" {
			continue
		}
		if strings.Contains(seg, "**") {
			return errors.New("** stands alone in a segment")
		}
		if _, err := path.Match(seg, ""); err != nil {
			return errors.New("malformed pattern in segment " + strconv.Quote(seg))
		}
	}
	if strings.ContainsAny(g, "\\;?#%") || strings.Contains(g, "//") {
		return errors.New("a path glob is a normalized path: no \\ ; ? # % or //")
	}
	return nil
}

// validMethod reports whether m is an HTTP method token (RFC 9110 tchar),
// upper case, at most 32 bytes.
func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '~', c == '!',
			c == '#', c == '$', c == '&', c == '\'', c == '*', c == '+', c == '^', c == '`', c == '|':
		default:
			return false
		}
	}
	return true
}

// NormalizePath reads an origin-form request-target ("/a/b?q=1") and
// returns its path, percent-decoded, and the raw query. It refuses a target
// whose path another reader could take for a different one, so that what
// the rules judge is what the upstream serves:
//
//   - not starting with "/" (absolute or asterisk form), or holding "#";
//   - "//" (an empty segment), a "." or ".." segment;
//   - ";" (path parameters: some servers strip them, some do not);
//   - "\" (some servers read it as "/");
//   - an escape that decodes to "/", "\", ".", ";", "%", "?", "#", a control
//     byte or NUL, a malformed escape;
//   - raw bytes outside printable ASCII;
//   - decoded bytes that are not valid UTF-8 (overlong forms included).
//
// Longer than 8 KiB is refused too.
func NormalizePath(target string) (clean, rawQuery string, err error) {
	if len(target) > 8<<10 {
		return "", "", errors.New("target longer than 8 KiB")
	}
	if !strings.HasPrefix(target, "/") {
		return "", "", errors.New("target is not a path (origin form)")
	}
	p, rawQuery, _ := strings.Cut(target, "?")
	if strings.ContainsRune(target, '#') {
		return "", "", errors.New("fragment in target")
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !ishex(p[i+1]) || !ishex(p[i+2]) {
				return "", "", errors.New("malformed percent escape")
			}
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case d == '/', d == '\\':
				return "", "", errors.New("percent-encoded slash or backslash")
			case d == '.':
				return "", "", errors.New("percent-encoded dot")
			case d == ';', d == '%', d == '?', d == '#':
				return "", "", errors.New("percent-encoded " + string(rune(d)))
			case d < 0x20 || d == 0x7f:
				return "", "", errors.New("percent-encoded control byte")
			}
			b.WriteByte(d)
			i += 2
		case c == '\\':
			return "", "", errors.New("backslash in path")
		case c == ';':
			return "", "", errors.New("; parameter in path")
		case c <= 0x20 || c >= 0x7f:
			return "", "", errors.New("byte outside printable ASCII in path")
		default:
			b.WriteByte(c)
		}
	}
	clean = b.String()
	if !utf8.ValidString(clean) {
		return "", "", errors.New("path decodes to invalid UTF-8 (an overlong form?)")
	}
	for _, seg := range strings.Split(clean[1:], "/")[:] {
		if seg == "." || seg == ".." {
			return "", "", errors.New("dot segment in path")
		}
	}
	if strings.Contains(clean, "//") {
		return "", "", errors.New("empty segment (//) in path")
	}
	for i := 0; i < len(rawQuery); i++ {
		if c := rawQuery[i]; c <= 0x20 || c >= 0x7f {
			return "", "", errors.New("byte outside printable ASCII in query")
		}
	}
	return clean, rawQuery, nil
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
