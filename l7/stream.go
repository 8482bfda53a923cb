package l7

// Errors of the message framing after a request head (RFC 9112 §7.1,
// RFC 6455 §5.2).
const (
	errChunkSize       Error = "http: invalid chunk size"
	errChunkExt        Error = "http: invalid chunk extension"
	errChunkData       Error = "http: chunk data longer than its size"
	errChunkIncomplete Error = "http: incomplete chunk framing at end of stream"
	errChunkLong       Error = "http: chunk line or trailer section longer than the hold limit"
	errWSFrame         Error = "websocket: invalid frame header from the client"
	errWSMask          Error = "websocket: unmasked client frame"
	errWSIncomplete    Error = "websocket: incomplete frame header at end of stream"
	errWSEarly         Error = "websocket: client bytes before the server answered the upgrade"
	errWSNotFirst      Error = "websocket: upgrade request after another request on the connection"
)

// streamState is where an HTTPStream is in the worker's byte stream.
type streamState uint8

const (
	stHead      streamState = iota // a request head (held until checked)
	stBody                         // Content-Length body bytes (counted through)
	stChunkSize                    // a chunk-size line (held)
	stChunkData                    // chunk data (counted through)
	stChunkEnd                     // the CRLF after chunk data (held)
	stTrailer                      // the trailer section (held)
	stWSAnswer                     // after an upgrade request: waiting for the server's answer
	stWSHeader                     // a WebSocket frame header (held)
	stWSPayload                    // a WebSocket frame payload (counted through)
	stDenied                       // refused: everything is refused
)

// HTTPStream checks every request on a plain HTTP/1.x flow opened by
// name, after its first bytes were classified HTTP and allowed:
// each request head (the first one again, then every kept-alive and
// pipelined one) must be well formed with unambiguous framing, and must
// name the flow's host and port as Check requires; Content-Length and
// chunked bodies (with extensions and trailers) are followed by counting,
// never held or copied. After a request asking to upgrade to WebSocket,
// the worker's bytes must be client WebSocket frames (masked, known
// opcodes) if the server switched protocols (WatchUpgrade says whether
// it did); their payloads are counted through unread. Any other upgrade,
// CONNECT, h2c and anything malformed is refused.
//
// The relay keeps the worker's bytes it has not yet forwarded at the start
// of its buffer. After each read it calls Next on them (those Next left
// last time, then the new ones), writes the first n upstream and keeps the
// rest for the next call. What Next leaves is an element not yet complete
// (a request head with any empty lines before it, a chunk-size line, the
// CRLF after chunk data, a trailer section, a WebSocket frame header), at
// most MaxHold bytes: so no byte of a request reaches upstream before its
// head has been checked. Work per call is linear in the new bytes.
//
// An HTTPStream is not safe for concurrent use. It never retains or
// modifies the slices it is given. Once it has refused, it refuses every
// later call.
type HTTPStream struct {
	name  string
	port  uint16
	state streamState
	left  int64 // stBody, stChunkData, stWSPayload: bytes still to count
	scan  int   // bytes of the element being held that are already parsed
	seen  int   // bytes of it already searched for the current line's end
	head  headParser
	deny  Verdict

	requests int                              // request heads checked so far
	answer   func() (answered, switched bool) // WatchUpgrade's function, or nil
}

// WatchUpgrade tells the stream how the server answered the connection's
// first request: answer reports whether the server's first bytes have
// come and whether they are a 101 (Switching Protocols) status line.
// It is called on the stream's goroutine and must be safe against the
// writer of the server's bytes.
//
// With it, a WebSocket upgrade request must be the connection's first
// request (so that the server's first answer is the one to it), the
// worker may send nothing after it before the server answered (a client
// waits, RFC 6455 §4.1), and what it sends after the answer is frames
// only if the server switched; if not, it is requests again, checked as
// such. Without it, the bytes after an upgrade request are taken as
// frames whatever the server answered: a server that did not switch and
// hands any method to its application (Python's request line parsing
// splits on NBSP, a frame's second byte when its payload is 32 bytes)
// reads a request from them that was never checked.
func (s *HTTPStream) WatchUpgrade(answer func() (answered, switched bool)) {
	s.answer = answer
}

// SwitchingProtocols reports whether b, the first bytes a server sent on a
// connection, begin an HTTP/1.x status line with status 101.
func SwitchingProtocols(b []byte) bool {
	return len(b) >= 13 && string(b[:7]) == "HTTP/1." && b[7] >= '0' && b[7] <= '9' &&
		string(b[8:12]) == " 101" && (b[12] == ' ' || b[12] == '\r')
}

// NewHTTPStream returns an HTTPStream for a flow opened by name (normalized
// as Check wants it) to port.
func NewHTTPStream(name string, port uint16) *HTTPStream {
	return &HTTPStream{name: name, port: port}
}

