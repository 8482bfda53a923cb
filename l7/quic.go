package l7

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// This file reads the TLS ClientHello out of a QUIC client's Initial
// packets (RFC 9000 §17.2, RFC 9001 §5, RFC 9369 for version 2), so that a
// UDP flow opened by name can be checked like a TLS one.
//
// Initial packets are encrypted with keys anyone can derive from the
// packet's Destination Connection ID; they carry the ClientHello in CRYPTO
// frames, possibly split over several packets, coalesced in one datagram
// or spread over several. QUICAssembler takes the client's datagrams one
// at a time, removes header protection (AES-128 on a sample of the
// ciphertext), decrypts (AES-128-GCM), walks the frames, puts the CRYPTO
// data back in order and, once the ClientHello is whole, classifies it
// with Classify, as a ClientHello sent over TCP would be.
//
// What counts as garbage (a Result with Err): a datagram that does not
// start with a long-header packet of version 1 or 2 (short headers,
// version negotiation, any other version); a long-header packet without
// the fixed bit (servers drop it); a Handshake or Retry packet
// from the client; an Initial whose Destination Connection ID is shorter
// than 8 bytes, whose Destination or Source Connection ID differs from
// the first one's, that does not decrypt, or that repeats a packet number
// (a server drops it, so what it carries must not be what is checked);
// reserved header bits set; a frame an Initial may not carry (RFC 9000
// Table 3); CRYPTO data that contradicts data already received at the same
// offset, or reaches past QUICMaxHello bytes; a datagram carrying an
// Initial shorter than 1200 bytes (servers drop those, RFC 9000 §14.1);
// more than QUICMaxDatagrams datagrams or QUICMaxHeldBytes bytes before
// the ClientHello is whole. 0-RTT packets coalesced with the Initials
// cannot be decrypted (their keys come from an earlier session) and are
// skipped: they reach the server only if the ClientHello they belong to
// passes. Zero bytes after the last packet of a datagram are padding.

// QUIC versions understood.
const (
	QUICv1 uint32 = 0x00000001
	QUICv2 uint32 = 0x6b3343cf
)

// Bounds on what a flow holds before its ClientHello is whole.
const (
	// QUICMaxHello is the longest ClientHello handshake message (with
	// its 4-byte header) read from CRYPTO frames. It leaves room for the
	// two TLS record headers Classify reads it through.
	QUICMaxHello = MaxHold - 2*recordHeaderLen
	// QUICMaxDatagrams is the most client datagrams before the
	// ClientHello is whole.
	QUICMaxDatagrams = 32
	// QUICMaxHeldBytes is the most client bytes (all datagrams) before
	// the ClientHello is whole.
	QUICMaxHeldBytes = 64 << 10
)

// Packet and key constants.
const (
	quicMinInitialDatagram = 1200
	quicMinDCID            = 8
	quicMaxCID             = 20
	quicSampleLen          = 16
	quicTagLen             = 16
	quicKeyLen             = 16
	quicIVLen              = 12
	quicMaxPNLen           = 4
	// quicMaxVerified is the most Initial packets of one connection
	// Verify takes (a client sends a few: its ClientHello, perhaps in
	// two or three packets, and their retransmissions).
	quicMaxVerified = 64
)

