package audit

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Aggregation: the worker cannot grow the log faster than a bound that
// nsgate sets, so that it can neither fill the disk nor outrun the writer
// (the audit fails closed when it cannot write).
//
// Every event a worker can repeat at will is keyed by what makes two of
// them "the same record" for a reader:
//
//   - flow (deny): proto, source address without its port, destination,
//     host, rule;
//   - flow (allow): the same, plus the upstream dialled and the first
//     refused answer;
//   - packet (deny): proto, source without port, destination, reason;
//   - dns: action, qname, qtype, rule and the first answer (the gateway
//     gives at most one);
//   - flow_end: the flow record it names, and its error;
//   - l7: action, the flow record it names, host, sni, http_host, reason;
//   - exec: action, path, reason (not the pid);
//   - inbound (from whoever reaches a published port, not the worker):
//     action, listen, dst, source address without its port;
//   - inbound_end: listen, dst, source address without its port, error
//     (bytes summed as for flow_end).
//
// Within one window (Options.Window, default 1 s) from a key's first event,
// that event is written at once and later ones are counted; when the window
// ends one record with count = number folded is written (a copy of the
// first folded event). Every kind is keyed from its first occurrence, so
// identical records fold from their first repeat and a worker's cost on
// the disk is bounded per distinct event, not per second. Two exceptions
// use the window's burst (Options.Burst records per window across both,
// default 64): allowed flows are written one by one, as they come, while
// it lasts (each flow of an ordinary run keeps a record of its own, which
// its flow_end names and which the security lab's judge reads), then
// keyed and folded; and a new record of another kind that finds the key
// table full is written as it comes while it lasts, before it would fold
// into the overflow entry. Only actions "allow" and "deny" are aggregated
// (no other exists).
//
// Folded allowed flows still need a record for their flow_end and l7
// records to name: Log returns the seq of the record that stands for them,
// the first of their key's window, and the end-of-window aggregate names it
// too (its "flow" member). Their flow_end records, all naming that seq,
// fold in turn: the aggregate flow_end has count = flow ends folded,
// bytes_out and bytes_in summed over them and duration_ms the longest, so
// the totals per flow record stay exact.
//
// The table holds at most Options.AggKeys keys; past that, new keys fold
// into one overflow entry per event type and action. So a window holds at
// most Burst + AggKeys + a few overflow records written at once and as
// many aggregates: a worker cannot cause more than about Burst + 2 ×
// AggKeys records per window, whatever it does (docs/threat-model.md,
// "Audit volume").

// aggKey identifies one kind of record. All fields are substrings of the
// event's own fields, so building a key does not allocate. kind is the event
// type and action (see kindOf); the meaning of a..g depends on the event
// (see aggKeyOf). Few string members keep hashing it cheap.
type aggKey struct {
	kind                uint8
	overflow            bool
	n                   uint64
	a, b, c, d, e, f, g string
}

// Aggregation styles.
const (
	aggNone   = iota // written as it comes
	aggDeny          // folds from the second occurrence in a window
	aggRepeat        // folds from the second occurrence; the burst writes new keys past a full table
	// aggStands is aggRepeat for an allowed flow: a folded one is
	// represented by its key's first record, whose seq Log returns, since
	// its flow_end and l7 records must name a flow record.
	aggStands
)

// Event kinds of aggregation keys: the event type times 2, plus 1 for
// "deny" (0: "allow"). Events with another action are not aggregated.
const (
	kindFlow = iota * 2
	kindPacket
	kindDNS
	kindFlowEnd
	kindL7
	kindExec
	kindInbound
	kindInboundEnd
	kindRequest
	kindCredential
	kindSyscall
)

// actionBit is 0 for "allow", 1 for "deny"; ok is false for other actions.
func actionBit(action string) (bit uint8, ok bool) {
	switch action {
	case "allow":
		return 0, true
	case "deny":
		return 1, true
	}
	return 0, false
}

// aggEntry is one key's state in the current window.
type aggEntry struct {
	start time.Time // when the window for this key began
	count uint64    // events folded since start
	first Event     // the first event folded (nil while count is 0)
	seq   uint64    // the record that stands for the key's events (0: none yet)
	// flow_end sums over the folded events.
	out, in, dur int64
}

// aggStyle says how ev is aggregated, without building its key. ev must
// already be normalized (no pointers).
func aggStyle(ev Event) int {
	switch e := ev.(type) {
	case Flow:
		switch e.Action {
		case "deny":
			return aggDeny
		case "allow":
			return aggStands
		}
	case Packet:
		if e.Action == "deny" {
			return aggDeny
		}
	case DNS:
		switch e.Action {
		case "deny":
			return aggDeny
		case "allow":
			return aggRepeat
		}
	case FlowEnd, InboundEnd:
		return aggRepeat
	case L7:
		if _, ok := actionBit(e.Action); ok {
			return aggRepeat
		}
	case Request:
		if _, ok := actionBit(e.Action); ok {
			return aggRepeat
		}
	case Credential:
		if e.Action == "deny" {
			return aggDeny
		}
	case Exec:
		if e.Missing && e.Action == "deny" {
			return aggDeny // a $PATH lookup: its misses fold at once
		}
		if _, ok := actionBit(e.Action); ok {
			return aggRepeat
		}
	case Syscall:
		if _, ok := actionBit(e.Action); ok {
			return aggRepeat
		}
	case Inbound:
		if _, ok := actionBit(e.Action); ok {
			return aggRepeat
		}
	}
	return aggNone
}