// Next inspects b, the worker's bytes not yet forwarded, and returns how
// many of them may go upstream now (a prefix of b); the rest must be given
// again, with what follows, to the next call. v.Allow is false when the
// flow must be refused (v says why, as Check's verdicts do; n is then 0
// and nothing of b may be forwarded). Next does not allocate unless it
// refuses.
func (s *HTTPStream) Next(b []byte) (n int, v Verdict) {
	if s.state == stDenied {
		return 0, s.deny
	}
	pos := 0
	for pos < len(b) {
		switch s.state {
		case stWSAnswer:
			answered, switched := s.answer()
			switch {
			case !answered:
				return s.refuse(Verdict{Reason: errWSEarly.Error()})
			case switched:
				s.state = stWSHeader
			default:
				s.state = stHead
			}
			continue
		case stBody, stChunkData, stWSPayload:
			k := int(min(s.left, int64(len(b)-pos)))
			pos += k
			s.left -= int64(k)
			if s.left == 0 {
				s.state = afterCount(s.state)
			}
			continue
		}
		var k int
		var err error
		st := s.state
		if st == stWSHeader {
			k, err = s.wsHeader(b[pos:])
		} else {
			k, err = s.lines(b[pos:])
		}
		switch {
		case err != nil:
			return s.refuse(Verdict{Reason: err.Error()})
		case s.state == stDenied:
			return 0, s.deny
		case k > MaxHold, k == 0 && len(b)-pos > MaxHold:
			// An element, complete or not, longer than may be held.
			err = errChunkLong
			if st == stHead {
				err = errHTTPHeadLong
			}
			return s.refuse(Verdict{Reason: err.Error()})
		case k == 0:
			return pos, Verdict{Allow: true}
		}
		pos += k
	}
	return pos, Verdict{Allow: true}
}

// afterCount is the state after the counted bytes of state st end.
func afterCount(st streamState) streamState {
	switch st {
	case stChunkData:
		return stChunkEnd
	case stWSPayload:
		return stWSHeader
	}
	return stHead
}

// End is called when the worker has finished sending while rest, bytes
// Next left, were not forwarded. Empty lines between requests may be
// dropped; anything else is an element cut short, and End refuses it so
// that the refusal is recorded.
func (s *HTTPStream) End(rest []byte) Verdict {
	if s.state == stDenied {
		return s.deny
	}
	var err error
	switch s.state {
	case stHead:
		for k := 0; k < len(rest); k += 2 {
			if len(rest)-k < 2 || rest[k] != '\r' || rest[k+1] != '\n' {
				err = errHTTPIncomplete
				break
			}
		}
	case stWSHeader:
		if len(rest) > 0 {
			err = errWSIncomplete
		}
	default:
		if len(rest) > 0 {
			err = errChunkIncomplete
		}
	}
	if err != nil {
		_, v := s.refuse(Verdict{Reason: err.Error()})
		return v
	}
	return Verdict{Allow: true}
}

func (s *HTTPStream) refuse(v Verdict) (int, Verdict) {
	s.state, s.deny = stDenied, v
	return 0, v
}

// lines parses the complete lines of e, the line-structured element being
// held, from s.scan on. It returns the element's length once it is
// complete, 0 while it is not.
func (s *HTTPStream) lines(e []byte) (int, error) {
	for {
		i := s.scan
		j := max(i, s.seen) // a long line coming in small reads is searched once
		for j < len(e) && e[j] != '\r' && e[j] != '\n' {
			j++
		}
		switch {
		case j == len(e):
			s.seen = j
			return 0, nil
		case e[j] == '\n':
			return 0, errHTTPBareLF
		case j+1 == len(e):
			s.seen = j
			return 0, nil
		case e[j+1] != '\n':
			return 0, errHTTPBareCR
		}
		s.scan = j + 2
		done, err := s.line(e[i:j])
		if err != nil || done {
			k := s.scan
			s.scan, s.seen = 0, 0
			return k, err
		}
	}
}

