package dns

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzServeDNS feeds arbitrary bytes to ServeDNS. The committed corpus in
// testdata/fuzz/FuzzServeDNS holds well-formed queries of each kind plus
// pointer loops, huge counts and truncations. Properties: no panic; a
// reply is a well-formed response with the query's ID; a UDP reply fits
// the size limit; every address answered is a fake one that maps back;
// nothing is ever sent upstream.
func FuzzServeDNS(f *testing.F) {
	f.Add(makeQuery(1, question("app.test.", dnsmessage.TypeA)), false)
	f.Add(makeQuery(2, question("app.test.", dnsmessage.TypeAAAA), withEDNS()), true)
	f.Add(makeQuery(3, question("1.0.18.198.in-addr.arpa.", dnsmessage.TypePTR)), false)
	f.Add([]byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}, false)

	s, _, up := newTestServer(f, Config{IPv6: true, MaxNames: 64, Audit: discardSink{}}, zone{})
	f.Fuzz(func(t *testing.T, msg []byte, tcp bool) {
		out := s.ServeDNS(msg, tcp)
		if n := up.count(); n != 0 {
			t.Fatalf("ServeDNS sent %d queries upstream", n)
		}
		if out == nil {
			if len(msg) >= headerLen && msg[2]&0x80 == 0 {
				t.Fatalf("query % x dropped", msg)
			}
			return
		}
		if len(msg) < headerLen {
			t.Fatalf("answered a %d-byte message", len(msg))
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("reply does not parse: %v\nquery % x\nreply % x", err, msg, out)
		}
		if !m.Response || m.ID != binary.BigEndian.Uint16(msg) {
			t.Fatalf("reply header %+v for query id %#x", m.Header, binary.BigEndian.Uint16(msg))
		}
		if !tcp && len(out) > ednsSize {
			t.Fatalf("udp reply of %d bytes", len(out))
		}
		for _, a := range answerAddrs(parsed{answers: m.Answers}) {
			if _, ok := s.NameOf(a); !ok {
				t.Fatalf("answered %v, which does not map back to a name", a)
			}
		}
	})
}

// FuzzParseReply feeds arbitrary upstream replies to the reply parser:
// upstream bytes are untrusted too. Properties: no panic; success means at
// least one address.
func FuzzParseReply(f *testing.F) {
	q := question("api.app.test.", dnsmessage.TypeA)
	f.Add(buildReply(7, q, dnsmessage.RCodeSuccess, rrA("api.app.test.", 60, "192.0.2.1")))
	f.Add(buildReply(7, q, dnsmessage.RCodeSuccess, rrCNAME("api.app.test.", 60, "b.test."), rrA("b.test.", 60, "192.0.2.1")))
	f.Add(buildReply(7, q, dnsmessage.RCodeSuccess, rrCNAME("api.app.test.", 60, "api.app.test.")))
	f.Add(buildReply(7, q, dnsmessage.RCodeNameError))
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, qt := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			got, _, err := parseReply(raw, 7, "api.app.test", qt)
			if err == nil && len(got) == 0 {
				t.Fatal("success without addresses")
			}
		}
	})
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add("nameserver 192.0.2.1\n# c\n; c\nnameserver fe80::1%eth0 # x\nsearch a b\n")
	f.Add("nameserver\nnameserver 1.2.3.4;x\r\nnameserver ::ffff:1.2.3.4")
	f.Fuzz(func(t *testing.T, data string) {
		for _, s := range ParseResolvConf([]byte(data)) {
			ap, err := netip.ParseAddrPort(s)
			if err != nil || ap.Port() != 53 {
				t.Fatalf("ParseResolvConf gave %q (%v)", s, err)
			}
		}
	})
}

// reverseName is the inverse of reverseAddr, for the round-trip property.
func reverseName(a netip.Addr) string {
	if a.Is4() {
		b := a.As4()
		return fmt.Sprintf("%d.%d.%d.%d.in-addr.arpa", b[3], b[2], b[1], b[0])
	}
	b := a.As16()
	var sb strings.Builder
	for i := 15; i >= 0; i-- {
		fmt.Fprintf(&sb, "%x.%x.", b[i]&0xf, b[i]>>4)
	}
	return sb.String() + "ip6.arpa"
}

func FuzzReverseAddr(f *testing.F) {
	f.Add("4.3.2.1.in-addr.arpa")
	f.Add(reverseName(netip.MustParseAddr("fd6e:7367:6174::1")))
	f.Add("1.2.3.in-addr.arpa")
	f.Fuzz(func(t *testing.T, name string) {
		a, ok := reverseAddr(name)
		if !ok {
			return
		}
		if back := reverseName(a); back != name {
			t.Fatalf("reverseAddr(%q) = %v, which names %q", name, a, back)
		}
	})
}

func TestParseResolvConf(t *testing.T) {
	for _, tc := range []struct {
		why  string
		in   string
		want []string
	}{
		{"plain IPv4 lines in order", "nameserver 192.0.2.1\nnameserver 192.0.2.2\n", []string{"192.0.2.1:53", "192.0.2.2:53"}},
		{"comments and other keywords are skipped", "# nameserver 192.0.2.9\n; nameserver 192.0.2.8\nsearch x.test\noptions ndots:2\nnameserver 192.0.2.1\n", []string{"192.0.2.1:53"}},
		{"a trailing comment is cut", "nameserver 192.0.2.1 # primary\nnameserver 192.0.2.2;x\n", []string{"192.0.2.1:53", "192.0.2.2:53"}},
		{"IPv6 gets brackets; a zone is kept", "nameserver 2001:db8::1\nnameserver fe80::1%eth0\n", []string{"[2001:db8::1]:53", "[fe80::1%eth0]:53"}},
		{"tabs, CRLF and leading blanks are fine", "\t nameserver\t192.0.2.1\r\n", []string{"192.0.2.1:53"}},
		{"junk addresses and bare keywords are ignored", "nameserver\nnameserver dns.test\nnameserver 300.1.1.1\nnameserverx 192.0.2.1\n", nil},
		{"empty file", "", nil},
	} {
		got := ParseResolvConf([]byte(tc.in))
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: got %q, want %q", tc.why, got, tc.want)
		}
	}
}
