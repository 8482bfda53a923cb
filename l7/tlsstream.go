package l7

// Errors of a TLS flow after its first ClientHello.
const (
	errTLSHelloLong Error = "tls: later client hello larger than the hold limit"
)

// TLSStream checks every ClientHello on a TLS flow opened by name, after
// its first bytes were classified TLS and allowed. A client sends a second
// ClientHello in clear after a HelloRetryRequest (RFC 8446 §4.1.4), and
// some servers (OpenSSL's) take the name of the second: so each must name
// the flow's host as the first did.
//
// It follows the worker's TLS records and, in handshake records, the
// handshake messages (which may span records). A ClientHello message is
// copied (at most MaxHold bytes) and checked when its last byte arrives;
// everything else is counted through. Next never holds bytes back: the
// server cannot act on a handshake message before its last byte, and that
// byte is forwarded only after the check.
//
// It reads record headers for the whole flow: the worker chooses when
// to send application data records (0-RTT data before a HelloRetryRequest,
// say), so none of them can end the watch. A handshake message goes on
// across records of every other type until its last byte: RFC 8446 §5.1
// forbids other records inside a message, but servers do not all enforce
// it. OpenSSL 3.0 ignores a change_cipher_spec or a warning alert there,
// and after a HelloRetryRequest that turned down early data it skips an
// application data record that comes before the message header is whole;
// either way it reads the message on (found by attack: a second
// ClientHello cut so took an OpenSSL server to the other name's context
// while the watch had dropped the message). TLS 1.3 encrypts in
// application data records only, so nothing after the handshake parses as
// messages. TLS 1.2's encrypted Finished and renegotiation are handshake
// records whose messages, as parsed, are noise: noise is judged only if
// it forms a complete ClientHello-typed message, about one chance in 2^26
// within an encrypted Finished, and otherwise only when enough later
// handshake records (a renegotiation) make up the length it declares.
// What it then refuses is what no server reads as a ClientHello naming
// the flow's host.
//
// A TLSStream is not safe for concurrent use. It never retains or
// modifies the slices it is given.
type TLSStream struct {
	name string
	port uint16

	rec     [5]byte // the record header being read
	recN    int     // bytes of rec read
	recLeft int     // payload bytes of the current record still to come

	msg     [4]byte // the handshake message header being read
	msgN    int
	msgLeft int    // body bytes of the current message still to come
	hello   []byte // the ClientHello being copied: header and body
	long    bool   // the ClientHello is longer than MaxHold

	deny Verdict
	done bool // refused
}

// NewTLSStream returns a TLSStream for a flow opened by name (normalized
// as Check wants it) to port.
func NewTLSStream(name string, port uint16) *TLSStream {
	return &TLSStream{name: name, port: port}
}

// Next inspects b, the worker's next bytes, and returns how many of them
// may go upstream: all of them, or 0 with v.Allow false when a ClientHello
// in them is refused (v says why, as Check's verdicts do).
func (s *TLSStream) Next(b []byte) (n int, v Verdict) {
	if s.done {
		return 0, s.deny
	}
	for pos := 0; pos < len(b); {
		if s.recN < len(s.rec) {
			k := copy(s.rec[s.recN:], b[pos:])
			s.recN += k
			pos += k
			if s.recN == len(s.rec) {
				s.recLeft = int(s.rec[3])<<8 | int(s.rec[4])
				if s.recLeft == 0 {
					s.recN = 0
				}
			}
			continue
		}
		k := min(s.recLeft, len(b)-pos)
		if s.rec[0] == recordTypeHandshake {
			if v := s.handshake(b[pos : pos+k]); !v.Allow {
				s.done, s.deny = true, v
				return 0, v
			}
		}
		pos += k
		if s.recLeft -= k; s.recLeft == 0 {
			s.recN = 0
		}
	}
	return len(b), Verdict{Allow: true}
}

// handshake follows the handshake messages in p, a piece of a handshake
// record's payload.
func (s *TLSStream) handshake(p []byte) Verdict {
	for len(p) > 0 {
		if s.msgN < len(s.msg) {
			k := copy(s.msg[s.msgN:], p)
			s.msgN += k
			p = p[k:]
			if s.msgN < len(s.msg) {
				return Verdict{Allow: true}
			}
			s.msgLeft = int(s.msg[1])<<16 | int(s.msg[2])<<8 | int(s.msg[3])
			s.hello, s.long = s.hello[:0], false
			if s.msg[0] == handshakeClientHello {
				s.hello = append(s.hello, s.msg[:]...)
			}
		} else {
			k := min(s.msgLeft, len(p))
			if s.msg[0] == handshakeClientHello {
				if len(s.hello)+k > MaxHold {
					s.long = true
				} else {
					s.hello = append(s.hello, p[:k]...)
				}
			}
			s.msgLeft -= k
			p = p[k:]
		}
		if s.msgLeft == 0 {
			s.msgN = 0
			if s.msg[0] == handshakeClientHello {
				if v := s.check(); !v.Allow {
					return v
				}
			}
		}
	}
	return Verdict{Allow: true}
}

// check judges the complete ClientHello in s.hello as the first one was.
func (s *TLSStream) check() Verdict {
	if s.long {
		return Verdict{Reason: errTLSHelloLong.Error()}
	}
	// Wrap the message in records of at most 2^14 bytes for classifyTLS.
	var recs []byte
	for m := s.hello; len(m) > 0; {
		k := min(len(m), maxRecordPayload)
		recs = append(recs, recordTypeHandshake, 3, 3, byte(k>>8), byte(k))
		recs = append(recs, m[:k]...)
		m = m[k:]
	}
	s.hello = s.hello[:0]
	r := classifyTLS(recs)
	if r.NeedMore {
		r = Result{Kind: TLS, Err: errTLSIncomplete}
	}
	return Check(s.name, s.port, r, true, false)
}
