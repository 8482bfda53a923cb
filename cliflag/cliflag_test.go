package cliflag

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func newSet() (*Set, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	s := New("nsgate run", "Usage: nsgate run [flags] -- COMMAND", &out, &errb)
	s.String("policy", "", "policy `FILE`")
	s.String("audit", "", "audit log `FILE`")
	s.Uint("mtu", 1500, "MTU")
	s.Bool("quiet", false, "no denial lines")
	s.String("unsafe-break", "", "")
	s.Hide("unsafe-break")
	return s, &out, &errb
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		why    string
		args   []string
		help   bool
		stderr string // "" means no error
	}{
		{"GNU spelling", []string{"--policy", "p.yaml", "--quiet"}, false, ""},
		{"Go spelling works too", []string{"-policy=p.yaml"}, false, ""},
		{"a typo gets a suggestion", []string{"--polcy", "p.yaml"}, false, "nsgate run: unknown flag --polcy (did you mean --policy?) (see nsgate run --help)\n"},
		{"a prefix gets a suggestion", []string{"--aud", "x"}, false, "unknown flag --aud (did you mean --audit?)"},
		{"nothing near: no suggestion", []string{"--frobnicate"}, false, "unknown flag --frobnicate (see"},
		{"hidden flags are never suggested", []string{"--unsafe-brake"}, false, "unknown flag --unsafe-brake (see"},
		{"a bad value names the flag GNU-style", []string{"--mtu", "big"}, false, "invalid value \"big\" for --mtu"},
		{"a missing value", []string{"--policy"}, false, "flag --policy needs a value"},
		{"help is not an error", []string{"--help"}, true, ""},
		{"-h too", []string{"-h"}, true, ""},
	} {
		s, out, errb := newSet()
		err := s.Parse(tc.args)
		switch {
		case tc.help:
			if !errors.Is(err, ErrHelp) || errb.Len() != 0 || !strings.Contains(out.String(), "--policy FILE") {
				t.Errorf("%s: err %v, stdout %q, stderr %q", tc.why, err, out, errb)
			}
		case tc.stderr == "":
			if err != nil || errb.Len() != 0 {
				t.Errorf("%s: err %v, stderr %q", tc.why, err, errb)
			}
		default:
			if err == nil || !strings.Contains(errb.String(), tc.stderr) || strings.Count(errb.String(), "\n") != 1 {
				t.Errorf("%s: err %v, stderr %q; want one line containing %q", tc.why, err, errb, tc.stderr)
			}
		}
	}
}

func TestPrintUsage(t *testing.T) {
	s, _, _ := newSet()
	var b bytes.Buffer
	s.PrintUsage(&b)
	got := b.String()
	for _, want := range []string{"Usage: nsgate run", "--policy FILE", "--mtu uint", "(default 1500)", "--quiet\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("usage lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "unsafe-break") || strings.Contains(got, "\n  -policy") {
		t.Errorf("usage shows a hidden flag or the single-dash spelling:\n%s", got)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"policy", "policy", 0}, {"polcy", "policy", 1}, {"plicy", "policy", 1}, {"audit", "policy", 5}} {
		if got := distance(tc.a, tc.b); got != tc.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
