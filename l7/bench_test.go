package l7

import "testing"

// BenchmarkClassify measures Classify on complete first flights: one
// allocation (the name string) per decided TLS or HTTP result.
func BenchmarkClassify(b *testing.B) {
	cases := []struct {
		name string
		in   []byte
	}{
		{"ClientHello", helloFor(b, "app.test")},
		{"ClientHelloSplit", resplit(b, helloFor(b, "app.test"), 512)},
		{"HTTPGet", []byte("GET /index.html HTTP/1.1\r\nHost: app.test\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
			"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate\r\n" +
			"Connection: keep-alive\r\n\r\n")},
		{"SSHBanner", []byte("SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.in)))
			for b.Loop() {
				r := Classify(c.in)
				if r.NeedMore || r.Err != nil {
					b.Fatalf("%+v", r)
				}
				if v := Check("app.test", 80, r, true, true); !v.Allow {
					b.Fatalf("%+v", v)
				}
			}
		})
	}
}
