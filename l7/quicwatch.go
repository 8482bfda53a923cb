package l7

import (
	"slices"
	"sync"
)

// QUICWatch follows the client's datagrams on a UDP flow after the
// flow's first QUIC connection passed (its ClientHello, read by a
// QUICAssembler, named the flow's name), so that a second connection on
// the same flow is checked like the first.
//
// Nothing in a datagram says which connection it belongs to in a way a
// worker cannot forge, so the watch asks what a server would do with it.
// A server takes a client Initial as the start of a new connection when
// its Destination Connection ID is not one of its connections' and the
// packet decrypts with the Initial keys of that ID (RFC 9001 §5.2); a
// client's later Initials of a connection that is under way carry the
// server's connection ID and the keys of the client's first one, so they
// do not. The watch therefore decrypts, with the keys of its own
// Destination Connection ID, each Initial whose ID is not a connection it
// knows:
//
//   - one that does not decrypt cannot start a connection: it passes (it
//     is a later Initial of a connection under way, sent to a connection
//     ID the server gave in a NEW_CONNECTION_ID frame, which the watch
//     cannot read, or garbage the server drops);
//   - one that does is a new connection: its datagrams are held, read by
//     a QUICAssembler of their own, and decided like the first connection
//     (WatchDecide); the caller checks the Result, then calls Allow (the
//     held datagrams go on) or Refuse (they are dropped, and so is every
//     later datagram of that connection).
//
// Initials whose ID is a connection that passed are verified
// (QUICAssembler.Verify): they may only repeat that connection's
// ClientHello, so a new connection that reuses a passed connection's ID
// after the server forgot it cannot carry another name; the first one
// that fails is dropped with an error, and the connection's later
// Initials without one. Short-header
// packets (1-RTT) and Handshake packets, which the watch cannot read,
// pass: they belong to connections whose Initials were checked, or the
// server drops them. A long-header packet of a version other than 1 or 2,
// one without the fixed bit, or one whose header does not parse, is
// dropped (a server that speaks another version could start a connection
// from it), and so is a datagram with an Initial after a packet of
// another type (a server that queues a datagram led by a 0-RTT packet
// reads its Initials later, in the state of the connection they join).
//
// The server's connection IDs are learned from its long-header packets
// (Server): a client's later Initials are sent to them, protected with
// the keys of the client's first ID, so they do not decrypt with the keys
// of their own ID; the watch verifies them against the connection whose
// ClientHello was read (QUICAssembler.VerifyUnder), so that bytes of a
// ClientHello a server dropped but the watch read cannot come again,
// changed, under the server's ID. An Initial under a server's ID that
// none of the connections' keys open is dropped too: a server that never
// got an Initial the watch read (lost, or longer than it reads) has a
// smaller largest packet number and decodes a truncated one otherwise,
// so it may open what the watch cannot.
//
// A connection the watch forgot (it remembers quicWatchConns) keeps its
// server IDs in the watch, and Initials under them are dropped: else the
// gap above could be filled under a forgotten ID, unread.
//
// Datagram, Allow and Refuse are called by the reader of the client's
// side, Server by the writer to it; the watch locks. It copies what it
// holds.
type QUICWatch struct {
	mu    sync.Mutex
	conns []*watchedConn // at most quicWatchConns, oldest first
	// gone are the server IDs of connections the watch forgot (at most
	// quicWatchGone): the server may still route an Initial under one
	// to its connection and open it, so the watch drops those.
	gone    []string
	scratch []byte
}

// quicWatchConns bounds the connections a watch remembers, and
// quicWatchPending those held at once (each holds at most
// QUICMaxHeldBytes).
// quicWatchGone bounds the server IDs of forgotten connections it keeps;
// once they would not fit, new connections on the flow are refused.
const (
	quicWatchConns   = 16
	quicWatchPending = 4
	quicWatchGone    = 64
)

type watchState int

const (
	watchPending watchState = iota
	watchAllowed
	watchRefused
)

type watchedConn struct {
	dcid  string
	state watchState
	asm   *QUICAssembler
	held  [][]byte
	// scid is the client's Source Connection ID (the server's packets
	// are sent to it); server are the server's IDs seen in them, at most
	// quicWatchServerIDs.
	scid   string
	server []string
}

