package cliflag

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "1K": 1 << 10, "2M": 2 << 20, "2G": 2 << 30, "1GiB": 1 << 30, "3MB": 3 << 20, "1T": 1 << 40} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "1X", "-1", "1.5G", "99999999999T"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q): no error", bad)
		}
	}
}
