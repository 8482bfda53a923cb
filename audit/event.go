// Package audit writes nsgate's hash-chained JSON-lines audit log, verifies
// it, and renders denials for people.
package audit

// Event is one audit record's payload. Each concrete type below marshals to
// its event's fields (docs/audit.md); the Logger adds seq, time, event,
// prev and mac.
type Event interface {
	// EventName is the value of the record's "event" field.
	EventName() string
}

// Start is written first, once per run.
type Start struct {
	Version      string   `json:"version"`
	PolicySHA256 string   `json:"policy_sha256"`
	Argv         []string `json:"argv"`
	PID          int      `json:"pid"`
	// Degraded lists enforcement layers that were asked for but are not in
	// force (e.g. "landlock" under --exec-guard=best-effort).
	Degraded []string `json:"degraded,omitempty"`
}

// DNS records one query answered by the gateway.
type DNS struct {
	QName  string   `json:"qname"`
	QType  string   `json:"qtype"`
	Action string   `json:"action"`
	Answer []string `json:"answer,omitempty"`
	Rule   string   `json:"rule"`
	Count  uint64   `json:"count,omitempty"`
}

// Flow records the decision on one new TCP or UDP flow.
type Flow struct {
	Action   string `json:"action"`
	Proto    string `json:"proto"`
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	Host     string `json:"host,omitempty"`
	Upstream string `json:"upstream,omitempty"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason"`
	// Refused lists resolved answers that the policy refused (name flows).
	Refused []string `json:"refused,omitempty"`
	Count   uint64   `json:"count,omitempty"`
	// FlowSeq, on an aggregate of allowed flows only, is the seq of the
	// record that stands for the folded flows: their flow_end and l7
	// records name it (see aggregate.go).
	FlowSeq uint64 `json:"flow,omitempty"`
}

// FlowEnd closes a flow that was allowed. FlowSeq is the seq of its Flow.
// An aggregate (Count > 0) stands for Count flow ends of that flow record:
// the bytes are their sums, the duration the longest.
type FlowEnd struct {
	FlowSeq    uint64 `json:"flow"`
	BytesOut   int64  `json:"bytes_out"`
	BytesIn    int64  `json:"bytes_in"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
	Count      uint64 `json:"count,omitempty"`
}

// L7 records a TLS SNI or HTTP Host check on a flow opened by name.
type L7 struct {
	Action   string `json:"action"`
	FlowSeq  uint64 `json:"flow"`
	Host     string `json:"host"`
	SNI      string `json:"sni,omitempty"`
	HTTPHost string `json:"http_host,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Count    uint64 `json:"count,omitempty"`
}

// Request records one HTTP request inside a flow that nsgate terminated
// (a tls: terminate rule): the method, the flow's name, the normalized
// path without its query, the status given to the worker, the body bytes
// each way and the rule that decided it. A refused request has status 403
// (or 0 for an h2 stream that was reset) and Action "deny".
type Request struct {
	Action   string `json:"action"`
	FlowSeq  uint64 `json:"flow"`
	Method   string `json:"method"`
	Host     string `json:"host"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	BytesOut int64  `json:"bytes_out"`
	BytesIn  int64  `json:"bytes_in"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason,omitempty"`
	Count    uint64 `json:"count,omitempty"`
}

// Credential records a credential placeholder seen where it may not go
// (Action "deny"): another host, a body, a URL, a plain flow, a DNS name.
// It names the credential, never its secret or its placeholder.
type Credential struct {
	Action     string `json:"action"`
	FlowSeq    uint64 `json:"flow,omitempty"`
	Credential string `json:"credential"`
	Host       string `json:"host,omitempty"`
	Where      string `json:"where"`
	Reason     string `json:"reason,omitempty"`
	Count      uint64 `json:"count,omitempty"`
}

// Packet records a refused packet that is not a TCP/UDP flow (ICMP, other
// IP protocols, malformed input).
type Packet struct {
	Action string `json:"action"`
	Proto  string `json:"proto"`
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	Reason string `json:"reason,omitempty"`
	Count  uint64 `json:"count,omitempty"`
}

// Exec records one execve/execveat attempt by the worker.
type Exec struct {
	Action string `json:"action"`
	Path   string `json:"path"`
	PID    int    `json:"pid"`
	Reason string `json:"reason,omitempty"`
	// Missing: the path names no file (a shell or execvp trying each
	// $PATH entry); the kernel would have refused it too. Recorded, but
	// no human line is written for it.
	Missing bool   `json:"missing,omitempty"`
	Count   uint64 `json:"count,omitempty"`
}

// Syscall records a system call of the worker that the guard refused and
// that is not an exec: today socket(AF_UNIX) without --allow-unix, which
// the worker would otherwise see fail with EPERM and nothing said.
type Syscall struct {
	Action  string `json:"action"`
	Syscall string `json:"syscall"`
	// Args says what was asked ("AF_UNIX SOCK_STREAM").
	Args   string `json:"args,omitempty"`
	PID    int    `json:"pid"`
	Reason string `json:"reason,omitempty"`
	Count  uint64 `json:"count,omitempty"`
}

// ExecNotListed ends the reason of an exec refusal whose only cause is
// that no exec.allow entry names the file: the reason is the canonical
// path of the regular file the guard checked, then this. It is the one
// refusal an exec.allow entry for that path lifts for that file alone,
// so the only one package learn turns into an entry (a directory would
// allow its tree; a loader refused by what it is would then run anything).
const ExecNotListed = " is not in the exec allowlist"

// Inbound records a connection through a --publish forward.
type Inbound struct {
	Action string `json:"action"`
	Listen string `json:"listen"`
	Dst    string `json:"dst"`
	Src    string `json:"src"`
	Count  uint64 `json:"count,omitempty"`
}