// quicWatchServerIDs bounds the server's connection IDs remembered per
// connection (a server uses one in its long-header packets, two after a
// Retry).
const quicWatchServerIDs = 4

// WatchAction is what to do with a datagram.
type WatchAction int

const (
	// WatchPass: send the datagram on.
	WatchPass WatchAction = iota
	// WatchHold: the watch keeps a copy until its connection is decided.
	WatchHold
	// WatchDrop: send nothing. Step.Err says why when the datagram is a
	// refusal to record; it is nil for a datagram of a connection
	// already refused.
	WatchDrop
	// WatchDecide: the datagram completed (or spoiled) a new
	// connection's ClientHello; check Step.Result, then call Allow or
	// Refuse with the step.
	WatchDecide
)

// WatchStep is the watch's answer for one datagram.
type WatchStep struct {
	Action WatchAction
	Result Result // WatchDecide
	Err    error  // WatchDrop
	conn   *watchedConn
}

// NewQUICWatch starts a watch after first, the assembler that read the
// flow's first ClientHello (a Result with no Err, which passed).
func NewQUICWatch(first *QUICAssembler) *QUICWatch {
	return &QUICWatch{conns: []*watchedConn{{
		dcid: string(first.dcid[:first.dcidLen]), state: watchAllowed, asm: first,
		scid: string(first.scid[:first.scidLen]),
	}}}
}

// Server takes a datagram the server sent to the client: the Source
// Connection IDs of its long-header packets addressed to a connection the
// watch passed are that connection's server IDs. It never retains d.
func (w *QUICWatch) Server(d []byte) {
	if len(d) == 0 || d[0]&0x80 == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for rest := d; len(rest) > 0 && rest[0]&0x80 != 0; {
		h, err := parseLongHeader(rest)
		if err != nil {
			return // a Retry (a new ID the client starts over under, read as a new connection) or garbage
		}
		for _, c := range w.conns {
			if c.state == watchAllowed && c.scid == string(h.dcid) && !slices.Contains(c.server, string(h.scid)) &&
				len(c.server) < quicWatchServerIDs && string(h.scid) != c.dcid {
				c.server = append(c.server, string(h.scid))
			}
		}
		rest = rest[h.end:]
	}
}