// Errors of the QUIC path. Like the TLS ones they never quote the input.
const (
	errQUICNotLong     Error = "quic: not a quic long header packet"
	errQUICVersion     Error = "quic: unsupported version"
	errQUICTruncated   Error = "quic: truncated packet"
	errQUICPacketType  Error = "quic: client sent a packet type other than initial or 0-rtt"
	errQUICDCID        Error = "quic: bad destination connection id"
	errQUICCID         Error = "quic: connection id longer than 20 bytes"
	errQUICMixed       Error = "quic: packets of different versions or connection ids"
	errQUICSmall       Error = "quic: initial in a datagram shorter than 1200 bytes"
	errQUICDecrypt     Error = "quic: initial packet does not decrypt"
	errQUICReserved    Error = "quic: reserved header bits set"
	errQUICNoFrames    Error = "quic: packet without frames"
	errQUICFrame       Error = "quic: frame not allowed in an initial packet"
	errQUICFrameLen    Error = "quic: frame overruns its packet"
	errQUICCryptoConfl Error = "quic: crypto data contradicts earlier data"
	errQUICTooLarge    Error = "quic: client hello larger than the hold limit"
	errQUICAfterHello  Error = "quic: crypto data after the client hello"
	errQUICNoInitial   Error = "quic: no initial packet"
	errQUICTooMany     Error = "quic: client hello not whole within the datagram limit"
	errQUICIncomplete  Error = "quic: incomplete client hello"
	errQUICShort       Error = "quic: short header packet before the client hello"
	errQUICDupPN       Error = "quic: initial packet number repeated"
	errQUICFixedBit    Error = "quic: long header packet without the fixed bit"
	errQUICLateInitial Error = "quic: initial packet after a packet of another type in one datagram"

	errQUICTooManyInitials Error = "quic: too many initial packets in one connection"
	errQUICTooManyConns    Error = "quic: too many connections being checked on one flow"
	errQUICForgotten       Error = "quic: initial packet under the server id of a connection the gateway forgot"
)

// Version-specific parts of the Initial key schedule and header.
type quicVersion struct {
	salt                  [20]byte
	keyLabel, ivLabel     string
	hpLabel               string
	initialType, zeroRTT  byte // long header type bits (byte 0 >> 4 & 3)
	handshakeT, retryType byte
}

var (
	quicV1Params = quicVersion{
		salt:        [20]byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a},
		keyLabel:    "quic key",
		ivLabel:     "quic iv",
		hpLabel:     "quic hp",
		initialType: 0, zeroRTT: 1, handshakeT: 2, retryType: 3,
	}
	quicV2Params = quicVersion{
		salt:        [20]byte{0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9},
		keyLabel:    "quicv2 key",
		ivLabel:     "quicv2 iv",
		hpLabel:     "quicv2 hp",
		initialType: 1, zeroRTT: 2, handshakeT: 3, retryType: 0,
	}
)

func quicParams(v uint32) *quicVersion {
	switch v {
	case QUICv1:
		return &quicV1Params
	case QUICv2:
		return &quicV2Params
	}
	return nil
}

// quicKeys are a client's Initial keys for one connection ID.
type quicKeys struct {
	aead cipher.AEAD
	hp   cipher.Block
	iv   [quicIVLen]byte
}

// hkdfExpandLabel is TLS 1.3's HKDF-Expand-Label with an empty context
// (RFC 8446 §7.1), over SHA-256.
func hkdfExpandLabel(secret []byte, label string, n int) []byte {
	info := make([]byte, 0, 4+6+len(label))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0)
	out, err := hkdf.Expand(sha256.New, secret, string(info), n)
	if err != nil {
		panic("l7: hkdf expand: " + err.Error()) // only for n > 255*32
	}
	return out
}

// quicClientSecret derives the client's Initial secret from dcid (RFC 9001
// §5.2).
func quicClientSecret(v *quicVersion, dcid []byte) []byte {
	initial, err := hkdf.Extract(sha256.New, dcid, v.salt[:])
	if err != nil {
		panic("l7: hkdf extract: " + err.Error()) // never for SHA-256
	}
	return hkdfExpandLabel(initial, "client in", sha256.Size)
}

