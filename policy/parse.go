package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/publicsuffix"
)

// Parse reads a policy file (docs/policy.md). filename is used only in messages.
// On bad input it returns a nil *Policy and a *Errors holding every problem
// found, each located at the offending YAML node. The format is strict:
// unknown keys, duplicate keys, wrong types, aliases (so merge keys,
// which YAML reads as a key of type !!merge, and alias expansion bombs
// too), and more than one YAML document are errors. An anchor that no
// alias uses changes nothing and is let be.
//
// Parse bounds its work: input larger than MaxFileSize, more than MaxRules
// rules in allow and deny together, and more than MaxHosts names in
// dns.hosts are errors (the rules and names past a bound are not read).
func Parse(filename string, data []byte) (*Policy, error) {
	ps := &parser{file: filename, data: data}
	p := &Policy{
		sha:        hashOf(data),
		file:       filename,
		verifySNI:  true,
		verifyHost: true,
	}
	if len(data) > MaxFileSize {
		ps.errAt(1, 1, "policy larger than the limit of %d bytes (1 MiB)", MaxFileSize)
	} else {
		ps.document(data, p)
	}
	if ps.dropped > 0 {
		ps.errs = append(ps.errs, Error{File: filename, Line: ps.droppedAt.Line, Col: ps.droppedAt.Col,
			Msg: fmt.Sprintf("and %d more problems from here on, not listed (the first %d are)", ps.dropped, MaxErrors)})
	}
	if len(ps.errs) > 0 {
		slices.SortStableFunc(ps.errs, compareErrors)
		errs := ps.errs
		return nil, &errs
	}
	p.warnings = ps.warns
	return p, nil
}

type parser struct {
	file   string
	errs   Errors
	warns  []Error
	nrules int    // allow and deny rules read so far; MaxRules+1 once the bound is reported
	data   []byte // the file, for messages that must find a line themselves
	// dropped counts the errors past MaxErrors, not listed; droppedAt
	// is where the first of them is.
	dropped   int
	droppedAt Error
}

