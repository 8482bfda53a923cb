package policy

import (
	"path"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Credential is one entry of the credentials section: a secret nsgate
// holds for the worker and injects into its requests. The policy holds
// where the secret comes from, never the secret itself (Parse does no I/O).
type Credential struct {
	Name string
	// FromEnv or FromFile (exactly one set) is where nsgate reads the
	// secret: an environment variable of nsgate's own, or a file nsgate
	// can read. The worker's view never holds either.
	FromEnv, FromFile string
	// PlaceholderEnv names the worker environment variable that holds the
	// run's placeholder; PlaceholderFile, a file in the worker's private
	// home ("~/rel") that holds it. At least one is set.
	PlaceholderEnv, PlaceholderFile string
	// Hosts are the names (normalized, each the host of a tls: terminate
	// rule) whose requests may carry the secret.
	Hosts []string
	// Rules, when set, narrow that to requests allowed by these rules
	// ("allow[0]" or "allow[0].requests[1]").
	Rules []string
	// Header is the request header the secret goes in; Format its value,
	// with "{}" standing for the secret ("Bearer {}").
	Header, Format string
}

// Credentials returns the credentials section, in file order (copies).
func (p *Policy) Credentials() []Credential {
	out := make([]Credential, len(p.credentials))
	for i, c := range p.credentials {
		c.Hosts = slices.Clone(c.Hosts)
		c.Rules = slices.Clone(c.Rules)
		out[i] = c
	}
	return out
}

// forbiddenHeaders may not carry a credential: they frame or route the
// request, and a secret there would be read by the wrong party.
var forbiddenHeaders = []string{"host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
	"trailer", "keep-alive", "proxy-connection", "x-http-method-override", "x-http-method", "x-method-override"}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// credentials parses the credentials section; p.allow is already built.
func (ps *parser) credentials(n *yaml.Node, p *Policy) []Credential {
	items, ok := ps.entries(n, "credentials")
	if !ok {
		return nil
	}
	var out []Credential
	names := map[string]bool{}
	envs := map[string]bool{}
	for i, item := range items {
		id := "credentials[" + strconv.Itoa(i) + "]"
		var c Credential
		nerr := len(ps.errs)
		if item.Kind != yaml.MappingNode {
			ps.errf(item, "%s: expected a mapping, found %s", id, kindName(item))
			continue
		}
		ps.mapping(item, id, map[string]func(k, v *yaml.Node){
			"name": func(k, v *yaml.Node) {
				if s, ok := ps.str(v, id+".name"); ok {
					if !validEnvName(strings.ReplaceAll(s, "-", "_")) {
						ps.errf(v, "%s.name: %q: letters, digits, - and _ only", id, s)
					} else if names[s] {
						ps.errf(v, "%s.name: %q used twice", id, s)
					}
					c.Name, names[s] = s, true
				}
			},
			"from": func(k, v *yaml.Node) {
				ps.mapping(v, id+".from", map[string]func(k, v *yaml.Node){
					"env": func(k, v *yaml.Node) {
						if s, ok := ps.str(v, id+".from.env"); ok {
							if !validEnvName(s) {
								ps.errf(v, "%s.from.env: %q is not an environment variable name", id, s)
							}
							c.FromEnv = s
						}
					},
					"file": func(k, v *yaml.Node) {
						if s, ok := ps.str(v, id+".from.file"); ok {
							if !path.IsAbs(s) {
								ps.errf(v, "%s.from.file: %q is not an absolute path", id, s)
							}
							c.FromFile = path.Clean(s)
						}
					},
				})
				if c.FromEnv != "" && c.FromFile != "" {
					ps.errf(v, "%s.from: give env or file, not both", id)
				}
			},
			"placeholder_env": func(k, v *yaml.Node) {
				if s, ok := ps.str(v, id+".placeholder_env"); ok {
					if !validEnvName(s) {
						ps.errf(v, "%s.placeholder_env: %q is not an environment variable name", id, s)
					} else if envs[s] {
						ps.errf(v, "%s.placeholder_env: %s already holds another credential's placeholder", id, s)
					}
					c.PlaceholderEnv, envs[s] = s, true
				}
			},
			"placeholder_file": func(k, v *yaml.Node) {
				if s, ok := ps.str(v, id+".placeholder_file"); ok {
					rel, ok := strings.CutPrefix(s, "~/")
					if !ok || rel == "" || path.Clean(rel) != rel || strings.HasPrefix(rel, "../") || rel == ".." {
						ps.errf(v, "%s.placeholder_file: %q: a path in the worker's private home, ~/NAME", id, s)
						return
					}
					c.PlaceholderFile = s
				}
			},
			"hosts": func(k, v *yaml.Node) {
				hs, ok := ps.entries(v, id+".hosts")
				if !ok {
					return
				}
				for _, h := range hs {
					s, ok := ps.str(h, id+".hosts")
					if !ok {
						continue
					}
					name, err := canonHost(s)
					if err != nil {
						ps.errf(h, "%s.hosts: %v", id, err)
						continue
					}
					if !p.terminatedName(name) {
						ps.errf(h, "%s.hosts: %s is not the host of a tls: terminate allow rule; a credential goes only where nsgate decides each request", id, name)
						continue
					}
					c.Hosts = append(c.Hosts, name)
				}
				if len(hs) == 0 {
					ps.errf(v, "%s.hosts: empty; name the hosts the secret may go to", id)
				}
			},
			"rules": func(k, v *yaml.Node) {
				rs, ok := ps.entries(v, id+".rules")
				if !ok {
					return
				}
				for _, h := range rs {
					s, ok := ps.str(h, id+".rules")
					if !ok {
						continue
					}
					if !p.requestRuleExists(s) {
						ps.errf(h, "%s.rules: %q is not a tls: terminate rule (allow[i]) or one of its request rules (allow[i].requests[j])", id, s)
						continue
					}
					c.Rules = append(c.Rules, s)
				}
			},
			"header": func(k, v *yaml.Node) {
				if s, ok := ps.str(v, id+".header"); ok {
					if !validToken(s) {
						ps.errf(v, "%s.header: %q is not a header name", id, s)
					} else if slices.Contains(forbiddenHeaders, strings.ToLower(s)) {
						ps.errf(v, "%s.header: %s frames or routes the request; it cannot carry a credential", id, s)
					}
					c.Header = s
				}
			},
			"format": func(k, v *yaml.Node) {
				if s, ok := ps.str(v, id+".format"); ok {
					if strings.Count(s, "{}") != 1 {
						ps.errf(v, "%s.format: %q must hold {} once, where the secret goes", id, s)
					}
					for j := 0; j < len(s); j++ {
						if s[j] < 0x20 || s[j] >= 0x7f {
							ps.errf(v, "%s.format: printable ASCII only", id)
							break
						}
					}
					c.Format = s
				}
			},
		})
		for _, miss := range []struct {
			empty bool
			what  string
		}{
			{c.Name == "", "name"},
			{c.FromEnv == "" && c.FromFile == "", "from (env or file)"},
			{c.PlaceholderEnv == "" && c.PlaceholderFile == "", "placeholder_env or placeholder_file"},
			{c.Hosts == nil, "hosts"},
			{c.Header == "", "header"},
		} {
			if miss.empty {
				ps.errf(item, "%s: %s missing", id, miss.what)
			}
		}
		if c.Format == "" {
			c.Format = "{}"
		}
		if len(ps.errs) == nerr {
			out = append(out, c)
		}
	}
	return out
}

// terminatingRule returns the id of the first tls: terminate allow rule
// naming the canonical name, exactly or by wildcard, or "".
func (p *Policy) terminatingRule(name string) string {
	for i := range p.allow.rules {
		r := &p.allow.rules[i]
		if r.terminate && (r.host == name && !r.wild || r.wild && strings.HasSuffix(name, "."+r.host)) {
			return r.id
		}
	}
	return ""
}

// terminatedName reports whether a tls: terminate allow rule names the
// canonical name exactly or by wildcard.
func (p *Policy) terminatedName(name string) bool {
	for i := range p.allow.rules {
		r := &p.allow.rules[i]
		if !r.terminate {
			continue
		}
		if r.host == name && !r.wild || r.wild && strings.HasSuffix(name, "."+r.host) {
			return true
		}
	}
	return false
}

// requestRuleExists reports whether id names a terminated allow rule or one
// of its request rules.
func (p *Policy) requestRuleExists(id string) bool {
	base, sub, hasSub := strings.Cut(id, ".requests[")
	r := p.allowByID(base)
	if r == nil || !r.terminate {
		return false
	}
	if !hasSub {
		return true
	}
	j, err := strconv.Atoi(strings.TrimSuffix(sub, "]"))
	return err == nil && strings.HasSuffix(sub, "]") && j >= 0 && j < len(r.requests) && strconv.Itoa(j)+"]" == sub
}

// requests parses a rule's requests list.
func (ps *parser) requests(n *yaml.Node, what string) []reqRule {
	items, ok := ps.entries(n, what)
	if !ok {
		return nil
	}
	out := make([]reqRule, 0, len(items))
	for j, item := range items {
		id := what + "[" + strconv.Itoa(j) + "]"
		var rr reqRule
		ps.mapping(item, id, map[string]func(k, v *yaml.Node){
			"methods": func(k, v *yaml.Node) {
				ms, ok := ps.entries(v, id+".methods")
				if !ok {
					return
				}
				rr.methods = []string{}
				for _, m := range ms {
					s, ok := ps.str(m, id+".methods")
					if !ok {
						continue
					}
					if !validMethod(s) {
						ps.errf(m, "%s.methods: %q is not an HTTP method (upper case, such as GET)", id, s)
						continue
					}
					rr.methods = append(rr.methods, s)
				}
				slices.Sort(rr.methods)
				rr.methods = slices.Compact(rr.methods)
			},
			"paths": func(k, v *yaml.Node) {
				gs, ok := ps.entries(v, id+".paths")
				if !ok {
					return
				}
				rr.paths = []string{}
				for _, g := range gs {
					s, ok := ps.str(g, id+".paths")
					if !ok {
						continue
					}
					if err := validGlob(s); err != nil {
						ps.errf(g, "%s.paths: %q: %v", id, s, err)
						continue
					}
					rr.paths = append(rr.paths, s)
				}
			},
			"query": func(k, v *yaml.Node) {
				if v.Kind != yaml.MappingNode {
					ps.errf(v, "%s.query: expected a mapping of parameter: glob, found %s", id, kindName(v))
					return
				}
				rr.query = map[string]string{}
				for i := 0; i+1 < len(v.Content); i += 2 {
					kn, vn := v.Content[i], v.Content[i+1]
					name, ok1 := ps.str(kn, id+".query")
					g, ok2 := ps.str(vn, id+".query."+kn.Value)
					if !ok1 || !ok2 {
						continue
					}
					if _, dup := rr.query[name]; dup {
						ps.errf(kn, "%s.query: duplicate key %q", id, name)
						continue
					}
					if strings.Count(g, "*") > 8 {
						ps.errf(vn, "%s.query.%s: at most 8 * in a pattern", id, name)
						continue
					}
					rr.query[name] = g
				}
			},
		})
		out = append(out, rr)
	}
	return out
}

// yaml returns the request rule as a YAML flow mapping.
func (rr *reqRule) yaml() string {
	var parts []string
	quote := func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = strconv.Quote(x)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	if rr.methods != nil {
		parts = append(parts, "methods: "+quote(rr.methods))
	}
	if rr.paths != nil {
		parts = append(parts, "paths: "+quote(rr.paths))
	}
	if rr.query != nil {
		keys := make([]string, 0, len(rr.query))
		for k := range rr.query {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var q []string
		for _, k := range keys {
			q = append(q, strconv.Quote(k)+": "+strconv.Quote(rr.query[k]))
		}
		parts = append(parts, "query: {"+strings.Join(q, ", ")+"}")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// writeCredentials writes the credentials section for Summary: where each
// secret comes from, never a secret.
func writeCredentials(b *strings.Builder, cs []Credential) {
	if len(cs) == 0 {
		return
	}
	b.WriteString("credentials:\n")
	for _, c := range cs {
		b.WriteString("  - name: " + strconv.Quote(c.Name) + "\n")
		if c.FromEnv != "" {
			b.WriteString("    from: {env: " + strconv.Quote(c.FromEnv) + "}\n")
		} else {
			b.WriteString("    from: {file: " + strconv.Quote(c.FromFile) + "}\n")
		}
		if c.PlaceholderEnv != "" {
			b.WriteString("    placeholder_env: " + strconv.Quote(c.PlaceholderEnv) + "\n")
		}
		if c.PlaceholderFile != "" {
			b.WriteString("    placeholder_file: " + strconv.Quote(c.PlaceholderFile) + "\n")
		}
		hs := make([]string, len(c.Hosts))
		for i, h := range c.Hosts {
			hs[i] = strconv.Quote(h)
		}
		b.WriteString("    hosts: [" + strings.Join(hs, ", ") + "]\n")
		if c.Rules != nil {
			rs := make([]string, len(c.Rules))
			for i, r := range c.Rules {
				rs[i] = strconv.Quote(r)
			}
			b.WriteString("    rules: [" + strings.Join(rs, ", ") + "]\n")
		}
		b.WriteString("    header: " + strconv.Quote(c.Header) + "\n")
		b.WriteString("    format: " + strconv.Quote(c.Format) + "\n")
	}
}
