package l7

// TLS constants (RFC 8446, RFC 6066, draft-ietf-tls-esni).
const (
	recordTypeHandshake  = 22
	recordHeaderLen      = 5
	maxRecordPayload     = 1 << 14
	handshakeHeaderLen   = 4
	handshakeClientHello = 1
	extServerName        = 0
	extECH               = 0xfe0d
	sniHostName          = 0
	maxSessionID         = 32
	randomLen            = 32
)

// Errors of the TLS path.
const (
	errTLSIncomplete    Error = "tls: incomplete client hello"
	errTLSRecordType    Error = "tls: non-handshake record before the client hello ends"
	errTLSRecordVersion Error = "tls: bad record version"
	errTLSEmptyRecord   Error = "tls: empty handshake record"
	errTLSRecordLen     Error = "tls: record longer than 2^14 bytes"
	errTLSNotHello      Error = "tls: first handshake message is not a client hello"
	errTLSTooLarge      Error = "tls: client hello larger than the hold limit"
	errTLSVersion       Error = "tls: bad client hello version"
	errTLSLength        Error = "tls: client hello field overruns its length"
	errTLSSessionID     Error = "tls: session id longer than 32 bytes"
	errTLSCipherSuites  Error = "tls: bad cipher suites length"
	errTLSCompression   Error = "tls: no compression methods"
	errTLSExtensions    Error = "tls: extensions length does not match the message"
	errTLSDupSNI        Error = "tls: two server_name extensions"
	errTLSSNIList       Error = "tls: bad server_name list"
	errTLSSNIType       Error = "tls: server name of a type other than host_name"
	errTLSSNIEmpty      Error = "tls: empty server name"
	errTLSSNIChar       Error = "tls: invalid character in server name"
	errTLSSNILabel      Error = "tls: empty label in server name"
	errTLSSNILong       Error = "tls: server name too long"
	errTLSSNIConflict   Error = "tls: server_name lists two different names"
	errSSLv2            Error = "tls: sslv2-format client hello (cannot carry an sni)"
	errTLSFirstRecord   Error = "tls: first record is not a handshake record"
)

// records reads the handshake bytes carried by consecutive TLS handshake
// records in b, checking each record header as it is reached. Its zero
// offset is the start of the first record.
type records struct {
	b    []byte
	pos  int // index in b of the next unread byte
	left int // payload bytes of the current record not yet read
}

