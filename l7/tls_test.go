package l7

import (
	"bytes"
	"crypto/tls"
	"strings"
	"testing"
)

func TestClassifyTLS(t *testing.T) {
	withSNI := helloFor(t, "app.test")
	noSNI := helloFor(t, "")
	ech := echHello(t, "secret.test", "app.test")
	echOther := echHello(t, "app.test", "public.test")
	tls12 := goClientHello(t, &tls.Config{ServerName: "app.test", MaxVersion: tls.VersionTLS12})

	// A hand-built hello whose extensions block is one byte too long.
	badExtLen := handHello(sniExt("app.test"))
	badExtLen[5+4+2+32+1+32+2+4+2+1]++ // low byte of the extensions length

	tests := []struct {
		name    string
		in      []byte
		why     string
		kind    Kind
		err     error
		sni     string
		ech     bool
		allow   bool
		reason  string
		partial bool // Classify asks for more (ClassifyFinal then decides)
	}{
		{name: "crypto/tls hello with sni", in: withSNI,
			why:  "the common case: a real client hello carrying the flow's name",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "crypto/tls hello tls1.2 only", in: tls12,
			why:  "a TLS 1.2 hello (no key_share, supported_versions) parses the same",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "crypto/tls hello for another name", in: helloFor(t, "other.test"),
			why:  "SNI names a different host than the flow's name: deny",
			kind: TLS, sni: "other.test", reason: ReasonSNIMismatch},
		{name: "crypto/tls hello without sni", in: noSNI,
			why:  "no SNI means the server picks its default host, which was not approved",
			kind: TLS, reason: ReasonNoSNI},
		{name: "two records split by hand", in: resplit(t, withSNI, 100, maxRecordPayload),
			why:  "a ClientHello may be fragmented over records; it is reassembled",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "one-byte records", in: resplit(t, withSNI, 1),
			why:  "the most fragmented legal form still fits MaxHold and parses",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "split inside the handshake header", in: resplit(t, withSNI, 2, 3, 5000),
			why:  "the 4-byte handshake header itself may straddle records",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "real ech, outer name matches", in: ech,
			why:  "with ECH the outer SNI is what the network sees and what is checked; the inner name is encrypted",
			kind: TLS, sni: "app.test", ech: true, allow: true, reason: ReasonSNIMatch},
		{name: "real ech, outer name differs", in: echOther,
			why:  "the outer (public) name is not the flow's name, even though the encrypted inner one is",
			kind: TLS, sni: "public.test", ech: true, reason: ReasonECHMismatch},
		{name: "ech-like extension by hand", in: handHello(sniExt("app.test"), ext{extECH, []byte{0, 1, 2, 3}}),
			why:  "a GREASE-style 0xfe0d extension is flagged and the outer SNI checked",
			kind: TLS, sni: "app.test", ech: true, allow: true, reason: ReasonSNIMatch},
		{name: "upper case and trailing dot", in: handHello(sniExt("App.TEST.")),
			why:  "names compare case-insensitively and without the root dot",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "no extensions block", in: handHello(),
			why:  "an old-style hello without extensions has no SNI",
			kind: TLS, reason: ReasonNoSNI},
		{name: "same name twice", in: handHello(sniExt("app.test", "APP.test")),
			why:  "repeated host_name entries are tolerated when they name the same host",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
		{name: "two different names", in: handHello(sniExt("app.test", "other.test")),
			why:  "servers differ on which entry they use: refuse the ambiguity",
			kind: TLS, err: errTLSSNIConflict, reason: string(errTLSSNIConflict)},
		{name: "two server_name extensions", in: handHello(sniExt("app.test"), sniExt("other.test")),
			why:  "a duplicate extension is illegal and ambiguous",
			kind: TLS, err: errTLSDupSNI, reason: string(errTLSDupSNI)},
		{name: "name type 1 before host_name", in: handHello(ext{extServerName, []byte{0, 14, 1, 0, 2, 'x', 'y', 0, 0, 6, 'a', 'p', 'p', '.', 't', 'e'}}),
			why:  "crypto/tls would skip the first entry and read the second; a naive server would read the first",
			kind: TLS, err: errTLSSNIType, reason: string(errTLSSNIType)},
		{name: "server_name list length off", in: handHello(ext{extServerName, []byte{0, 9, 0, 0, 8, 'a', 'p', 'p', '.', 't', 'e', 's', 't'}}),
			why:  "the list length must cover the extension exactly",
			kind: TLS, err: errTLSSNIList, reason: string(errTLSSNIList)},
		{name: "name type 1", in: handHello(ext{extServerName, []byte{0, 5, 1, 0, 2, 'x', 'y'}}),
			why:  "some servers take the first entry whatever its type; refuse other types",
			kind: TLS, err: errTLSSNIType, reason: string(errTLSSNIType)},
		{name: "nul in name", in: handHello(sniExt("app.test\x00.evil")),
			why:  "a NUL lets C servers and our comparison see different names",
			kind: TLS, err: errTLSSNIChar, reason: string(errTLSSNIChar)},
		{name: "space in name", in: handHello(sniExt("app test")),
			why:  "only host name characters are valid",
			kind: TLS, err: errTLSSNIChar, reason: string(errTLSSNIChar)},
		{name: "empty label", in: handHello(sniExt("app..test")),
			why:  "an empty label is not a host name",
			kind: TLS, err: errTLSSNILabel, reason: string(errTLSSNILabel)},
		{name: "empty name", in: handHello(sniExt("")),
			why:  "a zero-length host_name is illegal",
			kind: TLS, err: errTLSSNIEmpty, reason: string(errTLSSNIEmpty)},
		{name: "name too long", in: handHello(sniExt(strings.Repeat("a.", 127) + "aa")),
			why:  "longer than a DNS name can be",
			kind: TLS, err: errTLSSNILong, reason: string(errTLSSNILong)},
		{name: "extensions length off by one", in: badExtLen,
			why:  "the extensions block must fill the message exactly",
			kind: TLS, err: errTLSExtensions, reason: string(errTLSExtensions)},
		{name: "not a client hello", in: frame([]byte{2, 0, 0, 4, 3, 3, 0, 0}, 100),
			why:  "a handshake record from the client must start with a ClientHello",
			kind: TLS, err: errTLSNotHello, reason: string(errTLSNotHello)},
		{name: "bad record version", in: []byte{22, 3, 7, 0, 1, 1},
			why:  "record versions are 0x0301..0x0304; the first byte already committed to TLS",
			kind: TLS, err: errTLSRecordVersion, reason: string(errTLSRecordVersion)},
		{name: "ssl 3.0 record", in: []byte{22, 3, 0},
			why:  "SSL 3.0 is refused as soon as its version byte arrives",
			kind: TLS, err: errTLSRecordVersion, reason: string(errTLSRecordVersion)},
		{name: "empty record", in: []byte{22, 3, 1, 0, 0},
			why:  "zero-length handshake fragments are illegal",
			kind: TLS, err: errTLSEmptyRecord, reason: string(errTLSEmptyRecord)},
		{name: "oversized record", in: []byte{22, 3, 1, 0x40, 1},
			why:  "a plaintext record carries at most 2^14 bytes",
			kind: TLS, err: errTLSRecordLen, reason: string(errTLSRecordLen)},
		{name: "hello larger than the hold", in: []byte{22, 3, 1, 0x40, 0, 1, 0, 0x40, 0},
			why:  "a ClientHello that cannot fit in MaxHold is refused at once, not waited for",
			kind: TLS, err: errTLSTooLarge, reason: string(errTLSTooLarge)},
		{name: "application data inside the hello", in: append(resplit(t, withSNI, 50)[:55], 23, 3, 3, 0, 5),
			why:  "records of another type may not interleave with the ClientHello",
			kind: TLS, err: errTLSRecordType, reason: string(errTLSRecordType)},
		{name: "truncated hello", in: withSNI[:len(withSNI)-1],
			why:  "one byte short: Classify waits; at the deadline it is malformed",
			kind: TLS, err: errTLSIncomplete, reason: string(errTLSIncomplete), partial: true},
		{name: "record header only", in: withSNI[:5],
			why:  "a stalled prefix of a ClientHello is refused, never let through",
			kind: TLS, err: errTLSIncomplete, reason: string(errTLSIncomplete), partial: true},
		{name: "sslv2 hello", in: []byte{0x80, 0x2e, 1, 3, 1, 0, 0x15, 0, 0, 0, 0x10},
			why:  "SSLv2-format hellos cannot carry an SNI but some servers still take them",
			kind: TLS, err: errSSLv2, reason: string(errSSLv2)},
		{name: "high byte, not sslv2", in: []byte{0x85, 0x00, 0x07},
			why:  "a binary protocol whose first byte has its high bit set is Other",
			kind: Other, allow: true, reason: ReasonOther},
		{name: "trailing bytes after the hello", in: append(bytes.Clone(withSNI), 20, 3, 3, 0, 1, 1),
			why:  "a middlebox-compat ChangeCipherSpec after the hello does not change the decision",
			kind: TLS, sni: "app.test", allow: true, reason: ReasonSNIMatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkStable(t, tt.in, true)
			if c := Classify(tt.in); c.NeedMore != tt.partial {
				t.Errorf("Classify NeedMore = %v, want %v (%s)", c.NeedMore, tt.partial, tt.why)
			}
			if r.Kind != tt.kind || r.Err != tt.err || r.SNI != tt.sni || r.ECH != tt.ech {
				t.Errorf("got kind %v err %v sni %q ech %v; want %v %v %q %v (%s)",
					r.Kind, r.Err, r.SNI, r.ECH, tt.kind, tt.err, tt.sni, tt.ech, tt.why)
			}
			v := Check("app.test", 443, r, true, true)
			if v.Allow != tt.allow || v.Reason != tt.reason || v.SNI != r.SNI {
				t.Errorf("Check = %+v, want allow %v reason %q (%s)", v, tt.allow, tt.reason, tt.why)
			}
			checkAgainstGo(t, tt.in, r)
		})
	}
}