func (ps *parser) errAt(line, col int, format string, args ...any) {
	if len(ps.errs) >= MaxErrors {
		if ps.dropped == 0 || compareErrors(Error{Line: line, Col: col}, ps.droppedAt) < 0 {
			ps.droppedAt = Error{Line: line, Col: col}
		}
		ps.dropped++
		return
	}
	ps.errs = append(ps.errs, Error{File: ps.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

func (ps *parser) errf(n *yaml.Node, format string, args ...any) {
	ps.errAt(n.Line, n.Column, format, args...)
}

func (ps *parser) warnf(n *yaml.Node, format string, args ...any) {
	ps.warns = append(ps.warns, Error{File: ps.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns an error from the YAML library into an Error.
func (ps *parser) syntaxError(err error) {
	msg := err.Error()
	line := 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if n, aerr := strconv.Atoi(m[1]); aerr == nil {
			line = n
		}
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	// The YAML library reports a tab in the indentation at the line
	// before it, or as a character that cannot start a token: name the
	// line that holds the tab, and say what is wrong.
	if strings.Contains(msg, "tab character") || strings.Contains(msg, "cannot start any token") {
		if l, ok := tabIndentLine(ps.data, max(line-1, 1)); ok && l <= line+1 {
			ps.errAt(l, 1, "a tab in the indentation; YAML indents with spaces only")
			return
		}
	}
	ps.errAt(line, 1, "yaml: %s", msg)
}

// tabIndentLine returns the first line at or after from (1-based) whose
// indentation holds a tab.
func tabIndentLine(data []byte, from int) (int, bool) {
	for i, l := range bytes.Split(data, []byte("\n")) {
		if i+1 < from {
			continue
		}
		indent := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
		if bytes.IndexByte(indent, '\t') >= 0 {
			return i + 1, true
		}
	}
	return 0, false
}

func (ps *parser) document(data []byte, p *Policy) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			ps.errAt(1, 1, "empty policy; a policy starts with version: 1")
			return
		}
		ps.syntaxError(err)
		return
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		ps.errf(&extra, "more than one YAML document; a policy is one document")
	} else if !errors.Is(err, io.EOF) {
		ps.syntaxError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			ps.errAt(1, 1, "empty policy; a policy starts with version: 1")
			return
		}
		root = root.Content[0]
	}
	if !ps.noAliases(root) {
		return
	}
	if isNull(root) {
		ps.errf(root, "empty policy; a policy starts with version: 1")
		return
	}
	var allow, deny []rule
	var credNode *yaml.Node // read once the allow rules are known
	sawVersion := false
	ps.mapping(root, "policy", map[string]func(k, v *yaml.Node){
		"version": func(k, v *yaml.Node) {
			sawVersion = true
			n, ok := ps.integer(v, "version")
			if ok && n != 1 {
				ps.errf(v, "version: unsupported version %d; this nsgate reads version 1", n)
			}
		},
		"allow": func(k, v *yaml.Node) { allow = ps.rules(v, "allow") },
		"deny":  func(k, v *yaml.Node) { deny = ps.rules(v, "deny") },
		"dns":   func(k, v *yaml.Node) { ps.dns(v, p) },
		"tls": func(k, v *yaml.Node) {
			ps.mapping(v, "tls", map[string]func(k, v *yaml.Node){
				"verify_sni": func(k, v *yaml.Node) {
					if b, ok := ps.boolean(v, "tls.verify_sni"); ok {
						p.verifySNI = b
						if !b {
							ps.warnf(v, "tls.verify_sni is false: a TLS flow opened by name may carry any SNI")
						}
					}
				},
				"refusal_alert": func(k, v *yaml.Node) {
					if b, ok := ps.boolean(v, "tls.refusal_alert"); ok {
						p.noRefusalAlert = !b
					}
				},
				"upstream_ca": func(k, v *yaml.Node) {
					if s, ok := ps.str(v, "tls.upstream_ca"); ok {
						if !path.IsAbs(s) {
							ps.errf(v, "tls.upstream_ca: %q is not an absolute path", s)
							return
						}
						p.upstreamCA = path.Clean(s)
					}
				},
			})
		},
		"http": func(k, v *yaml.Node) {
			ps.mapping(v, "http", map[string]func(k, v *yaml.Node){
				"verify_host": func(k, v *yaml.Node) {
					if b, ok := ps.boolean(v, "http.verify_host"); ok {
						p.verifyHost = b
						if !b {
							ps.warnf(v, "http.verify_host is false: a plain HTTP flow opened by name may carry any Host")
						}
					}
				},
				"refusal_page": func(k, v *yaml.Node) {
					if b, ok := ps.boolean(v, "http.refusal_page"); ok {
						p.noRefusalPage = !b
					}
				},
			})
		},
		"exec": func(k, v *yaml.Node) {
			ps.mapping(v, "exec", map[string]func(k, v *yaml.Node){
				"allow": func(k, v *yaml.Node) { p.execAllow = ps.execPaths(v) },
			})
		},
		"filesystem":  func(k, v *yaml.Node) { ps.filesystem(v, p) },
		"credentials": func(k, v *yaml.Node) { credNode = v },
	})
	if root.Kind == yaml.MappingNode && !sawVersion {
		ps.errf(root, "version: missing; a policy starts with version: 1")
	}
	p.allow = newRuleSet(allow)
	p.deny = newRuleSet(deny)
	for i := range allow {
		p.hasTerminate = p.hasTerminate || allow[i].terminate
	}
	if credNode != nil {
		p.credentials = ps.credentials(credNode, p)
	}
}

// noAliases reports whether the tree is free of aliases, flagging the
// first one (in document order; an alias bomb has thousands).
func (ps *parser) noAliases(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode {
		ps.errf(n, "aliases (*%s) are not supported; write the value out", n.Value)
		return false
	}
	for _, c := range n.Content {
		if !ps.noAliases(c) {
			return false
		}
	}
	return true
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!bool":
			return "a boolean"
		case "!!float":
			return "a number"
		case "!!null":
			return "empty"
		}
		return "a " + n.ShortTag() + " value"
	}
	return "an unexpected node"
}

// mapping walks a mapping node, calling fields[key] for each key and
// flagging non-string, unknown and duplicate keys. A null node counts as an
// empty mapping.
func (ps *parser) mapping(n *yaml.Node, what string, fields map[string]func(k, v *yaml.Node)) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		ps.errf(n, "%s: expected a mapping, found %s", what, kindName(n))
		return
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			ps.errf(k, "%s: keys must be plain names, found %s", what, kindName(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			ps.errf(k, "%s: duplicate key %q (first at line %d)", what, k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		f, ok := fields[k.Value]
		if !ok {
			ps.errf(k, "%s: unknown key %q; expected %s", what, k.Value, keyList(fields))
			continue
		}
		f(k, v)
	}
}

func keyList(fields map[string]func(k, v *yaml.Node)) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) == 1 {
		return keys[0]
	}
	return strings.Join(keys[:len(keys)-1], ", ") + " or " + keys[len(keys)-1]
}

