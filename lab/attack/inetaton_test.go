package attack

import (
	"net/netip"
	"testing"
)

func TestParseInetAton(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means not an address
		why      string
	}{
		{"169.254.169.254", "169.254.169.254", "plain dotted quad"},
		{"2852039166", "169.254.169.254", "one decimal part fills 32 bits"},
		{"0xA9FEA9FE", "169.254.169.254", "hexadecimal, upper case digits"},
		{"0Xa9fea9fe", "169.254.169.254", "hexadecimal, 0X prefix"},
		{"0251.0376.0251.0376", "169.254.169.254", "four octal parts"},
		{"0251.254.169.254", "169.254.169.254", "octal first part only"},
		{"169.16689662", "169.254.169.254", "a.b: the last part fills 24 bits"},
		{"169.254.43518", "169.254.169.254", "a.b.c: the last part fills 16 bits"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254", "hex parts"},
		{"127.1", "127.0.0.1", "short loopback"},
		{"0", "0.0.0.0", "a lone zero"},
		{"00", "0.0.0.0", "octal zero"},
		{"4294967295", "255.255.255.255", "largest 32-bit value"},
		{"4294967296", "", "one past 32 bits"},
		{"7147006462", "", "overflow is refused (the overflow attempt wraps it itself)"},
		{"425.510.425.510", "", "parts over 255"},
		{"1.2.3.256", "", "last part over 255 in a.b.c.d"},
		{"1.2.65536", "", "last part over 16 bits in a.b.c"},
		{"1.2.3.4.5", "", "five parts"},
		{"08", "", "8 is not an octal digit"},
		{"0x", "", "hex prefix without digits"},
		{"1..2", "", "empty part"},
		{"1.2.3.", "", "trailing dot"},
		{"+1", "", "sign"},
		{"-1", "", "negative"},
		{"1_000", "", "underscores"},
		{"app.test", "", "a name"},
		{"", "", "empty"},
		{"::1", "", "IPv6 is not inet_aton's"},
	} {
		got, ok := ParseInetAton(tc.in)
		switch {
		case tc.want == "" && ok:
			t.Errorf("%q (%s): got %v, want not an address", tc.in, tc.why, got)
		case tc.want != "" && (!ok || got != netip.MustParseAddr(tc.want)):
			t.Errorf("%q (%s): got %v %v, want %s", tc.in, tc.why, got, ok, tc.want)
		}
	}
}

// FuzzParseInetAton: never panics, only returns IPv4, and agrees with
// netip on every plain dotted quad.
func FuzzParseInetAton(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "2852039166", "0xA9FEA9FE", "0251.0376.0251.0376", "127.1", "1.2.3.4.5", "0x", "08"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := ParseInetAton(s)
		if ok && !a.Is4() {
			t.Fatalf("%q gave non-IPv4 %v", s, a)
		}
		if p, err := netip.ParseAddr(s); err == nil && p.Is4() {
			if !ok || a != p {
				t.Fatalf("%q: netip says %v, ParseInetAton %v %v", s, p, a, ok)
			}
		}
	})
}
