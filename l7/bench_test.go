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

// BenchmarkHTTPStream measures HTTPStream.Next on a kept-alive stream, as
// the relay calls it on 32 KiB reads: small GETs (every byte is head) and
// a chunked upload (almost every byte is counted through). It must not
// allocate.
func BenchmarkHTTPStream(b *testing.B) {
	get := "GET /index.html HTTP/1.1\r\nHost: app.test\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: text/html\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n\r\n"
	var gets []byte
	for len(gets)+len(get) <= 32<<10 {
		gets = append(gets, get...)
	}
	chunk := []byte("7ffa\r\n" + string(make([]byte, 0x7ffa)) + "\r\n")
	for _, c := range []struct {
		name        string
		first, each []byte
	}{
		{"Requests", nil, gets},
		{"Chunked", []byte("POST /up HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n"), chunk},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := NewHTTPStream("app.test", 80)
			if n, v := s.Next(c.first); !v.Allow || n != len(c.first) {
				b.Fatalf("%d %+v", n, v)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(c.each)))
			for b.Loop() {
				if n, v := s.Next(c.each); !v.Allow || n != len(c.each) {
					b.Fatalf("%d %+v", n, v)
				}
			}
		})
	}
}