// entries returns the items of a list bounded by MaxEntries (sequence);
// past the bound, one error at the first entry too many, and the entries
// before it.
func (ps *parser) entries(n *yaml.Node, what string) ([]*yaml.Node, bool) {
	items, ok := ps.sequence(n, what)
	if ok && len(items) > MaxEntries {
		ps.errf(items[MaxEntries], "%s: too many entries: at most %d", what, MaxEntries)
		items = items[:MaxEntries]
	}
	return items, ok
}

// sequence returns the items of a list node; a null node is an empty list.
func (ps *parser) sequence(n *yaml.Node, what string) ([]*yaml.Node, bool) {
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		ps.errf(n, "%s: expected a list, found %s", what, kindName(n))
		return nil, false
	}
	return n.Content, true
}

func (ps *parser) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		ps.errf(n, "%s: expected a string, found %s", what, kindName(n))
		return "", false
	}
	if n.Value == "" {
		ps.errf(n, "%s: empty string", what)
		return "", false
	}
	return n.Value, true
}

func (ps *parser) integer(n *yaml.Node, what string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		ps.errf(n, "%s: expected an integer, found %s", what, kindName(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		ps.errf(n, "%s: %s is out of range", what, n.Value)
		return 0, false
	}
	return v, true
}

func (ps *parser) boolean(n *yaml.Node, what string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		ps.errf(n, "%s: expected true or false, found %s", what, kindName(n))
		return false, false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		ps.errf(n, "%s: expected true or false", what)
		return false, false
	}
	return v, true
}

// rules parses the allow or deny list.
func (ps *parser) rules(n *yaml.Node, section string) []rule {
	items, ok := ps.sequence(n, section)
	if !ok {
		return nil
	}
	out := make([]rule, 0, min(len(items), MaxRules))
	for i, item := range items {
		id := section + "[" + strconv.Itoa(i) + "]"
		if ps.nrules >= MaxRules {
			if ps.nrules == MaxRules {
				ps.errf(item, "%s: too many rules: allow and deny hold at most %d rules together", id, MaxRules)
				ps.nrules++ // reported once
			}
			break
		}
		ps.nrules++
		if r, ok := ps.rule(item, section, id); ok {
			out = append(out, r)
		} else {
			// Keep indexes equal to file positions; the policy is
			// rejected anyway.
			out = append(out, rule{id: id})
		}
	}
	return out
}