// newQUICKeys derives the client's Initial packet protection keys.
func newQUICKeys(v *quicVersion, dcid []byte) *quicKeys {
	secret := quicClientSecret(v, dcid)
	block, err := aes.NewCipher(hkdfExpandLabel(secret, v.keyLabel, quicKeyLen))
	if err != nil {
		panic("l7: aes: " + err.Error()) // the key is 16 bytes
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("l7: gcm: " + err.Error())
	}
	hp, err := aes.NewCipher(hkdfExpandLabel(secret, v.hpLabel, quicKeyLen))
	if err != nil {
		panic("l7: aes: " + err.Error())
	}
	k := &quicKeys{aead: aead, hp: hp}
	copy(k.iv[:], hkdfExpandLabel(secret, v.ivLabel, quicIVLen))
	return k
}

// QUICAssembler reads the ClientHello out of one flow's client datagrams.
// The gateway holds one per UDP flow it checks; the zero value is ready.
// It is not safe for concurrent use. It never retains or modifies the
// datagrams it is given; it keeps the CRYPTO data (at most QUICMaxHello
// bytes) and a scratch buffer for decryption.
type QUICAssembler struct {
	done   bool
	result Result

	version uint32
	params  *quicVersion
	dcid    [quicMaxCID]byte
	dcidLen int
	// shortDCID accepts a Destination Connection ID under 8 bytes: a
	// client's first Initial must not have one, but after a Retry the
	// client sends the server's ID, of any length (QUICWatch).
	shortDCID bool
	scid      [quicMaxCID]byte
	scidLen   int
	pns       []int64 // Initial packet numbers seen: a server drops repeats
	keys      *quicKeys
	largestPN int64 // largest Initial packet number seen; -1 before any
	datagrams int
	held      int
	helloLen  int // once decided with a whole ClientHello: its length

	crypto []byte   // the CRYPTO stream from offset 0, len = furthest byte written
	have   []uint64 // bitmap over crypto: which bytes were received
	contig int      // crypto[:contig] has been received
	sawAny bool     // some Initial was decrypted

	scratch []byte
}

// Add takes the client's next datagram. Once it returns a result with
// NeedMore false the flow is decided and later calls return the same
// result. A result with Kind TLS and no Err holds the ClientHello's SNI
// (and ECH); give it to Check with the flow's name. Err says why the
// datagrams are garbage (an Error, "quic: ..." or "tls: ..."). Add never
// panics, whatever d holds.
func (q *QUICAssembler) Add(d []byte) Result {
	if q.done {
		return q.result
	}
	if q.params == nil {
		q.largestPN = -1
	}
	q.datagrams++
	q.held += len(d)
	if err := q.datagram(d); err != nil {
		return q.decide(Result{Kind: TLS, Err: err})
	}
	if r, ok := q.hello(); ok {
		return q.decide(r)
	}
	if q.datagrams >= QUICMaxDatagrams || q.held >= QUICMaxHeldBytes {
		return q.decide(Result{Kind: TLS, Err: errQUICTooMany})
	}
	return needMore()
}

// Final is Add's answer when no more datagrams will come before the
// decision (the hold timer fired): a ClientHello that is not whole yet is
// malformed. It never returns NeedMore.
func (q *QUICAssembler) Final() Result {
	if q.done {
		return q.result
	}
	if !q.sawAny {
		return q.decide(Result{Kind: TLS, Err: errQUICNoInitial})
	}
	return q.decide(Result{Kind: TLS, Err: errQUICIncomplete})
}

// decide records the decision. A ClientHello read whole keeps what
// Verify needs (the CRYPTO bytes, the keys, the packet numbers seen);
// anything else drops it.
func (q *QUICAssembler) decide(r Result) Result {
	q.done, q.result = true, r
	if r.Err == nil && !r.NeedMore {
		q.helloLen = len(q.crypto)
		return r
	}
	q.crypto, q.have, q.scratch, q.keys, q.pns = nil, nil, nil, nil, nil
	return r
}

