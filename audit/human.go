package audit

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// FormatHuman renders ev as one line for a person, without a newline:
//
//	nsgate: deny tcp 10.0.2.100:41234 -> 169.254.169.254:80 rule=builtin:metadata: 169.254.169.254 is a cloud metadata address
//
// A non-zero Count is rendered as " (N more like this)". Strings that come
// from the worker (names, paths, addresses) are quoted with ASCII escapes
// when they hold control characters, spaces or anything but printable
// ASCII, so a hostile name cannot forge a second line, restyle the
// terminal or pass for another name.
func FormatHuman(ev Event) string {
	ev = normalize(ev)
	if ev == nil {
		return "nsgate: <nil event>"
	}
	s := "nsgate: " + humanBody(ev)
	if n := countOf(ev); n > 0 {
		s += " (" + strconv.FormatUint(n, 10) + " more like this)"
	}
	return s
}

// humanBody is FormatHuman without the "nsgate: " prefix and the count.
func humanBody(ev Event) string {
	var b strings.Builder
	switch e := ev.(type) {
	case Flow:
		b.WriteString(word(e.Action) + " " + word(e.Proto) + " " + word(e.Src) + " -> " + word(e.Dst))
		field(&b, "host", e.Host)
		field(&b, "upstream", e.Upstream)
		field(&b, "rule", e.Rule)
		if len(e.Refused) > 0 {
			rawField(&b, "refused", list(e.Refused))
		}
		reason(&b, e.Reason)
	case Packet:
		b.WriteString(word(e.Action) + " " + word(e.Proto) + " " + word(e.Src) + " -> " + word(e.Dst))
		reason(&b, e.Reason)
	case DNS:
		b.WriteString(word(e.Action) + " dns " + word(e.QName) + " " + word(e.QType))
		if len(e.Answer) > 0 {
			rawField(&b, "answer", list(e.Answer))
		}
		field(&b, "rule", e.Rule)
	case L7:
		b.WriteString(word(e.Action) + " l7 flow=" + strconv.FormatUint(e.FlowSeq, 10))
		field(&b, "host", e.Host)
		field(&b, "sni", e.SNI)
		field(&b, "http_host", e.HTTPHost)
		reason(&b, e.Reason)
	case Exec:
		b.WriteString(word(e.Action) + " exec " + word(e.Path) + " pid=" + strconv.Itoa(e.PID))
		reason(&b, e.Reason)
	case Syscall:
		b.WriteString(word(e.Action) + " " + word(e.Syscall))
		if e.Args != "" {
			b.WriteString("(" + clean(e.Args, false) + ")")
		}
		b.WriteString(" pid=" + strconv.Itoa(e.PID))
		reason(&b, e.Reason)
	case Inbound:
		b.WriteString(word(e.Action) + " inbound " + word(e.Src) + " -> " + word(e.Listen) + " -> " + word(e.Dst))
	case InboundEnd:
		b.WriteString("inbound_end " + word(e.Src) + " -> " + word(e.Listen) + " -> " + word(e.Dst) +
			" bytes_out=" + strconv.FormatInt(e.BytesOut, 10) +
			" bytes_in=" + strconv.FormatInt(e.BytesIn, 10) +
			" duration_ms=" + strconv.FormatInt(e.DurationMS, 10))
		field(&b, "error", e.Error)
	case Forward:
		b.WriteString(word(e.Action) + " forward " + word(e.Listen) + " -> " + word(e.Dst))
		if e.ID != 0 {
			b.WriteString(" id=" + strconv.Itoa(e.ID))
		}
		reason(&b, e.Error)
	case Start:
		b.WriteString("start version=" + word(e.Version) + " pid=" + strconv.Itoa(e.PID))
		field(&b, "policy_sha256", e.PolicySHA256)
		if len(e.Degraded) > 0 {
			rawField(&b, "degraded", list(e.Degraded))
		}
	case FlowEnd:
		b.WriteString("flow_end flow=" + strconv.FormatUint(e.FlowSeq, 10) +
			" bytes_out=" + strconv.FormatInt(e.BytesOut, 10) +
			" bytes_in=" + strconv.FormatInt(e.BytesIn, 10) +
			" duration_ms=" + strconv.FormatInt(e.DurationMS, 10))
		field(&b, "error", e.Error)
	case Policy:
		b.WriteString("policy " + word(e.Action))
		field(&b, "policy_sha256", e.PolicySHA256)
		if e.Revoked > 0 {
			b.WriteString(" revoked=" + strconv.Itoa(e.Revoked))
		}
		reason(&b, e.Error)
	case Exit:
		b.WriteString("exit code=" + strconv.Itoa(e.Code))
		if c := e.Counters; c != nil {
			u := func(v uint64) string { return strconv.FormatUint(v, 10) }
			b.WriteString(" flows_allowed=" + u(c.TCPAllowed+c.UDPAllowed) + " flows_denied=" + u(c.TCPDenied+c.UDPDenied) +
				" dns_allowed=" + u(c.DNSAllowed) + " dns_denied=" + u(c.DNSDenied) +
				" bytes_out=" + u(c.BytesOut) + " bytes_in=" + u(c.BytesIn))
		}
	default:
		b.WriteString(word(ev.EventName()))
	}
	return b.String()
}