func (ps *parser) rule(n *yaml.Node, section, id string) (rule, bool) {
	r := rule{id: id, protos: maskTCP}
	if section == "deny" {
		r.protos = maskAny
	}
	if isNull(n) || n.Kind != yaml.MappingNode {
		ps.errf(n, "%s: expected a rule (a mapping with host or cidr), found %s", id, kindName(n))
		return r, false
	}
	nerr := len(ps.errs)
	var dest *yaml.Node // the host or cidr key seen first
	var l7Key, tlsKey, reqKey *yaml.Node
	sawPorts := false
	ps.mapping(n, id, map[string]func(k, v *yaml.Node){
		"host": func(k, v *yaml.Node) {
			if dest != nil {
				ps.errf(k, "%s: has both host and cidr; use one rule for each", id)
				return
			}
			dest = k
			s, ok := ps.str(v, id+".host")
			if !ok {
				return
			}
			name, wild, err := parseHostPattern(s)
			if err != nil {
				ps.errf(v, "%s.host: %v", id, err)
				return
			}
			r.host, r.wild = name, wild
			r.line, r.col = int32(v.Line), int32(v.Column)
			if !wild && metadataNameReason(name) != "" && section == "allow" {
				ps.warnf(v, "%s.host: %s is a cloud metadata name; it stays denied", id, name)
			}
			if wild && section == "allow" {
				if suffix, _ := publicsuffix.PublicSuffix(name); suffix == name {
					ps.warnf(v, "%s.host: %s is a public suffix: *.%s allows every name registered under it, whoever owns it", id, name, name)
				}
			}
		},
		"cidr": func(k, v *yaml.Node) {
			if dest != nil {
				ps.errf(k, "%s: has both host and cidr; use one rule for each", id)
				return
			}
			dest = k
			s, ok := ps.str(v, id+".cidr")
			if !ok {
				return
			}
			pr, err := parseCIDR(s)
			if err != nil {
				ps.errf(v, "%s.cidr: %v", id, err)
				return
			}
			r.prefix = pr
			r.line, r.col = int32(v.Line), int32(v.Column)
			if section == "allow" {
				ps.warnSpecialCIDR(v, id, pr)
			}
		},
		"ports": func(k, v *yaml.Node) {
			sawPorts = true
			r.ports = ps.ports(v, id+".ports")
		},
		"proto": func(k, v *yaml.Node) {
			s, ok := ps.str(v, id+".proto")
			if !ok {
				return
			}
			switch s {
			case "tcp":
				r.protos = maskTCP
			case "udp":
				r.protos = maskUDP
			case "any":
				r.protos = maskAny
			default:
				ps.errf(v, "%s.proto: %q is not a protocol; use tcp, udp or any", id, s)
			}
		},
		"l7": func(k, v *yaml.Node) {
			s, ok := ps.str(v, id+".l7")
			if !ok {
				return
			}
			if s != "none" {
				ps.errf(v, "%s.l7: %q is not an l7 mode; the only one is none (omit the key for the QUIC Initial check)", id, s)
				return
			}
			l7Key, r.l7None = k, true
		},
		"tls": func(k, v *yaml.Node) {
			s, ok := ps.str(v, id+".tls")
			if !ok {
				return
			}
			if s != "terminate" {
				ps.errf(v, "%s.tls: %q is not a tls mode; the only one is terminate (omit the key for the SNI-checked passthrough)", id, s)
				return
			}
			tlsKey, r.terminate = k, true
		},
		"requests": func(k, v *yaml.Node) {
			reqKey = k
			r.requests = ps.requests(v, id+".requests")
		},
	})
	switch {
	case tlsKey != nil && section != "allow":
		ps.errf(tlsKey, "%s.tls: only allow rules take tls: terminate", id)
	case tlsKey != nil && dest != nil && r.prefix.IsValid():
		ps.errf(tlsKey, "%s.tls: only host rules take tls: terminate; a cidr rule's flows have no name to issue a certificate for", id)
	case tlsKey != nil && r.protos != maskTCP:
		ps.errf(tlsKey, "%s.tls: tls: terminate needs proto: tcp (QUIC to a terminated host is refused)", id)
	}
	if reqKey != nil && tlsKey == nil {
		ps.errf(reqKey, "%s.requests: request rules need tls: terminate; without it nsgate cannot see requests inside TLS", id)
	}
	if l7Key != nil {
		// l7: none lifts the QUIC check of a host rule's UDP flows; it
		// means nothing elsewhere, and a reader would think it did.
		switch {
		case section != "allow":
			ps.errf(l7Key, "%s.l7: only allow rules take l7: none", id)
		case dest != nil && r.prefix.IsValid():
			ps.errf(l7Key, "%s.l7: only host rules take l7: none; flows to a cidr rule's addresses have no name to check", id)
		case r.protos&maskUDP == 0:
			ps.errf(l7Key, "%s.l7: l7: none applies to UDP flows; this rule allows tcp only (TLS and HTTP over TCP are always checked)", id)
		}
	}
	if dest == nil {
		ps.errf(n, "%s: empty rule; give a host or a cidr", id)
	}
	if len(ps.errs) > nerr {
		return r, false
	}
	if !sawPorts && section == "allow" {
		ps.warnf(n, "%s: ports omitted: all ports allowed", id)
	}
	r.reason = "matches " + id + ": " + r.describe()
	return r, true
}

// warnSpecialCIDR warns when an allow cidr overlaps the built-in sets. A
// rule inside a special range opens that part of it (Decide step 3); a
// rule broader than a special range does not open it at all, which is
// worth saying since the rule reads as if it did; metadata stays denied.
func (ps *parser) warnSpecialCIDR(v *yaml.Node, id string, pr netip.Prefix) {
	var broader []string
	var inside *specialRange
	for i := range specialRanges {
		sr := &specialRanges[i]
		switch {
		case !sr.prefix.Overlaps(pr):
		case pr.Bits() < sr.prefix.Bits():
			broader = append(broader, sr.prefix.String())
		case inside == nil || sr.prefix.Bits() > inside.prefix.Bits():
			inside = sr
		}
	}
	if inside != nil {
		ps.warnf(v, "%s.cidr: %s is inside special range %s (%s); flows there that this rule matches are allowed", id, pr, inside.prefix, inside.what)
	}
	if len(broader) > 0 {
		ps.warnf(v, "%s.cidr: %s does not open the special ranges inside it (%s); flows there stay denied unless a cidr rule inside the range or dns.hosts allows them", id, pr, strings.Join(broader, ", "))
	}
	for _, m := range metadataAddrs {
		if pr.Contains(m.addr) {
			ps.warnf(v, "%s.cidr: %s contains cloud metadata addresses; they stay denied", id, pr)
			break
		}
	}
}