// aggKeyOf returns the aggregation key of ev, which aggStyle says is
// aggregated.
func aggKeyOf(ev Event) aggKey {
	switch e := ev.(type) {
	case Flow:
		bit, _ := actionBit(e.Action)
		k := aggKey{kind: kindFlow + bit, a: e.Proto, b: HostOnly(e.Src), c: e.Dst, d: e.Host, e: e.Rule}
		if bit == 0 {
			k.f = e.Upstream
			if len(e.Refused) > 0 {
				k.g = e.Refused[0]
			}
		}
		return k
	case Packet:
		return aggKey{kind: kindPacket + 1, a: e.Proto, b: HostOnly(e.Src), c: e.Dst, e: e.Reason}
	case DNS:
		bit, _ := actionBit(e.Action)
		k := aggKey{kind: kindDNS + bit, a: e.QName, b: e.QType, e: e.Rule}
		if len(e.Answer) > 0 {
			k.c = e.Answer[0]
			k.n = uint64(len(e.Answer))
		}
		return k
	case FlowEnd:
		return aggKey{kind: kindFlowEnd, n: e.FlowSeq, a: e.Error}
	case L7:
		bit, _ := actionBit(e.Action)
		return aggKey{kind: kindL7 + bit, n: e.FlowSeq, a: e.Host, b: e.SNI, c: e.HTTPHost, d: e.Reason}
	case Request:
		bit, _ := actionBit(e.Action)
		return aggKey{kind: kindRequest + bit, n: e.FlowSeq, a: e.Method, b: e.Host, c: e.Path, d: e.Rule, e: strconv.Itoa(e.Status)}
	case Credential:
		return aggKey{kind: kindCredential + 1, n: e.FlowSeq, a: e.Credential, b: e.Host, c: e.Where}
	case Exec:
		bit, _ := actionBit(e.Action)
		if e.Missing {
			// One command looked up through $PATH: its misses differ
			// in the directory only.
			return aggKey{kind: kindExec + bit, a: pathBase(e.Path), b: "missing", n: uint64(e.PID)}
		}
		return aggKey{kind: kindExec + bit, a: e.Path, b: e.Reason}
	case Syscall:
		bit, _ := actionBit(e.Action)
		return aggKey{kind: kindSyscall + bit, a: e.Syscall, b: e.Args, c: e.Reason}
	case Inbound:
		bit, _ := actionBit(e.Action)
		return aggKey{kind: kindInbound + bit, a: e.Listen, b: HostOnly(e.Src), c: e.Dst}
	case InboundEnd:
		return aggKey{kind: kindInboundEnd, a: e.Listen, b: HostOnly(e.Src), c: e.Dst, d: e.Error}
	}
	return aggKey{}
}

// overflowKey is the key that events of k's type fold into when the table is
// full.
func overflowKey(k aggKey) aggKey {
	return aggKey{kind: k.kind, overflow: true}
}

// fold counts ev into e.
func (e *aggEntry) fold(ev Event) {
	e.count++
	if e.first == nil {
		e.first = ev
	}
	switch fe := ev.(type) {
	case FlowEnd:
		e.out += fe.BytesOut
		e.in += fe.BytesIn
		e.dur = max(e.dur, fe.DurationMS)
	case InboundEnd:
		e.out += fe.BytesOut
		e.in += fe.BytesIn
		e.dur = max(e.dur, fe.DurationMS)
	case Request:
		e.out += fe.BytesOut
		e.in += fe.BytesIn
	}
}

// restart begins a new window at now.
func (e *aggEntry) restart(now time.Time) {
	*e = aggEntry{start: now}
}