// isDeny reports whether ev is a denial that gets a human line.
func isDeny(ev Event) bool {
	switch ev.(type) {
	case Flow:
		// "fail": allowed, then the destination could not be reached.
		return actionOf(ev) == "deny" || actionOf(ev) == "fail"
	case Packet, DNS, L7, Exec, Syscall, Inbound, Forward:
		return actionOf(ev) == "deny"
	}
	return false
}

// actionOf returns ev's Action, or "" for events without one.
func actionOf(ev Event) string {
	switch e := ev.(type) {
	case Flow:
		return e.Action
	case Packet:
		return e.Action
	case DNS:
		return e.Action
	case L7:
		return e.Action
	case Exec:
		return e.Action
	case Syscall:
		return e.Action
	case Inbound:
		return e.Action
	case Forward:
		return e.Action
	case Policy:
		return e.Action
	}
	return ""
}

// countOf returns ev's Count, or 0 for events without one.
func countOf(ev Event) uint64 {
	switch e := ev.(type) {
	case Flow:
		return e.Count
	case Packet:
		return e.Count
	case DNS:
		return e.Count
	case FlowEnd:
		return e.Count
	case L7:
		return e.Count
	case Exec:
		return e.Count
	case Syscall:
		return e.Count
	case Inbound:
		return e.Count
	case InboundEnd:
		return e.Count
	}
	return 0
}

// field appends " name=value" when value is not empty.
func field(b *strings.Builder, name, value string) {
	if value == "" {
		return
	}
	b.WriteString(" " + name + "=" + word(value))
}

// rawField appends " name=value" for a value that is already cleaned.
func rawField(b *strings.Builder, name, value string) {
	b.WriteString(" " + name + "=" + value)
}

// reason appends ": text" when text is not empty. The reason is ours, not
// the worker's, but it may quote worker input, so it is cleaned too.
func reason(b *strings.Builder, text string) {
	if text == "" {
		return
	}
	b.WriteString(": " + clean(text, false))
}

// list renders values comma-separated, each cleaned.
func list(vs []string) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = word(v)
	}
	return strings.Join(out, ",")
}

// word renders one field value: quoted if empty or if it holds spaces or
// anything not printable.
func word(s string) string {
	if s == "" {
		return `""`
	}
	return clean(s, true)
}

// clean returns s, or s quoted with Go's ASCII escapes when it holds
// anything but printable ASCII (a control character, invalid UTF-8, any
// rune past '~'), a quote, or (when noSpace) a space. Printable non-ASCII
// is escaped too: a variation selector, a Hangul filler or a Braille
// blank is invisible, a combining mark or a Cyrillic letter looks like
// another name, and the operator must see the exact name a worker chose.
// Names nsgate decides on are ASCII already (punycode).
func clean(s string, noSpace bool) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || noSpace && c == ' ' {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// TermText renders free text for a terminal line: printable ASCII as it
// is, every other rune (control characters, line breaks, bidi overrides,
// invisible and lookalike runes) as its Go escape, and invalid UTF-8 as
// \xNN. Unlike a field value it is not quoted as a whole: it is for
// sentences that quote worker strings (a lab attempt's detail).
func TermText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i])>>4, 16) + strconv.FormatUint(uint64(s[i])&15, 16))
		case r >= ' ' && r <= '~':
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
