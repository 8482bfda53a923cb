package inbound

import (
	"fmt"
	"testing"
)

func TestParsePublish(t *testing.T) {
	for _, tc := range []struct {
		why, in, want string
		err           bool
	}{
		{"ports only: loopback, tcp", "19222:9222", "127.0.0.1:19222:9222/tcp", false},
		{"explicit host and udp", "0.0.0.0:5353:53/udp", "0.0.0.0:5353:53/udp", false},
		{"IPv6 host in brackets", "[::1]:8080:80", "::1:8080:80/tcp", false},
		{"one port is not enough", "8080", "", true},
		{"port zero", "0:80", "", true},
		{"port too large", "70000:80", "", true},
		{"unknown protocol", "80:80/sctp", "", true},
		{"a name is not an address", "localhost:80:80", "", true},
		{"IPv6 without brackets", "::1:80:80", "", true},
		{"unterminated bracket", "[::1:80:80", "", true},
		{"IPv4 in brackets", "[127.0.0.1]:80:80", "", true},
	} {
		r, err := ParsePublish(tc.in)
		got := fmt.Sprintf("%s:%d:%d/%s", r.HostAddr, r.HostPort, r.GuestPort, r.Proto)
		if tc.err {
			if err == nil {
				t.Errorf("%s: ParsePublish(%q) = %v, want an error", tc.why, tc.in, r)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: ParsePublish(%q) = %v, %v; want %s", tc.why, tc.in, got, err, tc.want)
		}
	}
}