// VerifyUnder checks a client datagram sent to one of the server's
// connection IDs for the connection whose ClientHello Add read whole: the
// client's Initials after the server's first answer, which it protects
// with the keys of its own first ID. As in Verify, the Initials must be
// of the connection (version, the client's Source Connection ID, all
// packets under one Destination Connection ID), decrypt, carry new packet
// numbers and hold only CRYPTO bytes of the ClientHello that was read;
// Handshake and 0-RTT packets pass unread. Without it, bytes of the
// ClientHello that a server dropped but the gateway read could be sent
// again under the server's ID, changed.
func (q *QUICAssembler) VerifyUnder(d []byte) error {
	if !q.done || q.result.Err != nil || q.keys == nil {
		return errQUICNoInitial
	}
	size := len(d)
	var dcid []byte
	initial := false
	for len(d) > 0 && d[0]&0x80 != 0 {
		h, err := parseLongHeader(d)
		if err != nil {
			return err
		}
		if dcid == nil {
			dcid = h.dcid
		}
		if h.version != q.version || string(h.dcid) != string(dcid) || string(h.scid) != string(q.scid[:q.scidLen]) {
			return errQUICMixed
		}
		if h.initial() {
			if d[0]&0x40 == 0 {
				return errQUICFixedBit
			}
			if len(q.pns) >= quicMaxVerified {
				return errQUICTooManyInitials
			}
			if err := q.initial(d[:h.end], h.pnOff); err != nil {
				return err
			}
			initial = true
		}
		d = d[h.end:]
	}
	if initial && size < quicMinInitialDatagram {
		return errQUICSmall
	}
	if len(q.crypto) > q.helloLen {
		return errQUICAfterHello
	}
	return nil
}

// Verify checks a later client datagram of a connection whose
// ClientHello Add read whole (a Result with no Err): as a server would
// take it as part of that connection, its packets must be of that
// connection (version, both connection IDs), its Initials must decrypt
// with the connection's keys and carry packet numbers not seen before,
// and their CRYPTO data must be bytes of the ClientHello that was read,
// unchanged; 0-RTT packets pass unread. A connection may send at most
// quicMaxVerified Initials in all. After an error every later datagram
// with CRYPTO data fails too.
func (q *QUICAssembler) Verify(d []byte) error {
	if !q.done || q.result.Err != nil || q.keys == nil {
		return errQUICNoInitial
	}
	if len(q.pns) >= quicMaxVerified {
		return errQUICTooManyInitials
	}
	if err := q.datagram(d); err != nil {
		return err
	}
	if len(q.crypto) > q.helloLen {
		return errQUICAfterHello
	}
	return nil
}