// parseCIDR parses a canonical prefix; IPv4-mapped prefixes become IPv4.
func parseCIDR(s string) (netip.Prefix, error) {
	pr, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			a = a.WithZone("").Unmap()
			return netip.Prefix{}, fmt.Errorf("%s has no prefix length; write %s", s, netip.PrefixFrom(a, a.BitLen()))
		}
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix such as 203.0.113.0/24", s)
	}
	if m := pr.Masked(); m != pr {
		return netip.Prefix{}, fmt.Errorf("%s is not canonical (host bits set); use %s", s, m)
	}
	return unmapPrefix(pr), nil
}

// ports parses a ports list into sorted, merged ranges.
func (ps *parser) ports(n *yaml.Node, what string) []portRange {
	if isNull(n) {
		ps.errf(n, "%s: empty; omit the key to allow all ports", what)
		return nil
	}
	items, ok := ps.sequence(n, what)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		ps.errf(n, "%s: empty list; omit the key to allow all ports", what)
		return nil
	}
	var out []portRange
	for i, it := range items {
		itemWhat := what + "[" + strconv.Itoa(i) + "]"
		if it.Kind == yaml.ScalarNode && (it.ShortTag() == "!!int" || it.ShortTag() == "!!float") {
			// YAML also reads 0x1BB, 0o120, 0120 (octal), 1_000 and
			// +80 as integers; a port is written in decimal only.
			v, err := parsePort(it.Value)
			if err != nil {
				ps.errf(it, "%s: %v", itemWhat, err)
				continue
			}
			out = append(out, portRange{v, v})
			continue
		}
		s, ok := ps.str(it, itemWhat)
		if !ok {
			continue
		}
		pr, err := parsePortRange(s)
		if err != nil {
			ps.errf(it, "%s: %v", itemWhat, err)
			continue
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b portRange) int { return int(a.lo) - int(b.lo) })
	merged := out[:0]
	for _, pr := range out {
		if k := len(merged); k > 0 && uint32(pr.lo) <= uint32(merged[k-1].hi)+1 {
			merged[k-1].hi = max(merged[k-1].hi, pr.hi)
			continue
		}
		merged = append(merged, pr)
	}
	if len(merged) == 0 {
		return nil
	}
	return slices.Clip(merged)
}

// parsePortRange parses "443" or "8000-8100" (spaces around the hyphen
// allowed), each port in decimal.
func parsePortRange(s string) (portRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	if isRange && (strings.TrimSpace(lo) == "" || strings.TrimSpace(hi) == "") {
		return portRange{}, fmt.Errorf("port must be a decimal number 1-65535 or a range such as \"8000-8100\", not %q", s)
	}
	if !isRange {
		a, err := parsePort(strings.TrimSpace(s))
		if err != nil {
			if !isDecimal(strings.TrimSpace(s)) {
				return portRange{}, fmt.Errorf("port must be a decimal number 1-65535 or a range such as \"8000-8100\", not %q", s)
			}
			return portRange{}, err
		}
		return portRange{a, a}, nil
	}
	a, err := parsePort(strings.TrimSpace(lo))
	if err != nil {
		return portRange{}, fmt.Errorf("range %q: %w", s, err)
	}
	b, err := parsePort(strings.TrimSpace(hi))
	if err != nil {
		return portRange{}, fmt.Errorf("range %q: %w", s, err)
	}
	if b < a {
		return portRange{}, fmt.Errorf("range %d-%d is reversed; write %d-%d", a, b, b, a)
	}
	return portRange{a, b}, nil
}

// parsePort parses one port: ASCII decimal digits without leading zeros
// (which YAML would read as octal), 1 to 65535.
func parsePort(s string) (uint16, error) {
	if !isDecimal(s) {
		return 0, fmt.Errorf("port must be a decimal number 1-65535, not %q", s)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("port must be a decimal number 1-65535 without leading zeros, not %q", s)
	}
	if len(s) > 5 {
		return 0, fmt.Errorf("port %s out of range 1-65535", s)
	}
	v, _ := strconv.Atoi(s)
	if v < 1 || v > 65535 {
		return 0, fmt.Errorf("port %d out of range 1-65535", v)
	}
	return uint16(v), nil
}

