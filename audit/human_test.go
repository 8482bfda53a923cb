package audit

import (
	"strings"
	"testing"
)

func TestFormatHuman(t *testing.T) {
	cases := []struct {
		why  string
		ev   Event
		want string
	}{
		{"the example line of docs/audit.md", denyFlow(41234),
			"nsgate: deny tcp 10.0.2.100:41234 -> 169.254.169.254:80 rule=builtin:metadata: 169.254.169.254 is a cloud metadata address"},
		{"a name flow shows its host and the answers it refused",
			Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: "198.18.0.7:443", Host: "app.test", Rule: "builtin:special-range",
				Reason: "no answer passed the policy", Refused: []string{"127.0.0.1", "10.0.0.1"}},
			"nsgate: deny tcp 10.0.2.100:1 -> 198.18.0.7:443 host=app.test rule=builtin:special-range refused=127.0.0.1,10.0.0.1: no answer passed the policy"},
		{"an aggregate shows its count", Packet{Action: "deny", Proto: "icmp", Src: "10.0.2.100", Dst: "203.0.113.9", Count: 41},
			"nsgate: deny icmp 10.0.2.100 -> 203.0.113.9 (41 more like this)"},
		{"a DNS denial names the query", DNS{Action: "deny", QName: "evil.test", QType: "AAAA", Rule: "default"},
			"nsgate: deny dns evil.test AAAA rule=default"},
		{"an allowed answer lists its addresses", DNS{Action: "allow", QName: "app.test", QType: "A", Answer: []string{"198.18.0.1"}, Rule: "allow[0]"},
			"nsgate: allow dns app.test A answer=198.18.0.1 rule=allow[0]"},
		{"a newline in a worker-chosen name cannot forge a second line",
			DNS{Action: "deny", QName: "a\nnsgate: allow tcp", QType: "A", Rule: "default"},
			`nsgate: deny dns "a\nnsgate: allow tcp" A rule=default`},
		{"terminal escapes are quoted", Exec{Action: "deny", Path: "/tmp/\x1b[31mred", PID: 3},
			`nsgate: deny exec "/tmp/\x1b[31mred" pid=3`},
		{"a path with a space stays one field", Exec{Action: "deny", Path: "/tmp/a b", PID: 3, Reason: "not in the exec allowlist"},
			`nsgate: deny exec "/tmp/a b" pid=3: not in the exec allowlist`},
		{"invalid UTF-8 is quoted", L7{Action: "deny", FlowSeq: 4, Host: "app.test", HTTPHost: "\xff.test"},
			`nsgate: deny l7 flow=4 host=app.test http_host="\xff.test"`},
		{"a quoting reason keeps its spaces", Flow{Action: "deny", Proto: "udp", Src: "10.0.2.100:5", Dst: "203.0.113.1:53", Rule: "default", Reason: "no rule allows udp"},
			"nsgate: deny udp 10.0.2.100:5 -> 203.0.113.1:53 rule=default: no rule allows udp"},
		{"inbound shows the path in", Inbound{Action: "allow", Listen: "127.0.0.1:8080", Dst: "10.0.2.100:80", Src: "127.0.0.1:4000"},
			"nsgate: allow inbound 127.0.0.1:4000 -> 127.0.0.1:8080 -> 10.0.2.100:80"},
		{"start", Start{Version: "1.0", PID: 9, Degraded: []string{"landlock"}},
			"nsgate: start version=1.0 pid=9 degraded=landlock"},
		{"flow end", FlowEnd{FlowSeq: 3, BytesOut: 1, BytesIn: 2, DurationMS: 3, Error: "reset"},
			"nsgate: flow_end flow=3 bytes_out=1 bytes_in=2 duration_ms=3 error=reset"},
		{"policy reload refused", Policy{Action: "refuse", Error: "bad yaml"}, "nsgate: policy refuse: bad yaml"},
		{"exit", Exit{Code: 2}, "nsgate: exit code=2"},
		{"exit with counters", Exit{Code: 0, Counters: &Counters{TCPAllowed: 2, UDPAllowed: 1, TCPDenied: 4, DNSAllowed: 3, DNSDenied: 1, BytesOut: 10, BytesIn: 20}},
			"nsgate: exit code=0 flows_allowed=3 flows_denied=4 dns_allowed=3 dns_denied=1 bytes_out=10 bytes_in=20"},
		{"a pointer renders like its value", &Exit{Code: 1}, "nsgate: exit code=1"},
		{"an empty field is visible", Flow{Action: "deny", Proto: "tcp", Rule: "default"}, `nsgate: deny tcp "" -> "" rule=default`},
	}
	for _, tc := range cases {
		if got := FormatHuman(tc.ev); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.why, got, tc.want)
		}
		if strings.ContainsAny(FormatHuman(tc.ev), "\n\r\x1b") {
			t.Errorf("%s: line holds a control character", tc.why)
		}
	}
}