// TestClassifyTLSByteByByte feeds a real hello one byte at a time, as the
// relay would with the worst segmentation, and checks nothing is decided
// before the last byte.
func TestClassifyTLSByteByByte(t *testing.T) {
	for _, in := range [][]byte{helloFor(t, "app.test"), resplit(t, helloFor(t, "app.test"), 7)} {
		for n := 0; n < len(in); n++ {
			if r := Classify(in[:n]); !r.NeedMore {
				t.Fatalf("decided after %d of %d bytes: %+v", n, len(in), r)
			}
		}
		if r := Classify(in); r.Kind != TLS || r.SNI != "app.test" || r.Err != nil {
			t.Fatalf("full hello: %+v", r)
		}
	}
}

// TestClassifyTLSAgainstCryptoTLS checks, on many real hellos, that the SNI
// Classify reads is the one crypto/tls's server reads.
func TestClassifyTLSAgainstCryptoTLS(t *testing.T) {
	names := []string{"app.test", "a.b.c.cdn.test", "xn--bcher-kva.test", "x", strings.Repeat("a", 63) + ".test"}
	for _, name := range names {
		for _, max := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			in := goClientHello(t, &tls.Config{ServerName: name, MaxVersion: max, NextProtos: []string{"h2", "http/1.1"}})
			ok, sni := goServerSNI(in)
			r := Classify(in)
			if !ok || r.Err != nil || r.SNI != sni || r.SNI != name {
				t.Errorf("%s: crypto/tls ok=%v sni %q; Classify %+v", name, ok, sni, r)
			}
		}
	}
}