// line handles one line (without its CRLF) of the element being held and
// reports whether the element is complete.
func (s *HTTPStream) line(l []byte) (bool, error) {
	switch s.state {
	case stHead:
		switch {
		case s.head.lines == 0 && len(l) == 0:
			return false, nil // an empty line before the request line
		case s.head.lines == 0:
			return false, s.head.requestLine(l)
		case len(l) > 0:
			return false, s.head.field(l, false)
		}
		body, err := s.head.end()
		if err != nil {
			return true, err
		}
		if v := s.head.check(s.name, s.port); !v.Allow {
			s.refuse(v)
			return true, nil
		}
		s.requests++
		switch {
		case s.head.websocket && s.answer != nil && s.requests > 1:
			return true, errWSNotFirst
		case s.head.websocket && s.answer != nil:
			s.state = stWSAnswer
		case s.head.websocket:
			s.state = stWSHeader
		case body == bodyLength:
			s.state, s.left = stBody, s.head.length
		case body == bodyChunked:
			s.state = stChunkSize
		}
		s.head = headParser{}
		return true, nil
	case stChunkSize:
		n, err := parseChunkLine(l)
		if err != nil {
			return true, err
		}
		s.state, s.left = stChunkData, n
		if n == 0 {
			s.state = stTrailer
		}
		return true, nil
	case stChunkEnd:
		if len(l) > 0 {
			return true, errChunkData
		}
		s.state = stChunkSize
		return true, nil
	case stTrailer:
		if len(l) > 0 {
			return false, s.head.field(l, true)
		}
		s.state, s.head = stHead, headParser{}
		return true, nil
	}
	return true, errChunkData // not reached: no other state holds lines
}

// parseChunkLine parses a chunk-size line (RFC 9112 §7.1.1): 1*HEXDIG (at
// most maxContentLength; leading zeros are fine), then chunk extensions
// ";name" or ";name=value" (token or quoted-string) with no whitespace
// (BWS is read differently by different parsers; no client sends it).
func parseChunkLine(l []byte) (int64, error) {
	var v int64
	n := 0
	for ; n < len(l); n++ {
		d := unhex(l[n])
		if d < 0 {
			break
		}
		if v > maxContentLength>>4 {
			return 0, errChunkSize
		}
		v = v<<4 | int64(d)
	}
	if n == 0 || v > maxContentLength {
		return 0, errChunkSize
	}
	for rest := l[n:]; len(rest) > 0; {
		if rest[0] != ';' {
			return 0, errChunkSize
		}
		rest = rest[1:]
		k := 0
		for k < len(rest) && isTchar(rest[k]) {
			k++
		}
		if k == 0 {
			return 0, errChunkExt
		}
		rest = rest[k:]
		if len(rest) == 0 || rest[0] != '=' {
			continue
		}
		rest = rest[1:]
		if len(rest) > 0 && rest[0] == '"' {
			k = quotedLen(rest)
		} else {
			for k = 0; k < len(rest) && isTchar(rest[k]); k++ {
			}
		}
		if k == 0 {
			return 0, errChunkExt
		}
		rest = rest[k:]
	}
	return v, nil
}

// unhex is the value of the hex digit c, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// quotedLen returns the length of the quoted-string at the start of b
// (RFC 9110 §5.6.4), or 0 if there is none.
func quotedLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i == len(b) || b[i] < 0x20 && b[i] != '\t' || b[i] == 0x7f {
				return 0
			}
		case c < 0x20 && c != '\t' || c == 0x7f:
			return 0
		}
	}
	return 0
}

// wsHeader parses the WebSocket frame header at the start of b (RFC 6455
// §5.2), as a client must send it: RSV2 and RSV3 clear (RSV1 is allowed
// on data frames, for permessage-deflate), a known opcode, control frames
// final and at most 125 bytes, the mask bit set, a 64-bit length with its
// top bit clear. It returns the header's length, 0 while it is not
// complete, and arranges for the payload to be counted through.
//
// No HTTP request starts like a valid client frame (methods begin with a
// letter: an RSV bit or a reserved opcode, and no mask bit follows), so a
// server that did not switch protocols cannot be sent a request this way.
func (s *HTTPStream) wsHeader(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	b0 := b[0]
	op := b0 & 0x0f
	switch {
	case b0&0x30 != 0:
		return 0, errWSFrame
	case op <= 2:
	case op >= 8 && op <= 10:
		if b0&0x80 == 0 || b0&0x40 != 0 {
			return 0, errWSFrame
		}
	default:
		return 0, errWSFrame
	}
	if len(b) < 2 {
		return 0, nil
	}
	if b[1]&0x80 == 0 {
		return 0, errWSMask
	}
	n := int64(b[1] & 0x7f)
	hl := 2 + 4
	switch {
	case op >= 8 && n > 125:
		return 0, errWSFrame
	case n == 126:
		hl += 2
	case n == 127:
		hl += 8
	}
	if len(b) < hl {
		return 0, nil
	}
	switch n {
	case 126:
		n = int64(b[2])<<8 | int64(b[3])
	case 127:
		if b[2]&0x80 != 0 {
			return 0, errWSFrame
		}
		n = 0
		for _, c := range b[2:10] {
			n = n<<8 | int64(c)
		}
	}
	if n > 0 {
		s.state, s.left = stWSPayload, n
	}
	return hl, nil
}