// fill makes sure a payload byte is available at pos: it crosses record
// headers (checking them) as needed. It returns errShort when b ends first.
// A partial record header is checked as far as it goes, so a bad one is
// reported before it is complete.
func (r *records) fill() error {
	for r.left == 0 {
		h := r.b[r.pos:]
		if len(h) > 0 && h[0] != recordTypeHandshake {
			return errTLSRecordType
		}
		if len(h) > 1 && h[1] != 3 {
			return errTLSRecordVersion
		}
		if len(h) > 2 && (h[2] < 1 || h[2] > 4) {
			return errTLSRecordVersion
		}
		if len(h) < recordHeaderLen {
			return errShort
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 {
			return errTLSEmptyRecord
		}
		if n > maxRecordPayload {
			return errTLSRecordLen
		}
		r.pos += recordHeaderLen
		r.left = n
	}
	if r.pos >= len(r.b) {
		return errShort
	}
	return nil
}

// byte1 reads one handshake byte.
func (r *records) byte1() (byte, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	c := r.b[r.pos]
	r.pos++
	r.left--
	return c, nil
}

// read fills dst with the next handshake bytes.
func (r *records) read(dst []byte) error {
	for len(dst) > 0 {
		if err := r.fill(); err != nil {
			return err
		}
		k := copy(dst[:min(len(dst), r.left)], r.b[r.pos:])
		r.pos += k
		r.left -= k
		dst = dst[k:]
	}
	return nil
}

// skip skips the next n handshake bytes.
func (r *records) skip(n int) error {
	for n > 0 {
		if err := r.fill(); err != nil {
			return err
		}
		k := min(n, r.left, len(r.b)-r.pos)
		r.pos += k
		r.left -= k
		n -= k
	}
	return nil
}

// hello reads the body of a handshake message of known length: reading
// past its end is errTLSLength.
type hello struct {
	rec  records
	left int
}

func (m *hello) take(n int) error {
	if n > m.left {
		return errTLSLength
	}
	m.left -= n
	return nil
}

func (m *hello) u8() (int, error) {
	if err := m.take(1); err != nil {
		return 0, err
	}
	c, err := m.rec.byte1()
	return int(c), err
}

func (m *hello) u16() (int, error) {
	if err := m.take(2); err != nil {
		return 0, err
	}
	hi, err := m.rec.byte1()
	if err != nil {
		return 0, err
	}
	lo, err := m.rec.byte1()
	return int(hi)<<8 | int(lo), err
}

func (m *hello) skip(n int) error {
	if err := m.take(n); err != nil {
		return err
	}
	return m.rec.skip(n)
}

func (m *hello) read(dst []byte) error {
	if err := m.take(len(dst)); err != nil {
		return err
	}
	return m.rec.read(dst)
}

// tlsResult turns a parse error into a result.
func tlsResult(err error) Result {
	if err == errShort {
		return needMore()
	}
	return Result{Kind: TLS, Err: err}
}

// classifyTLS classifies b, whose first byte is a handshake record type.
// It first checks that the records hold the whole ClientHello (walking
// record headers only, so that repeated calls on a growing b stay cheap),
// then parses it.
func classifyTLS(b []byte) Result {
	rec := records{b: b}
	var h [handshakeHeaderLen]byte
	for i := range h {
		c, err := rec.byte1()
		if err != nil {
			return tlsResult(err)
		}
		h[i] = c
		if i == 0 && c != handshakeClientHello {
			return tlsResult(errTLSNotHello)
		}
	}
	n := int(h[1])<<16 | int(h[2])<<8 | int(h[3])
	if recordHeaderLen+handshakeHeaderLen+n > MaxHold {
		return tlsResult(errTLSTooLarge)
	}
	probe := rec
	if err := probe.skip(n); err != nil {
		return tlsResult(err)
	}
	m := hello{rec: rec, left: n}
	r, err := parseClientHello(&m)
	if err != nil {
		return tlsResult(err)
	}
	return r
}

// parseClientHello parses a ClientHello body (RFC 8446 §4.1.2): version,
// random, session id, cipher suites, compression methods, then optional
// extensions, which must fill the rest of the message exactly.
func parseClientHello(m *hello) (Result, error) {
	ver, err := m.u16()
	if err != nil {
		return Result{}, err
	}
	if ver>>8 != 3 {
		return Result{}, errTLSVersion
	}
	if err := m.skip(randomLen); err != nil {
		return Result{}, err
	}
	n, err := m.u8()
	if err != nil {
		return Result{}, err
	}
	if n > maxSessionID {
		return Result{}, errTLSSessionID
	}
	if err := m.skip(n); err != nil {
		return Result{}, err
	}
	if n, err = m.u16(); err != nil {
		return Result{}, err
	}
	if n < 2 || n%2 != 0 {
		return Result{}, errTLSCipherSuites
	}
	if err := m.skip(n); err != nil {
		return Result{}, err
	}
	if n, err = m.u8(); err != nil {
		return Result{}, err
	}
	if n < 1 {
		return Result{}, errTLSCompression
	}
	if err := m.skip(n); err != nil {
		return Result{}, err
	}
	r := Result{Kind: TLS}
	if m.left == 0 {
		return r, nil // no extensions, so no SNI
	}
	if n, err = m.u16(); err != nil {
		return Result{}, err
	}
	if n != m.left {
		return Result{}, errTLSExtensions
	}
	var name [maxName + 1]byte
	nameLen := 0
	sawSNI := false
	for m.left > 0 {
		typ, err := m.u16()
		if err != nil {
			return Result{}, err
		}
		elen, err := m.u16()
		if err != nil {
			return Result{}, err
		}
		if elen > m.left {
			return Result{}, errTLSLength
		}
		switch typ {
		case extServerName:
			if sawSNI {
				return Result{}, errTLSDupSNI
			}
			sawSNI = true
			if nameLen, err = parseSNI(m, elen, &name); err != nil {
				return Result{}, err
			}
		case extECH:
			// The outer ClientHello's server_name is what the network
			// sees and what is checked; the inner one is encrypted.
			r.ECH = true
			err = m.skip(elen)
		default:
			err = m.skip(elen)
		}
		if err != nil {
			return Result{}, err
		}
	}
	if nameLen > 0 {
		r.SNI = string(name[:nameLen])
	}
	return r, nil
}

// parseSNI parses a server_name extension's data of elen bytes (RFC 6066
// §3) into name and returns the normalized name's length. Every entry must
// be a host_name (no real client sends another type, and servers disagree
// on what to do with one: some take the first entry whatever its type);
// several entries must name the same host.
func parseSNI(m *hello, elen int, name *[maxName + 1]byte) (int, error) {
	if elen < 2 {
		return 0, errTLSSNIList
	}
	list, err := m.u16()
	if err != nil {
		return 0, err
	}
	if list == 0 || list != elen-2 {
		return 0, errTLSSNIList
	}
	var other [maxName + 1]byte
	n := 0
	for list > 0 {
		if list < 3 {
			return 0, errTLSSNIList
		}
		typ, err := m.u8()
		if err != nil {
			return 0, err
		}
		l, err := m.u16()
		if err != nil {
			return 0, err
		}
		list -= 3
		if l > list {
			return 0, errTLSSNIList
		}
		list -= l
		switch {
		case typ != sniHostName:
			return 0, errTLSSNIType
		case l == 0:
			return 0, errTLSSNIEmpty
		case l > maxName+1:
			return 0, errTLSSNILong
		}
		dst := name[:l]
		if n > 0 {
			dst = other[:l]
		}
		if err := m.read(dst); err != nil {
			return 0, err
		}
		k, p := normName(dst)
		switch p {
		case nameEmpty:
			return 0, errTLSSNIEmpty
		case nameChar:
			return 0, errTLSSNIChar
		case nameEmptyLabel:
			return 0, errTLSSNILabel
		case nameLong:
			return 0, errTLSSNILong
		}
		if n == 0 {
			n = k
		} else if string(other[:k]) != string(name[:n]) {
			return 0, errTLSSNIConflict
		}
	}
	return n, nil
}

// classifySSLv2 classifies b, whose first byte has its high bit set: an
// SSLv2-format ClientHello (a two-byte record header with the high bit
// set, message type 1, version 3.x) is accepted by some servers for TLS up
// to 1.2, and can carry no SNI; anything else is Other.
func classifySSLv2(b []byte) Result {
	if !sslv2Prefix(b) {
		return Result{Kind: Other}
	}
	if len(b) < 5 {
		return needMore()
	}
	return Result{Kind: TLS, Err: errSSLv2}
}

// sslv2Prefix reports whether b, whose first byte has its high bit set,
// may still be an SSLv2-format ClientHello: message type 1, version 3.x.
func sslv2Prefix(b []byte) bool {
	return (len(b) < 3 || b[2] == 1) && (len(b) < 4 || b[3] == 3)
}

// isRecordType reports whether c is a TLS record content type other than
// handshake (change_cipher_spec, alert, application_data, heartbeat).
func isRecordType(c byte) bool {
	return c >= 20 && c <= 24 && c != recordTypeHandshake
}

// classifyOtherRecord classifies b, whose first byte is a TLS content type
// other than handshake. Followed by a 3.x record version it is a TLS
// record that is not a ClientHello: servers skip a warning alert or a
// change_cipher_spec before the ClientHello, so it could hide the real one
// from the check; refused. Otherwise b is not TLS.
func classifyOtherRecord(b []byte) Result {
	switch {
	case len(b) < 2:
		return needMore()
	case b[1] == 3:
		return Result{Kind: TLS, Err: errTLSFirstRecord}
	}
	return classifyText(b)
}