// InboundEnd closes an inbound connection (TCP) or flow (UDP, one per
// client address) that reached the worker: BytesOut went from the worker
// to the client, BytesIn the other way. An aggregate (Count > 0) stands
// for Count of them: the bytes are their sums, the duration the longest.
type InboundEnd struct {
	Listen     string `json:"listen"`
	Dst        string `json:"dst"`
	Src        string `json:"src"`
	BytesOut   int64  `json:"bytes_out"`
	BytesIn    int64  `json:"bytes_in"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
	Count      uint64 `json:"count,omitempty"`
}

// Forward records a host-side forward to the worker being opened ("add"),
// refused ("deny", Error says why) or closed ("remove"): `nsgate run
// --publish`, pasta's -t/-u and slirp4netns's add_hostfwd/remove_hostfwd.
// ID is the forward's (absent on a refusal).
type Forward struct {
	Action string `json:"action"`
	ID     int    `json:"id,omitempty"`
	Listen string `json:"listen"`
	Dst    string `json:"dst"`
	Error  string `json:"error,omitempty"`
}

// Policy records a policy reload (SIGHUP): accepted or refused.
type Policy struct {
	Action       string `json:"action"`
	PolicySHA256 string `json:"policy_sha256,omitempty"`
	Error        string `json:"error,omitempty"`
	// Revoked, on an accepted reload, is the number of open flows the
	// new policy refuses, which were cut (each one's flow_end says so).
	Revoked int `json:"revoked,omitempty"`
	// Layers, on a "degraded" record of layers not in force, names them
	// (as Start.Degraded does).
	Layers []string `json:"layers,omitempty"`
}

// Exit is the last record of a run.
type Exit struct {
	Code int `json:"code"`
	// Counters are what the gateway counted over the run (absent for a
	// run without a network, as `nsgate guard`).
	Counters *Counters `json:"counters,omitempty"`
	// LogFull, when set, says the log could no longer keep its reserve
	// (reserve.go): the gateway admitted no new flow from then on and the
	// worker was stopped; every flow admitted before has its record.
	LogFull string `json:"log_full,omitempty"`
}

// Counters are a run's totals, written in its exit record. Flows that
// were refused count in the *_denied fields, whatever layer refused them;
// limit_refused and dial_failed say how many of those were refused by the
// flow limits or failed upstream after the policy allowed them.
type Counters struct {
	TCPAllowed   uint64 `json:"tcp_allowed"`
	TCPDenied    uint64 `json:"tcp_denied"`
	UDPAllowed   uint64 `json:"udp_allowed"`
	UDPDenied    uint64 `json:"udp_denied"`
	LimitRefused uint64 `json:"limit_refused"`
	DialFailed   uint64 `json:"dial_failed"`
	// L7Refused counts flows the policy allowed (so in *_allowed) that the
	// L7 check (SNI, Host, QUIC SNI, a later HTTP request) then refused.
	L7Refused uint64 `json:"l7_refused"`
	// BytesOut went from the worker upstream, BytesIn back.
	BytesOut uint64 `json:"bytes_out"`
	BytesIn  uint64 `json:"bytes_in"`
	// DNS queries the gateway answered for the worker.
	DNSQueries uint64 `json:"dns_queries"`
	DNSAllowed uint64 `json:"dns_allowed"`
	DNSDenied  uint64 `json:"dns_denied"`
	// Packets read from the worker's link; of them refused (ICMP, other
	// protocols, spoofed sources), malformed, and dropped without a record.
	PacketsIn      uint64 `json:"packets_in"`
	PacketsRefused uint64 `json:"packets_refused"`
	Malformed      uint64 `json:"malformed"`
	Dropped        uint64 `json:"dropped"`
	// LinkDropped counts packets the link itself could not pass (both
	// directions); PcapDropped packets the pcap could not take.
	LinkDropped uint64 `json:"link_dropped"`
	PcapDropped uint64 `json:"pcap_dropped"`
}

func (Start) EventName() string      { return "start" }
func (DNS) EventName() string        { return "dns" }
func (Flow) EventName() string       { return "flow" }
func (FlowEnd) EventName() string    { return "flow_end" }
func (L7) EventName() string         { return "l7" }
func (Request) EventName() string    { return "request" }
func (Credential) EventName() string { return "credential" }
func (Packet) EventName() string     { return "packet" }
func (Exec) EventName() string       { return "exec" }
func (Syscall) EventName() string    { return "syscall" }
func (Inbound) EventName() string    { return "inbound" }
func (Forward) EventName() string    { return "forward" }
func (InboundEnd) EventName() string { return "inbound_end" }
func (Policy) EventName() string     { return "policy" }
func (Exit) EventName() string       { return "exit" }

// Sink receives events. Implementations must be safe for concurrent use and
// must not block the caller on I/O: Log returns the seq the record will
// carry; for an event folded into an aggregate, 0, or for an allowed flow
// the seq of the record that stands for it (see aggregate.go).
type Sink interface {
	Log(Event) uint64
}

// Failer is implemented by a Sink that can fail, as the Logger does when a
// record cannot be written. Failed is closed at the first failure; from
// then on the gateway admits no new flow, DNS answers only refusals and no
// exec is let through (the audit fails closed). A receive from Failed
// without waiting costs two atomic loads, so checking it on every new flow
// is cheap.
type Failer interface {
	Failed() <-chan struct{}
}

// FailedOf returns s's Failed channel, or nil (never ready) when s cannot
// fail.
func FailedOf(s Sink) <-chan struct{} {
	if f, ok := s.(Failer); ok {
		return f.Failed()
	}
	return nil
}

// IsFailed reports, without waiting, whether ch (from FailedOf) is closed.
func IsFailed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
