package dns

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// Header flag bits (RFC 1035 §4.1.1).
const (
	flagQR = 1 << 15
	flagTC = 1 << 9
	flagRD = 1 << 8
	flagRA = 1 << 7

	headerLen = 12

	// maxUDP is the largest reply sent over UDP to a query without EDNS0.
	maxUDP = 512
	// ednsSize is the UDP payload size nsgate advertises and honours at most.
	ednsSize = 1232
)

// typeNames are the presentation names of the query types worth naming in
// the audit log; any other type is written as TYPEn (RFC 3597).
var typeNames = map[dnsmessage.Type]string{
	dnsmessage.TypeA:     "A",
	dnsmessage.TypeNS:    "NS",
	dnsmessage.TypeCNAME: "CNAME",
	dnsmessage.TypeSOA:   "SOA",
	dnsmessage.TypePTR:   "PTR",
	dnsmessage.TypeMX:    "MX",
	dnsmessage.TypeTXT:   "TXT",
	dnsmessage.TypeAAAA:  "AAAA",
	dnsmessage.TypeSRV:   "SRV",
	35:                   "NAPTR",
	dnsmessage.TypeOPT:   "OPT",
	43:                   "DS",
	46:                   "RRSIG",
	47:                   "NSEC",
	48:                   "DNSKEY",
	dnsmessage.TypeSVCB:  "SVCB",
	dnsmessage.TypeHTTPS: "HTTPS",
	257:                  "CAA",
	dnsmessage.TypeAXFR:  "AXFR",
	251:                  "IXFR",
	dnsmessage.TypeALL:   "ANY",
}

// TypeString returns the presentation name of a query type: "A", "AAAA",
// "HTTPS", ..., or "TYPE65280" for types without a mnemonic.
func TypeString(t dnsmessage.Type) string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// presentName renders a wire name (labels joined by dots, as dnsmessage
// returns it) for a person: printable ASCII is kept, a backslash is escaped,
// any other byte becomes \DDD (RFC 1035 §5.1). It is used for names that
// failed normalization, so that the audit log shows exactly what was asked
// without carrying raw control bytes or invalid UTF-8.
func presentName(raw string) string {
	clean := true
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			clean = false
			break
		}
	}
	if clean {
		return raw
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c <= ' ' || c >= 0x7f:
			b.WriteByte('\\')
			b.WriteByte('0' + c/100)
			b.WriteByte('0' + c/10%10)
			b.WriteByte('0' + c%10)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// reply builds one response by hand: header, the echoed question and at
// most a few small records whose owner is a compression pointer to the
// question name at offset 12. Building directly keeps the packet path
// allocation-light and the output independent of any encoder's choices.
type reply struct {
	buf     []byte
	qdcount uint16
	ancount uint16
	arcount uint16
	// qend is the offset just past the question section.
	qend int
	// ede, when set, is the Extended DNS Error the OPT record carries
	// (RFC 8914): why nsgate refused the name, for the program that asked.
	ede string
}

// Extended DNS Error (RFC 8914).
const (
	optionEDE  = 15 // the EDNS0 option code
	edeBlocked = 15 // INFO-CODE "Blocked": refused by the operator's policy
	// maxEDEText bounds the EXTRA-TEXT, so the reply stays far below the
	// UDP limit.
	maxEDEText = 200
)

// newReply starts a reply to a query with header h and rcode rc. When q
// is non-nil the question is echoed.
func newReply(h dnsmessage.Header, rc dnsmessage.RCode, q *dnsmessage.Question) reply {
	r := reply{buf: make([]byte, headerLen, 128)}
	bits := uint16(flagQR|flagRA) | uint16(h.OpCode&0xf)<<11 | uint16(rc&0xf)
	if h.RecursionDesired {
		bits |= flagRD
	}
	binary.BigEndian.PutUint16(r.buf[0:], h.ID)
	binary.BigEndian.PutUint16(r.buf[2:], bits)
	if q != nil {
		r.buf = appendName(r.buf, q.Name)
		r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(q.Type))
		r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(q.Class))
		r.qdcount = 1
	}
	r.qend = len(r.buf)
	return r
}

