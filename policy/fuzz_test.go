package policy

import (
	"errors"
	"net/netip"
	"os"
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
	flows := []Flow{
		{TCP, "", netip.MustParseAddr("203.0.113.9"), 443},
		{UDP, "", netip.MustParseAddr("::ffff:127.0.0.1"), 53},
		{TCP, "", netip.MustParseAddr("2002:a9fe:a9fe::"), 80},
		{TCP, "app.test", netip.Addr{}, 80},
		{TCP, "a.b.cdn.test", netip.MustParseAddr("10.0.0.1"), 8080},
		{UDP, "Local.Test.", netip.MustParseAddr("127.0.0.1"), 0},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			var errs *Errors
			if !errors.As(err, &errs) || len(*errs) == 0 {
				t.Fatalf("error %T without located errors: %v", err, err)
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
