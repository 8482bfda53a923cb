package l7

import (
	"encoding/binary"
	"errors"
)

// QUICInitial describes a client Initial packet for BuildQUICInitial: the
// lab and the tests use it to send what a QUIC client would (or a client
// that lies), without a QUIC stack. The gateway never builds packets.
type QUICInitial struct {
	Version uint32 // QUICv1 or QUICv2
	DCID    []byte // 8 to 20 bytes from a real client
	// KeyDCID is the connection ID whose Initial keys protect the packet
	// (nil: DCID). A client's later Initials carry the server's ID in
	// the header and keep the keys of the client's first ID.
	KeyDCID []byte
	SCID    []byte
	Token   []byte
	PN      uint32 // packet number, sent in PNLen bytes
	PNLen   int    // 1 to 4; 0 means 4
	// Payload is the plaintext frames (see QUICCryptoFrame).
	Payload []byte
	// PadTo pads Payload with PADDING frames so that the packet is at
	// least this long (1200 for a datagram holding only this packet).
	PadTo int
	// Reserved sets the header's two reserved bits to this value (a
	// malformed packet; 0 for a real one).
	Reserved byte
	// ClearFixedBit clears the header's fixed bit (0x40), which a real
	// packet sets; servers drop a packet without it (RFC 9000 §17.2).
	ClearFixedBit bool
}

// QUICCryptoFrame returns a CRYPTO frame carrying data at offset off.
func QUICCryptoFrame(off int, data []byte) []byte {
	b := []byte{frCrypto}
	b = appendVarint(b, uint64(off))
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}

// BuildQUICInitial returns the protected packet p describes: header
// protection and AES-128-GCM with the Initial keys of p.DCID (RFC 9001
// §5), as a client would send it.
func BuildQUICInitial(p QUICInitial) ([]byte, error) {
	v := quicParams(p.Version)
	if v == nil {
		return nil, errors.New("quic build: unknown version")
	}
	if len(p.DCID) > quicMaxCID || len(p.SCID) > quicMaxCID {
		return nil, errors.New("quic build: connection id longer than 20 bytes")
	}
	pnLen := p.PNLen
	if pnLen == 0 {
		pnLen = 4
	}
	if pnLen < 1 || pnLen > 4 {
		return nil, errors.New("quic build: packet number length not 1 to 4")
	}
	payload := p.Payload
	// The header protection sample starts 4 bytes after the packet
	// number: pad so that there are 16 bytes of ciphertext there.
	if short := quicMaxPNLen + quicSampleLen - (pnLen + len(payload) + quicTagLen); short > 0 {
		payload = append(payload[:len(payload):len(payload)], make([]byte, short)...)
	}
	hdr := []byte{0xc0 | v.initialType<<4 | (p.Reserved&3)<<2 | byte(pnLen-1)}
	if p.ClearFixedBit {
		hdr[0] &^= 0x40
	}
	hdr = binary.BigEndian.AppendUint32(hdr, p.Version)
	hdr = append(hdr, byte(len(p.DCID)))
	hdr = append(hdr, p.DCID...)
	hdr = append(hdr, byte(len(p.SCID)))
	hdr = append(hdr, p.SCID...)
	hdr = appendVarint(hdr, uint64(len(p.Token)))
	hdr = append(hdr, p.Token...)
	// The length field is always 2 bytes here: packets stay under 16 KiB.
	if pad := p.PadTo - (len(hdr) + 2 + pnLen + len(payload) + quicTagLen); pad > 0 {
		payload = append(payload[:len(payload):len(payload)], make([]byte, pad)...)
	}
	length := pnLen + len(payload) + quicTagLen
	if length >= 1<<14 {
		return nil, errors.New("quic build: packet longer than 16 KiB")
	}
	hdr = append(hdr, 0x40|byte(length>>8), byte(length))
	pnOff := len(hdr)
	for i := pnLen - 1; i >= 0; i-- {
		hdr = append(hdr, byte(p.PN>>(8*i)))
	}
	keyDCID := p.KeyDCID
	if keyDCID == nil {
		keyDCID = p.DCID
	}
	k := newQUICKeys(v, keyDCID)
	nonce := k.iv
	for i := 0; i < 4; i++ {
		nonce[quicIVLen-4+i] ^= byte(p.PN >> (8 * (3 - i)))
	}
	pkt := k.aead.Seal(hdr, nonce[:], payload, hdr)
	var mask [16]byte
	k.hp.Encrypt(mask[:], pkt[pnOff+quicMaxPNLen:pnOff+quicMaxPNLen+quicSampleLen])
	pkt[0] ^= mask[0] & 0x0f
	for i := 0; i < pnLen; i++ {
		pkt[pnOff+i] ^= mask[1+i]
	}
	return pkt, nil
}

// appendVarint appends v as a QUIC variable-length integer in its
// shortest form (v < 2^62).
func appendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, 0x40|byte(v>>8), byte(v))
	case v < 1<<30:
		return binary.BigEndian.AppendUint32(b, 0x80<<24|uint32(v))
	}
	return binary.BigEndian.AppendUint64(b, 0xc0<<56|v)
}
