package audit

import (
	"strings"
	"time"
)

// Aggregation of repeated denials (SPEC §7, last bullet).
//
// Deny events of type Flow, Packet and DNS are keyed by what makes them "the
// same denial" for a reader: event type, action, protocol, source address
// without its port, destination, host, rule (Packet: reason; DNS: qname,
// qtype, rule). Within one window the first event of a key is logged at once
// and later ones only bump a counter; when the window ends one record with
// count = number folded is written. The table holds at most Options.AggKeys
// keys; past that, new keys fold into one overflow entry per event type.

// aggKey identifies one kind of denial. All fields are substrings of the
// event's own fields, so building a key does not allocate.
type aggKey struct {
	event, action, proto, src, dst, host, rule, qname, qtype string
	overflow                                                 bool
}

// aggEntry is one key's state in the current window.
type aggEntry struct {
	start time.Time // when the window for this key began
	count uint64    // events folded since start
	first Event     // the first event folded (nil while count is 0)
}

// aggKeyOf returns the aggregation key of ev and true when ev is a deny event
// that is aggregated. ev must already be normalized (no pointers).
func aggKeyOf(ev Event) (aggKey, bool) {
	switch e := ev.(type) {
	case Flow:
		if e.Action != "deny" {
			return aggKey{}, false
		}
		return aggKey{event: "flow", action: e.Action, proto: e.Proto, src: HostOnly(e.Src),
			dst: e.Dst, host: e.Host, rule: e.Rule}, true
	case Packet:
		if e.Action != "deny" {
			return aggKey{}, false
		}
		return aggKey{event: "packet", action: e.Action, proto: e.Proto, src: HostOnly(e.Src),
			dst: e.Dst, rule: e.Reason}, true
	case DNS:
		if e.Action != "deny" {
			return aggKey{}, false
		}
		return aggKey{event: "dns", action: e.Action, qname: e.QName, qtype: e.QType, rule: e.Rule}, true
	}
	return aggKey{}, false
}

// overflowKey is the key that events of k's type fold into when the table is
// full.
func overflowKey(k aggKey) aggKey {
	return aggKey{event: k.event, action: k.action, overflow: true}
}

// aggregateEvent returns the record written at the end of a window: the first
// folded event with Count set. For an overflow entry the fields that differ
// between the folded events are cleared, so the record does not claim that
// every one of them had the first one's source, destination or name.
func aggregateEvent(ev Event, n uint64, overflow bool) Event {
	const why = "aggregate of distinct denials past the aggregation table bound"
	switch e := ev.(type) {
	case Flow:
		if overflow {
			return Flow{Action: e.Action, Reason: why, Count: n}
		}
		e.Count = n
		return e
	case Packet:
		if overflow {
			return Packet{Action: e.Action, Reason: why, Count: n}
		}
		e.Count = n
		return e
	case DNS:
		if overflow {
			return DNS{Action: e.Action, Count: n}
		}
		e.Count = n
		return e
	}
	return ev
}

// HostOnly strips a port from "ip:port" or "[ipv6]:port"; anything else is
// returned unchanged. It does not allocate. Aggregation keys use it for the
// source address (so do readers that group records the same way).
func HostOnly(s string) string {
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i > 0 {
			return s[1:i]
		}
		return s
	}
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i {
		return s[:i]
	}
	return s
}

// normalize replaces a pointer to one of this package's event types with
// the value it points to, so that the Logger never holds memory the caller
// may change and aggregation sees one representation. A nil pointer gives
// nil. Other events are returned unchanged (and do not allocate).
func normalize(ev Event) Event {
	switch e := ev.(type) {
	case *Start:
		return derefOrNil(e)
	case *DNS:
		return derefOrNil(e)
	case *Flow:
		return derefOrNil(e)
	case *FlowEnd:
		return derefOrNil(e)
	case *L7:
		return derefOrNil(e)
	case *Packet:
		return derefOrNil(e)
	case *Exec:
		return derefOrNil(e)
	case *Inbound:
		return derefOrNil(e)
	case *Policy:
		return derefOrNil(e)
	case *Exit:
		return derefOrNil(e)
	}
	return ev
}

func derefOrNil[T Event](p *T) Event {
	if p == nil {
		return nil
	}
	return *p
}
