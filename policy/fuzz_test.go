package policy

import (
	"errors"
	"net/netip"
	"os"
	"path"
	"testing"
)

// FuzzParse checks that Parse never panics; that a rejected input yields
// located errors; and that an accepted one decides flows without panicking
// and has a deterministic summary that parses back to itself.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/example.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(decideSrc))
	f.Add([]byte("version: 1\n"))
	f.Add([]byte("version: 1\nallow:\n  - {cidr: \"::ffff:10.0.0.0/104\", proto: any}\n"))
	f.Add([]byte(gatewaySrc))
	f.Add([]byte("version: 1\nallow:\n  - {host: a.test, ports: [0x1BB, 0o120, 1_000, 0120, \"0443\", \"8000-8100\", \"0x10-0x20\", +80]}\n"))
	f.Add([]byte("version: 1\nallow:\n  - {cidr: 10.1.2.0/24, ports: [80]}\n  - {cidr: 0.0.0.0/0, proto: any}\n  - {cidr: 240.0.0.0/4}\n"))
	f.Add([]byte("version: 1\nx: &a [1, 2]\ny: [*a, *a]\nallow:\n  - {host: \"*.co.uk\", <<: {cidr: 0.0.0.0/0}}\nexec: {allow: [/usr/../]}\n"))
	f.Add([]byte("version: 1\nfilesystem:\n  write: [\"~/proj/\", /srv//data, \"~\"]\n  hide: [\"~/.ssh\", /etc/shadow]\n"))
	flows := []Flow{
		{TCP, "", netip.MustParseAddr("203.0.113.9"), 443},
		{UDP, "", netip.MustParseAddr("::ffff:127.0.0.1"), 53},
		{TCP, "", netip.MustParseAddr("2002:a9fe:a9fe::"), 80},
		{TCP, "app.test", netip.Addr{}, 80},
		{TCP, "a.b.cdn.test", netip.MustParseAddr("10.0.0.1"), 8080},
		{UDP, "Local.Test.", netip.MustParseAddr("127.0.0.1"), 0},
	}
	gateway := []Flow{
		{TCP, "", netip.MustParseAddr("10.0.2.2"), 80},
		{UDP, "", netip.MustParseAddr("fd00::2"), 53},
		{TCP, "", netip.MustParseAddr("198.18.0.5"), 443},
		{TCP, "", netip.MustParseAddr("64:ff9b::10.0.2.2"), 80},
		{TCP, "gw.test", netip.MustParseAddr("10.0.2.2"), 80},
	}
	local := []netip.Prefix{
		netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00::/64"),
		netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd6e:7367:6174::/64"),
	}
	special := []netip.Addr{
		netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("169.254.1.1"), netip.MustParseAddr("255.255.255.255"),
		netip.MustParseAddr("fd12::1"), netip.MustParseAddr("::1"),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			var errs *Errors
			if !errors.As(err, &errs) || len(*errs) == 0 {
				t.Fatalf("error %T without located errors: %v", err, err)
			}
			if len(*errs) > MaxErrors+1 {
				t.Fatalf("%d errors listed, more than MaxErrors and the count of the rest", len(*errs))
			}
			for _, e := range *errs {
				if e.Line < 1 || e.Col < 1 || e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("badly located error %+v", e)
				}
			}
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			return
		}
		for _, fl := range flows {
			d := p.Decide(fl)
			if d.Rule == "" || d.Reason == "" {
				t.Fatalf("Decide(%+v) = %+v: empty rule or reason", fl, d)
			}
			if IsMetadataAddr(fl.Addr) && d.Verdict == Allow {
				t.Fatalf("metadata allowed: %v", d)
			}
		}
		// The gateway's own addresses are never allowed once guarded.
		g := p.WithLocal(local...)
		for _, fl := range gateway {
			if d := g.Decide(fl); d.Verdict == Allow {
				t.Fatalf("gateway flow %+v allowed: %v", fl, d)
			}
		}
		// A special address is allowed only by a cidr rule inside its
		// range (or a host rule, never for an IP flow).
		for _, a := range special {
			for _, pr := range []Proto{TCP, UDP} {
				for _, port := range []uint16{53, 80, 443, 8080} {
					d := p.Decide(Flow{pr, "", a, port})
					if d.Verdict != Allow {
						continue
					}
					r := p.allowRule(d.Rule)
					sr := specialRangeOf(a)
					if r == nil || r.isHost() || r.prefix.Bits() < sr.prefix.Bits() || !sr.prefix.Contains(r.prefix.Addr()) {
						t.Fatalf("%v:%d in %s allowed by %v", a, port, sr.prefix, d)
					}
				}
			}
		}
		// Ports are well formed.
		for _, rs := range []*ruleSet{&p.allow, &p.deny} {
			for _, r := range rs.rules {
				for _, pr := range r.ports {
					if pr.lo < 1 || pr.hi < pr.lo {
						t.Fatalf("%s: bad port range %+v", r.id, pr)
					}
				}
			}
		}
		// Filesystem paths expand to absolute, clean paths; never / for write.
		if fs, err := p.Filesystem("/home/fuzz"); err == nil {
			for _, x := range append(fs.Write, fs.Hide...) {
				if !path.IsAbs(x) || path.Clean(x) != x || x == "/" {
					t.Fatalf("filesystem path %q", x)
				}
			}
		}
		for _, name := range []string{"app.test", "metadata", "x.cdn.test"} {
			_ = p.NameAllowed(name)
			_, _ = p.Explain(TCP, name, 443)
		}
		s := p.Summary()
		if s != p.Summary() {
			t.Fatal("Summary differs between calls")
		}
		p2, err := Parse("fuzz.yaml", data)
		if err != nil || p2.Summary() != s {
			t.Fatalf("second parse differs: %v", err)
		}
		q, err := Parse("summary.yaml", []byte(s))
		if err != nil {
			t.Fatalf("summary does not parse: %v\n%s", err, s)
		}
		if q.Summary() != s {
			t.Fatalf("summary changed on reparse:\n%s\n---\n%s", s, q.Summary())
		}
	})
}

// allowRule returns the allow rule with id "allow[i]", or nil.
func (p *Policy) allowRule(id string) *rule {
	for i := range p.allow.rules {
		if p.allow.rules[i].id == id {
			return &p.allow.rules[i]
		}
	}
	return nil
}