// datagram walks the packets coalesced in d.
func (q *QUICAssembler) datagram(d []byte) error {
	if len(d) == 0 || d[0]&0x80 == 0 {
		return errQUICNotLong
	}
	size := len(d)
	initial := false
	for len(d) > 0 {
		if d[0]&0x80 == 0 {
			// Zero bytes after the packets pad the datagram; a short
			// header packet cannot come before the handshake.
			if !allZero(d) {
				return errQUICShort
			}
			break
		}
		n, isInitial, err := q.packet(d)
		if err != nil {
			return err
		}
		initial = initial || isInitial
		d = d[n:]
	}
	switch {
	case initial && size < quicMinInitialDatagram:
		return errQUICSmall
	case !initial && !q.sawAny:
		return errQUICNoInitial
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// longHeader is what the header of one long-header packet holds.
type longHeader struct {
	version    uint32
	params     *quicVersion
	typ        byte   // type bits (byte 0 >> 4 & 3)
	dcid, scid []byte // slices of the packet
	pnOff      int    // where the (protected) packet number starts
	end        int    // the packet's length
}

func (h *longHeader) initial() bool { return h.typ == h.params.initialType }

// parseLongHeader reads the long header of a client's Initial, 0-RTT or
// Handshake packet at the start of d (a Retry, which only servers send,
// is an error).
func parseLongHeader(d []byte) (longHeader, error) {
	var h longHeader
	if len(d) < 7 {
		return h, errQUICTruncated
	}
	h.version = binary.BigEndian.Uint32(d[1:5])
	if h.params = quicParams(h.version); h.params == nil {
		return h, errQUICVersion
	}
	h.typ = d[0] >> 4 & 3
	p := 5
	dcidLen := int(d[p])
	p++
	if dcidLen > quicMaxCID {
		return h, errQUICCID
	}
	if len(d) < p+dcidLen+1 {
		return h, errQUICTruncated
	}
	h.dcid = d[p : p+dcidLen]
	p += dcidLen
	scidLen := int(d[p])
	p++
	if scidLen > quicMaxCID {
		return h, errQUICCID
	}
	if len(d) < p+scidLen {
		return h, errQUICTruncated
	}
	h.scid = d[p : p+scidLen]
	p += scidLen
	switch h.typ {
	case h.params.initialType:
		tokLen, k := readVarint(d[p:])
		if k == 0 || tokLen > uint64(len(d)-p-k) {
			return h, errQUICTruncated
		}
		p += k + int(tokLen)
	case h.params.zeroRTT, h.params.handshakeT:
	default:
		return h, errQUICPacketType
	}
	length, k := readVarint(d[p:])
	if k == 0 || length > uint64(len(d)-p-k) {
		return h, errQUICTruncated
	}
	h.pnOff = p + k
	h.end = h.pnOff + int(length)
	return h, nil
}

// packet reads one long-header packet at the start of d and returns its
// length and whether it was an Initial.
func (q *QUICAssembler) packet(d []byte) (int, bool, error) {
	h, err := parseLongHeader(d)
	if err != nil {
		return 0, false, err
	}
	// A server drops a packet without the fixed bit (RFC 9000 §17.2):
	// what it carries must not be what is checked, or the bytes it
	// covered could come later in a packet that is not read. (Checked
	// where a packet is read, not where it is only classified: a client
	// that greases the bit, RFC 9287, may clear it in later packets.)
	if d[0]&0x40 == 0 {
		return 0, false, errQUICFixedBit
	}
	if h.typ == h.params.handshakeT {
		return 0, false, errQUICPacketType
	}
	if q.params != nil && h.version != q.version {
		return 0, false, errQUICMixed
	}
	if q.params == nil {
		if !h.initial() {
			return 0, false, errQUICNoInitial
		}
		if len(h.dcid) < quicMinDCID && !q.shortDCID {
			return 0, false, errQUICDCID
		}
		q.version, q.params = h.version, h.params
		q.dcidLen = copy(q.dcid[:], h.dcid)
		q.scidLen = copy(q.scid[:], h.scid)
		q.keys = newQUICKeys(h.params, h.dcid)
	} else if string(h.dcid) != string(q.dcid[:q.dcidLen]) || string(h.scid) != string(q.scid[:q.scidLen]) {
		// A server drops packets of the connection with another Source
		// Connection ID: what they carry must not be what was checked.
		return 0, false, errQUICMixed
	}
	if !h.initial() {
		return h.end, false, nil
	}
	return h.end, true, q.initial(d[:h.end], h.pnOff)
}

// initial removes the protection of the Initial packet pkt, whose packet
// number starts at pnOff, and reads its frames.
func (q *QUICAssembler) initial(pkt []byte, pnOff int) error {
	payload, pn, err := openInitial(q.keys, pkt, pnOff, q.largestPN, &q.scratch)
	if err != nil {
		return err
	}
	// A server discards a packet whose number it has already processed
	// (RFC 9000 §12.3): its CRYPTO data would be checked here but never
	// read there, and the bytes it covered could come later, unchecked.
	if slices.Contains(q.pns, pn) {
		return errQUICDupPN
	}
	q.pns = append(q.pns, pn)
	if pn > q.largestPN {
		q.largestPN = pn
	}
	q.sawAny = true
	return q.frames(payload)
}

// openInitial removes header protection from the Initial packet pkt
// (packet number at pnOff; largest is the largest packet number seen
// before, -1 for none) and decrypts it with k into *scratch. It returns
// the plaintext frames and the packet number.
func openInitial(k *quicKeys, pkt []byte, pnOff int, largest int64, scratch *[]byte) ([]byte, int64, error) {
	if len(pkt) < pnOff+quicMaxPNLen+quicSampleLen {
		return nil, 0, errQUICTruncated
	}
	var mask [aes.BlockSize]byte
	k.hp.Encrypt(mask[:], pkt[pnOff+quicMaxPNLen:pnOff+quicMaxPNLen+quicSampleLen])
	first := pkt[0] ^ mask[0]&0x0f
	pnLen := int(first&3) + 1
	hdrLen := pnOff + pnLen
	if len(pkt) < hdrLen+quicTagLen {
		return nil, 0, errQUICTruncated
	}
	buf := append((*scratch)[:0], pkt...)
	*scratch = buf
	buf[0] = first
	var truncated uint64
	for i := 0; i < pnLen; i++ {
		buf[pnOff+i] ^= mask[1+i]
		truncated = truncated<<8 | uint64(buf[pnOff+i])
	}
	pn := decodePN(largest, truncated, pnLen)
	nonce := k.iv
	var pnb [8]byte
	binary.BigEndian.PutUint64(pnb[:], uint64(pn))
	for i := 0; i < 8; i++ {
		nonce[quicIVLen-8+i] ^= pnb[i]
	}
	payload, err := k.aead.Open(buf[hdrLen:hdrLen], nonce[:], buf[hdrLen:], buf[:hdrLen])
	if err != nil {
		return nil, 0, errQUICDecrypt
	}
	if first&0x0c != 0 {
		return nil, 0, errQUICReserved
	}
	return payload, pn, nil
}

// decodePN recovers a full packet number from its truncated form (RFC
// 9000 §A.3).
func decodePN(largest int64, truncated uint64, pnLen int) int64 {
	expected := largest + 1
	win := int64(1) << (8 * pnLen)
	half := win / 2
	mask := win - 1
	cand := expected&^mask | int64(truncated)
	switch {
	case cand <= expected-half && cand < 1<<62-win:
		return cand + win
	case cand > expected+half && cand >= win:
		return cand - win
	}
	return cand
}

// Frame types an Initial may carry (RFC 9000 Table 3).
const (
	frPadding   = 0x00
	frPing      = 0x01
	frAck       = 0x02
	frAckECN    = 0x03
	frCrypto    = 0x06
	frConnClose = 0x1c
)

// frames walks a decrypted Initial payload.
func (q *QUICAssembler) frames(b []byte) error {
	if len(b) == 0 {
		return errQUICNoFrames
	}
	for len(b) > 0 {
		typ := b[0]
		b = b[1:]
		var err error
		switch typ {
		case frPadding, frPing:
		case frAck, frAckECN:
			b, err = skipAck(b, typ == frAckECN)
		case frCrypto:
			b, err = q.cryptoFrame(b)
		case frConnClose:
			b, err = skipClose(b)
		default:
			// Every other type, and any type in a longer varint
			// encoding (which must be minimal), is not allowed.
			return errQUICFrame
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// varints reads n varints from b.
func varints(b []byte, out []uint64) ([]byte, error) {
	for i := range out {
		v, k := readVarint(b)
		if k == 0 {
			return nil, errQUICFrameLen
		}
		out[i] = v
		b = b[k:]
	}
	return b, nil
}

func skipAck(b []byte, ecn bool) ([]byte, error) {
	var h [4]uint64 // largest, delay, range count, first range
	b, err := varints(b, h[:])
	if err != nil {
		return nil, err
	}
	if h[2] > uint64(len(b)) { // each range takes two bytes at least
		return nil, errQUICFrameLen
	}
	var r [2]uint64
	for i := uint64(0); i < h[2]; i++ {
		if b, err = varints(b, r[:]); err != nil {
			return nil, err
		}
	}
	if ecn {
		var e [3]uint64
		if b, err = varints(b, e[:]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func skipClose(b []byte) ([]byte, error) {
	var h [3]uint64 // error code, frame type, reason length
	b, err := varints(b, h[:])
	if err != nil {
		return nil, err
	}
	if h[2] > uint64(len(b)) {
		return nil, errQUICFrameLen
	}
	return b[h[2]:], nil
}

// cryptoFrame reads a CRYPTO frame's offset, length and data into the
// stream.
func (q *QUICAssembler) cryptoFrame(b []byte) ([]byte, error) {
	var h [2]uint64 // offset, length
	b, err := varints(b, h[:])
	if err != nil {
		return nil, err
	}
	off, n := h[0], h[1]
	if n > uint64(len(b)) {
		return nil, errQUICFrameLen
	}
	if off > QUICMaxHello || n > QUICMaxHello-off {
		return nil, errQUICTooLarge
	}
	if err := q.write(int(off), b[:n]); err != nil {
		return nil, err
	}
	return b[n:], nil
}

// write puts data at off in the CRYPTO stream; bytes already received
// must be equal.
func (q *QUICAssembler) write(off int, data []byte) error {
	end := off + len(data)
	if end > len(q.crypto) {
		if end > cap(q.crypto) {
			nc := make([]byte, end, max(end, min(2*cap(q.crypto), QUICMaxHello), 2048))
			copy(nc, q.crypto)
			q.crypto = nc
		}
		q.crypto = q.crypto[:end]
		words := (end + 63) / 64
		for len(q.have) < words {
			q.have = append(q.have, 0)
		}
	}
	for i, c := range data {
		j := off + i
		bit := uint64(1) << (j % 64)
		if q.have[j/64]&bit != 0 {
			if q.crypto[j] != c {
				return errQUICCryptoConfl
			}
			continue
		}
		q.have[j/64] |= bit
		q.crypto[j] = c
	}
	for q.contig < len(q.crypto) && q.have[q.contig/64]&(1<<(q.contig%64)) != 0 {
		q.contig++
	}
	return nil
}

// hello classifies the ClientHello once it is whole; ok false means more
// CRYPTO data is needed.
func (q *QUICAssembler) hello() (Result, bool) {
	if q.contig < handshakeHeaderLen {
		return Result{}, false
	}
	c := q.crypto
	if c[0] != handshakeClientHello {
		return Result{Kind: TLS, Err: errTLSNotHello}, true
	}
	n := handshakeHeaderLen + (int(c[1])<<16 | int(c[2])<<8 | int(c[3]))
	if n > QUICMaxHello {
		return Result{Kind: TLS, Err: errQUICTooLarge}, true
	}
	if len(q.crypto) > n {
		return Result{Kind: TLS, Err: errQUICAfterHello}, true
	}
	if q.contig < n {
		return Result{}, false
	}
	// Classify reads TLS records: frame the message in handshake
	// records of at most 2^14 bytes, as a TLS client would send it.
	framed := make([]byte, 0, n+2*recordHeaderLen)
	for msg := c[:n]; len(msg) > 0; {
		k := min(len(msg), maxRecordPayload)
		framed = append(framed, recordTypeHandshake, 3, 1, byte(k>>8), byte(k))
		framed = append(framed, msg[:k]...)
		msg = msg[k:]
	}
	r := ClassifyFinal(framed)
	if r.Kind != TLS {
		return Result{Kind: TLS, Err: errTLSNotHello}, true
	}
	return r, true
}

// readVarint reads a QUIC variable-length integer (RFC 9000 §16); k is 0
// when b is too short.
func readVarint(b []byte) (v uint64, k int) {
	if len(b) == 0 {
		return 0, 0
	}
	k = 1 << (b[0] >> 6)
	if len(b) < k {
		return 0, 0
	}
	v = uint64(b[0] & 0x3f)
	for i := 1; i < k; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, k
}
