package policy

import (
	"slices"
	"strconv"
	"strings"
)

// Summary returns the policy in normalized form, for `nsgate check`: a
// policy file in the format Parse reads (names normalized, ports sorted and
// merged, defaults written out, proto explicit), with each rule's id and the
// built-in sets in comments. Two files that mean the same thing have the same
// summary, and parsing a summary gives a policy with the same summary.
func (p *Policy) Summary() string {
	var b strings.Builder
	b.WriteString("# nsgate policy, normalized\n")
	if p.learn {
		b.WriteString("# learning: what no rule below decides is allowed (rule learn)\n")
	}
	b.WriteString("version: 1\n")
	writeRules(&b, "allow", p.allow.rules)
	writeRules(&b, "deny", p.deny.rules)
	if p.upstreams != nil || len(p.hosts) > 0 || p.blockPage {
		b.WriteString("dns:\n")
		if p.blockPage {
			b.WriteString("  block_page: true\n")
		}
		if p.upstreams != nil {
			b.WriteString("  upstream: [")
			for i, u := range p.upstreams {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(strconv.Quote(u))
			}
			b.WriteString("]\n")
		} else {
			b.WriteString("  # upstream: the nameservers in the host's /etc/resolv.conf\n")
		}
		if len(p.hosts) > 0 {
			names := make([]string, 0, len(p.hosts))
			for n := range p.hosts {
				names = append(names, n)
			}
			slices.Sort(names)
			b.WriteString("  hosts:\n")
			for _, n := range names {
				b.WriteString("    ")
				b.WriteString(strconv.Quote(n))
				b.WriteString(": [")
				for i, a := range p.hosts[n] {
					if i > 0 {
						b.WriteString(", ")
					}
					b.WriteString(strconv.Quote(a.String()))
				}
				b.WriteString("]\n")
			}
		}
	} else {
		b.WriteString("# dns: upstream from the host's /etc/resolv.conf, no static hosts\n")
	}
	b.WriteString("tls: {verify_sni: " + strconv.FormatBool(p.verifySNI) + ", refusal_alert: " + strconv.FormatBool(p.RefusalAlert()))
	if p.upstreamCA != "" {
		b.WriteString(", upstream_ca: " + strconv.Quote(p.upstreamCA))
	}
	b.WriteString("}\n")
	b.WriteString("http: {verify_host: " + strconv.FormatBool(p.verifyHost) + ", refusal_page: " + strconv.FormatBool(p.RefusalPage()) + "}\n")
	if len(p.execAllow) > 0 {
		b.WriteString("exec:\n  allow:\n")
		for _, e := range p.execAllow {
			b.WriteString("    - " + strconv.Quote(e) + "\n")
		}
	} else {
		b.WriteString("# exec: the command and its interpreter only\n")
	}
	if len(p.fsWrite) > 0 || len(p.fsHide) > 0 {
		b.WriteString("filesystem:\n")
		writePaths(&b, "write", p.fsWrite)
		writePaths(&b, "hide", p.fsHide)
	} else {
		b.WriteString("# filesystem: no write or hide paths\n")
	}
	writeCredentials(&b, p.credentials)
	b.WriteString("# built in: cloud metadata (")
	for i, m := range metadataAddrs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.addr.String())
	}
	for _, m := range metadataNames {
		b.WriteString(", ")
		b.WriteString(m.name)
	}
	b.WriteString(") always denied\n")
	b.WriteString("# built in: special ranges (")
	for i, s := range specialRanges {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.prefix.String())
	}
	b.WriteString(") denied unless an allow cidr rule inside the range, or dns.hosts, covers the address\n")
	if len(p.local) > 0 {
		b.WriteString("# the gateway's own addresses (")
		for i, l := range p.local {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(l.String())
		}
		b.WriteString(") always denied: no rule opens them\n")
	}
	return b.String()
}

func writePaths(b *strings.Builder, key string, paths []string) {
	if len(paths) == 0 {
		return
	}
	b.WriteString("  " + key + ":\n")
	for _, x := range paths {
		b.WriteString("    - " + strconv.Quote(x) + "\n")
	}
}

func writeRules(b *strings.Builder, section string, rules []rule) {
	if len(rules) == 0 {
		b.WriteString(section + ": []\n")
		return
	}
	b.WriteString(section + ":\n")
	for i := range rules {
		r := &rules[i]
		b.WriteString("  - " + r.spec().YAML() + "  # " + r.id)
		if r.ports == nil {
			b.WriteString(", all ports")
		}
		b.WriteString("\n")
	}
}