// Datagram takes the client's next datagram on the flow. It never
// retains d (it copies what it holds) and never panics.
func (w *QUICWatch) Datagram(d []byte) WatchStep {
	if len(d) == 0 || d[0]&0x80 == 0 {
		return WatchStep{Action: WatchPass}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var target *watchedConn
	under := false   // target was found by a server ID
	var fresh []byte // the ID of a new connection's Initial
	other := false   // a packet other than an Initial came before
	for rest := d; len(rest) > 0 && rest[0]&0x80 != 0; {
		h, err := parseLongHeader(rest)
		if err != nil {
			return WatchStep{Action: WatchDrop, Err: err}
		}
		if !h.initial() {
			other = true
		} else if other {
			// Clients put Initials first. A server may keep a datagram
			// led by a 0-RTT packet of a connection it does not know
			// yet and read it once an Initial starts that connection,
			// with that connection's packet numbers: an Initial in it
			// that this watch cannot decrypt now could decrypt then.
			return WatchStep{Action: WatchDrop, Err: errQUICLateInitial}
		}
		if h.initial() && target == nil && fresh == nil {
			if c := w.find(h.dcid); c != nil {
				target = c
			} else if slices.Contains(w.gone, string(h.dcid)) {
				return WatchStep{Action: WatchDrop, Err: errQUICForgotten}
			} else if cs := w.findServer(h.dcid); len(cs) > 0 {
				// After a Retry the old and the new connection share
				// the client's ID, and so the server's answers: the
				// packet is the one's whose keys open it. None: no
				// server reads it either.
				for _, c := range cs {
					if _, _, err := openInitial(c.asm.keys, rest[:h.end], h.pnOff, c.asm.largestPN, &w.scratch); err == nil || err == errQUICReserved {
						target, under = c, true
						break
					}
				}
				if target == nil {
					// No key opens it here, but a server that
					// missed an Initial the watch read has a
					// smaller largest packet number, decodes this
					// one's otherwise and may open it.
					return WatchStep{Action: WatchDrop, Err: errQUICDecrypt}
				}
			} else if w.opens(&h, rest[:h.end]) {
				fresh = h.dcid
			}
		}
		rest = rest[h.end:]
	}
	if target == nil && fresh == nil {
		return WatchStep{Action: WatchPass}
	}
	if target == nil {
		c, err := w.add(fresh)
		if err != nil {
			return WatchStep{Action: WatchDrop, Err: err}
		}
		target = c
	}
	switch target.state {
	case watchAllowed:
		verify := target.asm.Verify
		if under {
			verify = target.asm.VerifyUnder
		}
		if err := verify(d); err != nil {
			// From now on the connection's Initials are dropped
			// without another record.
			target.state, target.asm = watchRefused, nil
			return WatchStep{Action: WatchDrop, Err: err}
		}
		return WatchStep{Action: WatchPass}
	case watchRefused:
		return WatchStep{Action: WatchDrop}
	}
	target.held = append(target.held, append([]byte(nil), d...))
	r := target.asm.Add(d)
	if r.NeedMore {
		return WatchStep{Action: WatchHold}
	}
	return WatchStep{Action: WatchDecide, Result: r, conn: target}
}

// Allow marks a decided connection as passed and returns its held
// datagrams, in order, to send on.
func (w *QUICWatch) Allow(s WatchStep) [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := s.conn
	if c == nil || c.state != watchPending {
		return nil
	}
	held := c.held
	c.state, c.held = watchAllowed, nil
	c.scid = string(c.asm.scid[:c.asm.scidLen])
	return held
}

// Refuse marks a decided connection as refused: its held datagrams are
// dropped, and so are its later ones.
func (w *QUICWatch) Refuse(s WatchStep) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := s.conn; c != nil {
		c.state, c.held, c.asm = watchRefused, nil, nil
	}
}

// findServer lists the passed connections one of whose server IDs is
// dcid, newest first.
func (w *QUICWatch) findServer(dcid []byte) []*watchedConn {
	var cs []*watchedConn
	for i := len(w.conns) - 1; i >= 0; i-- {
		if c := w.conns[i]; c.state == watchAllowed && c.asm != nil && slices.Contains(c.server, string(dcid)) {
			cs = append(cs, c)
		}
	}
	return cs
}

func (w *QUICWatch) find(dcid []byte) *watchedConn {
	for _, c := range w.conns {
		if c.dcid == string(dcid) {
			return c
		}
	}
	return nil
}

// add remembers a new connection, pending, forgetting the oldest decided
// one when the watch is full (but not its server IDs: see gone).
func (w *QUICWatch) add(dcid []byte) (*watchedConn, error) {
	pending := 0
	for _, c := range w.conns {
		if c.state == watchPending {
			pending++
		}
	}
	if pending >= quicWatchPending {
		return nil, errQUICTooManyConns
	}
	if len(w.conns) >= quicWatchConns {
		for i, c := range w.conns {
			if c.state != watchPending {
				// Its server IDs stay known: the server may
				// still have the connection.
				if len(w.gone)+len(c.server) > quicWatchGone {
					return nil, errQUICTooManyConns
				}
				w.gone = append(w.gone, c.server...)
				w.conns = append(w.conns[:i], w.conns[i+1:]...)
				break
			}
		}
	}
	// A later connection may be the same one after a Retry: the client
	// then sends the server's connection ID, which may be short.
	c := &watchedConn{dcid: string(dcid), asm: &QUICAssembler{shortDCID: true}}
	w.conns = append(w.conns, c)
	return c, nil
}

// opens reports whether the Initial packet pkt (header h) decrypts with
// the Initial keys of its own Destination Connection ID, as a new
// connection's first packets do.
func (w *QUICWatch) opens(h *longHeader, pkt []byte) bool {
	k := newQUICKeys(h.params, h.dcid)
	_, _, err := openInitial(k, pkt, h.pnOff, -1, &w.scratch)
	return err == nil || err == errQUICReserved
}
