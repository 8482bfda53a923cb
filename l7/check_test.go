package l7

import (
	"errors"
	"testing"
)

// classified is Classify on s, for building Check cases from real input.
func classified(t *testing.T, s string) Result {
	t.Helper()
	r := ClassifyFinal([]byte(s))
	checkInvariants(t, r)
	return r
}

func TestCheck(t *testing.T) {
	tlsApp := ClassifyFinal(handHello(sniExt("app.test")))
	tlsOther := ClassifyFinal(handHello(sniExt("other.test")))
	tlsBad := ClassifyFinal(handHello(sniExt("a..b")))
	httpOther := classified(t, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	httpAbsPort := classified(t, "GET http://app.test:81/ HTTP/1.1\r\n\r\n")
	httpBad := classified(t, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
	h2 := classified(t, h2Preface)
	proxy := classified(t, "PROXY UNKNOWN\r\n")
	other := classified(t, "SSH-2.0-x\r\n")

	tests := []struct {
		name       string
		r          Result
		sni, host  bool // verifySNI, verifyHost
		why        string
		allow      bool
		reason     string
		vSNI, vHTT string
	}{
		{"unknown", Result{NeedMore: true}, true, true,
			"an undecided result is never allowed: the relay must call ClassifyFinal", false, ReasonUnclassified, "", ""},
		{"unknown, checks off", Result{NeedMore: true}, false, false,
			"even with checks off, Check never allows what it cannot name", false, ReasonUnclassified, "", ""},
		{"kind out of range", Result{Kind: 99}, true, true,
			"an invalid Kind is denied", false, ReasonUnclassified, "", ""},
		{"other", other, true, true,
			"server-first and unknown protocols pass: the destination was approved", true, ReasonOther, "", ""},
		{"tls match", tlsApp, true, true,
			"SNI is the name", true, ReasonSNIMatch, "app.test", ""},
		{"tls mismatch", tlsOther, true, true,
			"SNI is another name", false, ReasonSNIMismatch, "other.test", ""},
		{"tls mismatch, host check only", tlsOther, false, true,
			"verify_host does not govern TLS", true, ReasonSNIOff, "other.test", ""},
		{"tls malformed, sni check off", tlsBad, false, true,
			"with verify_sni off TLS is not looked at, malformed or not", true, ReasonSNIOff, "", ""},
		{"tls malformed", tlsBad, true, false,
			"a malformed hello is refused with its error as the reason", false, string(errTLSSNILabel), "", ""},
		{"tls no sni", ClassifyFinal(handHello()), true, true,
			"no SNI", false, ReasonNoSNI, "", ""},
		{"http mismatch", httpOther, true, true,
			"Host is another name", false, ReasonHostMismatch, "", "other.test"},
		{"http mismatch, sni check only", httpOther, true, false,
			"verify_sni does not govern HTTP", true, ReasonHostOff, "", "other.test"},
		{"http absolute, wrong port", httpAbsPort, true, true,
			"the authority's port must be the flow's", false, ReasonPortMismatch, "", "app.test:81"},
		{"http malformed", httpBad, true, true,
			"malformed heads are refused", false, string(errHTTPTwoHosts), "", ""},
		{"http malformed, host check off", httpBad, true, false,
			"with verify_host off HTTP is not looked at", true, ReasonHostOff, "", ""},
		{"h2c", h2, true, true,
			"prior-knowledge h2c hides the authority", false, ReasonH2C, "", ""},
		{"h2c, host check off", h2, true, false,
			"nothing to check", true, ReasonHostOff, "", ""},
		{"proxy protocol", proxy, false, true,
			"either check refuses a PROXY header", false, ReasonProxyProto, "", ""},
		{"proxy protocol, checks off", proxy, false, false,
			"with both checks off nothing is inspected", true, ReasonChecksOff, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := uint16(80)
			v := Check("app.test", port, tt.r, tt.sni, tt.host)
			want := Verdict{Allow: tt.allow, Reason: tt.reason, SNI: tt.vSNI, HTTPHost: tt.vHTT}
			if v != want {
				t.Errorf("Check = %+v, want %+v (%s)", v, want, tt.why)
			}
		})
	}
}

// TestClassifyFinal checks the deadline decisions on stalled prefixes.
func TestClassifyFinal(t *testing.T) {
	tests := []struct {
		in   string
		why  string
		kind Kind
		err  error
	}{
		{"", "a client that sent nothing has nothing to check", Other, nil},
		{"\x16\x03", "a stalled ClientHello prefix", TLS, errTLSIncomplete},
		{"\x80", "a stalled SSLv2-format prefix", TLS, errSSLv2},
		{"\r\n\r\n\x00\r", "a stalled PROXY v2 signature", ProxyProtocol, errProxyIncomplete},
		{"PRI * HTTP", "a stalled h2c preface", HTTP2, errH2Incomplete},
		{"\r\n", "empty lines may precede a request line", HTTP, errHTTPIncomplete},
		{"G", "one token byte", HTTP, errHTTPIncomplete},
		{"FOO /x HT", "a stalled line may end in a version later", HTTP, errHTTPIncomplete},
		{"EHLO x\r\n", "a complete non-HTTP line decides without the deadline", Other, nil},
	}
	for _, tt := range tests {
		r := ClassifyFinal([]byte(tt.in))
		checkInvariants(t, r)
		if r.Kind != tt.kind || r.Err != tt.err {
			t.Errorf("ClassifyFinal(%q) = %v %v, want %v %v (%s)", tt.in, r.Kind, r.Err, tt.kind, tt.err, tt.why)
		}
	}
}

// TestMaxHold checks that Classify decides by itself once MaxHold bytes are
// held, and looks no further than MaxHold.
func TestMaxHold(t *testing.T) {
	long := make([]byte, MaxHold+100)
	for i := range long {
		long[i] = 'A'
	}
	for _, n := range []int{MaxHold, MaxHold + 1, len(long)} {
		r := Classify(long[:n])
		if r.NeedMore || r.Kind != HTTP || r.Err != errHTTPIncomplete {
			t.Errorf("Classify(%d token bytes) = %+v, want a decision", n, r)
		}
	}
	if r := Classify(long[:MaxHold-1]); !r.NeedMore {
		t.Errorf("Classify(MaxHold-1 token bytes) = %+v, want NeedMore", r)
	}
	// A request whose head ends just past MaxHold is refused however it
	// continues: the decision rests on the first MaxHold bytes.
	head := []byte("GET / HTTP/1.1\r\nHost: app.test\r\nX: ")
	for len(head) < MaxHold-2 {
		head = append(head, 'x')
	}
	head = append(head, "\r\n\r\n"...)
	if r := Classify(head); r.Err != errHTTPIncomplete {
		t.Errorf("head ending past MaxHold: %+v", r)
	}
	if r := Classify(head[:len(head)-4]); !r.NeedMore {
		t.Errorf("head below MaxHold: %+v", r)
	}
}

func TestErrorType(t *testing.T) {
	r := ClassifyFinal([]byte("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"))
	var e Error
	if !errors.As(r.Err, &e) || e != errHTTPTwoHosts {
		t.Fatalf("Err = %#v, want an Error", r.Err)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Unknown: "unknown", TLS: "tls", HTTP: "http", HTTP2: "h2c", ProxyProtocol: "proxy-protocol", Other: "other", 42: "kind(42)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// TestAllocs pins the allocation contract: nothing while waiting or in
// Check, one string per decided TLS or HTTP result.
func TestAllocs(t *testing.T) {
	hello := helloFor(t, "app.test")
	get := []byte("GET /index.html HTTP/1.1\r\nHost: app.test\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n")
	r := Classify(get)
	tests := []struct {
		name string
		f    func()
		max  float64
	}{
		{"classify partial hello", func() { Classify(hello[:len(hello)-1]) }, 0},
		{"classify partial get", func() { Classify(get[:len(get)-1]) }, 0},
		{"classify other", func() { Classify([]byte("SSH-2.0-x\r\n")) }, 0},
		{"classify malformed", func() { Classify([]byte("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")) }, 0},
		{"classify hello", func() { Classify(hello) }, 1},
		{"classify get", func() { Classify(get) }, 1},
		{"check", func() { Check("app.test", 80, r, true, true) }, 0},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, tt.f); n > tt.max {
			t.Errorf("%s: %v allocs, want at most %v", tt.name, n, tt.max)
		}
	}
}
