package slirp

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseJSONValues(t *testing.T) {
	tests := []struct {
		why  string
		in   string
		want string // fmt.Sprint of the value, or "error"
	}{
		{"zero", `0`, "0"},
		{"negative zero", `-0`, "-0"},
		{"strtod takes 1.", `1.`, "1"},
		{"strtod takes -.5 (parson dispatches on '-')", `-.5`, "-0.5"},
		{"a bare dot", `.5`, "error"},
		{"a leading zero", `00`, "error"},
		{"a negative leading zero", `-01`, "error"},
		{"a fraction after zero", `0.25`, "0.25"},
		{"an exponent", `1e5`, "100000"},
		{"a negative exponent, upper case", `25E-1`, "2.5"},
		{"an exponent without digits", `1e`, "error"},
		{"an exponent with only a sign", `1e+`, "error"},
		{"underflow is zero, not an error", `1e-400`, "0"},
		{"overflow is an error", `-1e400`, "error"},
		{"hex", `0x10`, "0"}, // 0, then "x10" is trailing text, ignored
		{"a plus sign", `+1`, "error"},
		{"true", `true`, "true"},
		{"null", ` null `, "<nil>"},
		{"an escaped slash and unicode", `"a\/b\u00e9"`, "a/bé"},
		{"all simple escapes", `"\"\\\b\f\n\r\t"`, "\"\\\b\f\n\r\t"},
		{"an unterminated string", `"abc`, "error"},
		{"a backslash at the end", `"abc\`, "error"},
		{"an unterminated object", `{"a":1`, "error"},
		{"a key without a value", `{"a"}`, "error"},
		{"a key that is not a string", `{a:1}`, "error"},
		{"an unterminated array", `[1,2`, "error"},
		{"nested arrays", `[[],[1,[2]]]`, "[[] [1 [2]]]"},
		{"an object", `{"b":[true,null]}`, "map[b:[true <nil>]]"},
		{"nothing", ``, "error"},
		{"only white space", " \t\n", "error"},
		{"too deep", strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2), "error"},
		{"as deep as allowed", strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1), "ok"},
	}
	for _, tt := range tests {
		v, err := parseJSON([]byte(tt.in))
		got := fmt.Sprint(v)
		if err != nil {
			got = "error"
		} else if tt.want == "ok" {
			got = "ok"
		}
		if got != tt.want {
			t.Errorf("%s: parseJSON(%.40q) = %s, want %s", tt.why, tt.in, got, tt.want)
		}
	}
}

func TestQuoteJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{"tcp", `"tcp"`},
		{"10.0.2.100", `"10.0.2.100"`},
		{`a"b\c/d`, `"a\"b\\c\/d"`}, // parson escapes '/' too
		{"\b\f\n\r\t\x01", `"\b\f\n\r\t\u0001"`},
		{"é", `"é"`},
	}
	for _, tt := range tests {
		if got := quoteJSON(tt.in); got != tt.want {
			t.Errorf("quoteJSON(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