// aggregateEvent returns the record written at the end of a window: the first
// folded event with Count set (and, for flow_end, the sums). For an overflow
// entry the fields that differ between the folded events are cleared, so the
// record does not claim that every one of them had the first one's source,
// destination, name or path.
func aggregateEvent(e *aggEntry, overflow bool) Event {
	const why = "aggregate of distinct records past the aggregation table bound"
	n := e.count
	switch ev := e.first.(type) {
	case Flow:
		if overflow {
			ev = Flow{Action: ev.Action, Reason: why}
		}
		ev.Count = n
		if ev.Action != "deny" {
			ev.FlowSeq = e.seq
		}
		return ev
	case Packet:
		if overflow {
			return Packet{Action: ev.Action, Reason: why, Count: n}
		}
		ev.Count = n
		return ev
	case DNS:
		if overflow {
			return DNS{Action: ev.Action, Count: n}
		}
		ev.Count = n
		return ev
	case FlowEnd:
		out := FlowEnd{FlowSeq: ev.FlowSeq, BytesOut: e.out, BytesIn: e.in, DurationMS: e.dur, Error: ev.Error, Count: n}
		if overflow {
			out.FlowSeq, out.Error = 0, ""
		}
		return out
	case L7:
		if overflow {
			return L7{Action: ev.Action, Reason: why, Count: n}
		}
		ev.Count = n
		return ev
	case Exec:
		if overflow {
			return Exec{Action: ev.Action, Reason: why, Count: n}
		}
		if ev.Missing {
			ev.Path = pathBase(ev.Path)
			ev.Reason = "not found in " + strconv.FormatUint(n, 10) + " more $PATH entries"
		}
		ev.Count = n
		return ev
	case Syscall:
		if overflow {
			return Syscall{Action: ev.Action, Syscall: ev.Syscall, Reason: why, Count: n}
		}
		ev.Count = n
		return ev
	case Request:
		if overflow {
			return Request{Action: ev.Action, Reason: why, Count: n, BytesOut: e.out, BytesIn: e.in}
		}
		ev.Count, ev.BytesOut, ev.BytesIn = n, e.out, e.in
		return ev
	case Credential:
		if overflow {
			return Credential{Action: ev.Action, Reason: why, Count: n}
		}
		ev.Count = n
		return ev
	case Inbound:
		if overflow {
			return Inbound{Action: ev.Action, Count: n}
		}
		ev.Count = n
		return ev
	case InboundEnd:
		out := InboundEnd{BytesOut: e.out, BytesIn: e.in, DurationMS: e.dur, Count: n}
		if !overflow {
			out.Listen, out.Dst, out.Src, out.Error = ev.Listen, ev.Dst, ev.Src, ev.Error
		}
		return out
	}
	return e.first
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
// may change and aggregation sees one representation, and clips
// worker-controlled strings that may be long (see clipEvent). A nil pointer
// gives nil. Other events are returned unchanged (and do not allocate).
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
		if e == nil {
			return nil
		}
		return clipEvent(*e)
	case *Packet:
		return derefOrNil(e)
	case *Request:
		if e == nil {
			return nil
		}
		return clipEvent(*e)
	case *Credential:
		return derefOrNil(e)
	case *Exec:
		if e == nil {
			return nil
		}
		return clipEvent(*e)
	case *Syscall:
		return derefOrNil(e)
	case *Inbound:
		return derefOrNil(e)
	case *Forward:
		return derefOrNil(e)
	case *InboundEnd:
		return derefOrNil(e)
	case *Policy:
		return derefOrNil(e)
	case *Exit:
		return derefOrNil(e)
	case Exec, L7, Request:
		return clipEvent(e)
	}
	return ev
}

// MaxField bounds the strings of a record that the worker chooses and that
// nothing else bounds: an exec's path and reason (a path may be 4 KiB, and
// the reason quotes it), an l7 record's sni, http_host and reason. A longer
// one is cut at MaxField bytes and marked "…(N more bytes)". With the
// aggregation bound this bounds the bytes a worker can make nsgate write,
// not only the records (docs/threat-model.md, "Audit volume"). Names
// (qname, host) are at most 253 bytes by construction.
const MaxField = 512

// clipEvent clips ev's long worker-controlled strings (see MaxField). It
// allocates only when one is too long.
func clipEvent(ev Event) Event {
	switch e := ev.(type) {
	case Exec:
		if len(e.Path) > MaxField || len(e.Reason) > MaxField {
			e.Path, e.Reason = clip(e.Path), clip(e.Reason)
			return e
		}
	case L7:
		if len(e.SNI) > MaxField || len(e.HTTPHost) > MaxField || len(e.Reason) > MaxField {
			e.SNI, e.HTTPHost, e.Reason = clip(e.SNI), clip(e.HTTPHost), clip(e.Reason)
			return e
		}
	case Request:
		if len(e.Path) > MaxField || len(e.Reason) > MaxField || len(e.Method) > 64 {
			e.Path, e.Reason, e.Method = clip(e.Path), clip(e.Reason), ClipText(e.Method, 64)
			return e
		}
	}
	return ev
}

// clip is ClipText at MaxField bytes.
func clip(s string) string { return ClipText(s, MaxField) }

// ClipText cuts s to at most n bytes (at a rune boundary) and says how
// much was cut: "…(N more bytes)".
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " more bytes)"
}

func derefOrNil[T Event](p *T) Event {
	if p == nil {
		return nil
	}
	return *p
}

// pathBase is the last element of a slash-separated path (without
// allocating): the name a $PATH lookup tries in each directory.
func pathBase(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