// appendName appends n in uncompressed wire form. n comes from the parser,
// so its labels hold no dots and are at most 63 bytes long.
func appendName(b []byte, n dnsmessage.Name) []byte {
	s := n.Data[:n.Length]
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '.' {
			i++
		}
		if i > 0 {
			b = append(b, byte(i))
			b = append(b, s[:i]...)
		}
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return append(b, 0)
}

// appendTextName appends a dotted ASCII name (no trailing dot needed) in
// wire form. The caller guarantees labels of 1..63 bytes.
func appendTextName(b []byte, name string) []byte {
	for name != "" {
		label, rest, _ := strings.Cut(name, ".")
		if label != "" {
			b = append(b, byte(len(label)))
			b = append(b, label...)
		}
		name = rest
	}
	return append(b, 0)
}

// answer appends one record owned by the question name.
func (r *reply) answer(t dnsmessage.Type, ttl uint32, rdata []byte) {
	r.buf = append(r.buf, 0xc0, headerLen) // pointer to the question name
	r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(t))
	r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(dnsmessage.ClassINET))
	r.buf = binary.BigEndian.AppendUint32(r.buf, ttl)
	r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(len(rdata)))
	r.buf = append(r.buf, rdata...)
	r.ancount++
}

// opt appends an EDNS0 OPT record: our payload size, and the Extended DNS
// Error "Blocked" with r.ede as its text when r.ede is set.
func (r *reply) opt() {
	r.buf = append(r.buf, 0) // root owner
	r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(dnsmessage.TypeOPT))
	r.buf = binary.BigEndian.AppendUint16(r.buf, ednsSize)
	r.buf = binary.BigEndian.AppendUint32(r.buf, 0)
	if r.ede == "" {
		r.buf = binary.BigEndian.AppendUint16(r.buf, 0)
	} else {
		text := r.ede[:min(len(r.ede), maxEDEText)]
		r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(4+2+len(text)))
		r.buf = binary.BigEndian.AppendUint16(r.buf, optionEDE)
		r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(2+len(text)))
		r.buf = binary.BigEndian.AppendUint16(r.buf, edeBlocked)
		r.buf = append(r.buf, text...)
	}
	r.arcount++
}

// finish writes the counts and returns the message. A UDP reply longer
// than limit is cut back to header and question with TC set, so the client
// retries over TCP.
func (r *reply) finish(limit int) []byte {
	if limit > 0 && len(r.buf) > limit {
		r.buf = r.buf[:r.qend]
		r.ancount, r.arcount = 0, 0
		r.buf[2] |= flagTC >> 8
	}
	binary.BigEndian.PutUint16(r.buf[4:], r.qdcount)
	binary.BigEndian.PutUint16(r.buf[6:], r.ancount)
	binary.BigEndian.PutUint16(r.buf[8:], 0)
	binary.BigEndian.PutUint16(r.buf[10:], r.arcount)
	return r.buf
}

// reverseAddr parses a normalized reverse-lookup name (d.c.b.a.in-addr.arpa
// or 32 nibbles under ip6.arpa) into the address it names.
func reverseAddr(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		var b [4]byte
		for i := 3; i >= 0; i-- {
			var label string
			if i == 0 {
				label = rest
			} else {
				var found bool
				label, rest, found = strings.Cut(rest, ".")
				if !found {
					return netip.Addr{}, false
				}
			}
			if len(label) == 0 || len(label) > 3 || (len(label) > 1 && label[0] == '0') {
				return netip.Addr{}, false
			}
			n, err := strconv.ParseUint(label, 10, 8)
			if err != nil {
				return netip.Addr{}, false
			}
			b[i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa"); ok {
		// 32 nibbles, least significant first, each followed by a dot
		// except the last: 63 bytes.
		if len(rest) != 63 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i := 0; i < 32; i++ {
			c := rest[2*i]
			if i < 31 && rest[2*i+1] != '.' {
				return netip.Addr{}, false
			}
			var v byte
			switch {
			case c >= '0' && c <= '9':
				v = c - '0'
			case c >= 'a' && c <= 'f':
				v = c - 'a' + 10
			default:
				return netip.Addr{}, false
			}
			// Nibble i counts from the least significant end.
			pos := 31 - i
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}