// isDecimal reports whether s is one or more ASCII digits and nothing else.
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (ps *parser) dns(n *yaml.Node, p *Policy) {
	ps.mapping(n, "dns", map[string]func(k, v *yaml.Node){
		"upstream": func(k, v *yaml.Node) {
			items, ok := ps.entries(v, "dns.upstream")
			if !ok {
				return
			}
			if len(items) == 0 {
				ps.errf(v, "dns.upstream: empty list; omit the key to use the host's resolv.conf")
				return
			}
			for i, it := range items {
				what := "dns.upstream[" + strconv.Itoa(i) + "]"
				s, ok := ps.str(it, what)
				if !ok {
					continue
				}
				ap, err := parseUpstream(s)
				if err != nil {
					ps.errf(it, "%s: %v", what, err)
					continue
				}
				if !slices.Contains(p.upstreams, ap) {
					p.upstreams = append(p.upstreams, ap)
				}
			}
		},
		"hosts": func(k, v *yaml.Node) { ps.hosts(v, p) },
		"block_page": func(k, v *yaml.Node) {
			if b, ok := ps.boolean(v, "dns.block_page"); ok {
				p.blockPage = b
			}
		},
	})
}

// parseUpstream accepts "ip", "ip:port", "[v6]" and "[v6]:port".
func parseUpstream(s string) (string, error) {
	var ap netip.AddrPort
	if x, err := netip.ParseAddrPort(s); err == nil {
		ap = x
	} else if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		ap = netip.AddrPortFrom(a, 53)
	} else {
		return "", fmt.Errorf("%q is not an IP address with an optional port, such as 127.0.0.53:53", s)
	}
	if ap.Port() == 0 {
		return "", fmt.Errorf("%s: port 0 is not a port", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), nil
}

func (ps *parser) hosts(n *yaml.Node, p *Policy) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		ps.errf(n, "dns.hosts: expected a mapping of name to addresses, found %s", kindName(n))
		return
	}
	p.hosts = make(map[string][]netip.Addr)
	seenAt := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if i/2 >= MaxHosts {
			ps.errf(k, "dns.hosts: too many names: at most %d", MaxHosts)
			break
		}
		key, ok := ps.str(k, "dns.hosts")
		if !ok {
			continue
		}
		what := "dns.hosts." + key
		name, err := NormalizeName(key)
		if err != nil {
			ps.errf(k, "dns.hosts: %v", err)
			continue
		}
		if line, dup := seenAt[name]; dup {
			ps.errf(k, "dns.hosts: duplicate name %s (first at line %d)", name, line)
			continue
		}
		seenAt[name] = k.Line
		if metadataNameReason(name) != "" {
			ps.warnf(k, "%s: %s is a cloud metadata name; it stays denied", what, name)
		}
		items, ok := ps.entries(v, what)
		if !ok {
			continue
		}
		if len(items) == 0 {
			ps.errf(v, "%s: no addresses", what)
			continue
		}
		var addrs []netip.Addr
		for j, it := range items {
			iw := what + "[" + strconv.Itoa(j) + "]"
			s, ok := ps.str(it, iw)
			if !ok {
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				ps.errf(it, "%s: %q is not an IP address", iw, s)
				continue
			}
			a = a.Unmap()
			if IsMetadataAddr(a) {
				ps.warnf(it, "%s: %s is a cloud metadata address; flows to it stay denied", iw, a)
			}
			if !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) > 0 {
			p.hosts[name] = addrs
		}
	}
}

func (ps *parser) execPaths(n *yaml.Node) []string {
	items, ok := ps.entries(n, "exec.allow")
	if !ok {
		return nil
	}
	var out []string
	for i, it := range items {
		what := "exec.allow[" + strconv.Itoa(i) + "]"
		s, ok := ps.str(it, what)
		if !ok {
			continue
		}
		if !strings.HasPrefix(s, "/") {
			ps.errf(it, "%s: %q is not an absolute path", what, s)
			continue
		}
		if strings.IndexByte(s, 0) >= 0 {
			ps.errf(it, "%s: path contains a NUL byte", what)
			continue
		}
		if path.Clean(s) == "/" {
			ps.warnf(it, "%s: %q is the root: every program on the host may run, as if there were no exec guard", what, s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
