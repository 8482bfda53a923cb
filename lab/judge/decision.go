package judge

import (
	"strconv"
	"strings"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
)

// Decision is nsgate's own account of an attempt: the one audit record
// that carries the gateway's decision on it, with its rule and reason. It
// is taken from the records attributed to the attempt (Result.Audit), not
// from what the attacker saw.
type Decision struct {
	// Seq is the record's seq in the audit log.
	Seq uint64 `json:"seq"`
	// Event and Action are the record's "event" and "action" members
	// ("flow" and "deny", "dns" and "deny", "exec" and "deny", ...).
	Event  string `json:"event"`
	Action string `json:"action"`
	// Rule is the policy rule the record names ("builtin:metadata",
	// "default", "allow[0]"); "" for events without one (exec, l7,
	// packet).
	Rule string `json:"rule,omitempty"`
	// Reason is the record's reason; for a record without one (dns) the
	// judge states what it records ("query NAME A refused").
	Reason string `json:"reason"`
}

// decisionOf picks the record that carries nsgate's decision on at from
// recs (the records attributed to it, in seq order), or nil when none
// does. For a control it is the first allowed flow. For an attack it is a
// deny record, the first of: one matching the attempt's keys and
// carrying its rule, one matching its keys, one carrying its rule, any;
// records standing for themselves before aggregates. Failing a deny
// record, an allowed flow that lists refused answers.
func decisionOf(at attack.Attempt, recs []audit.Record) *Decision {
	if at.Control() {
		for _, r := range recs {
			if r.Name == "flow" && r.Action() == "allow" {
				return decisionFrom(r)
			}
		}
		return nil
	}
	keyed := func(r audit.Record) bool { return len(at.Keys) > 0 && keysMatch(at.Keys, recordKeys(r)) }
	ruled := func(r audit.Record) bool { return at.Rule != "" && r.Rule() == at.Rule }
	prefs := []func(audit.Record) bool{
		func(r audit.Record) bool { return keyed(r) && (at.Rule == "" || ruled(r)) },
		keyed,
		ruled,
		func(audit.Record) bool { return true },
	}
	for _, pref := range prefs {
		for _, single := range []bool{true, false} {
			for _, r := range recs {
				if r.Action() == "deny" && (r.Count() == 0) == single && pref(r) {
					return decisionFrom(r)
				}
			}
		}
	}
	for _, r := range recs {
		if f, ok := r.Event.(audit.Flow); ok && f.Action == "allow" && len(f.Refused) > 0 {
			return decisionFrom(r)
		}
	}
	return nil
}

// decisionFrom states r as a Decision.
func decisionFrom(r audit.Record) *Decision {
	d := &Decision{Seq: r.Seq, Event: r.Name, Action: r.Action(), Rule: r.Rule()}
	switch e := r.Event.(type) {
	case audit.Flow:
		d.Reason = e.Reason
		if e.Action == "allow" && len(e.Refused) > 0 {
			d.Reason += "; refused answers " + strings.Join(e.Refused, ", ")
		}
	case audit.DNS:
		d.Reason = "query " + e.QName + " " + e.QType + " " + pastTense(e.Action)
	case audit.L7:
		d.Reason = e.Reason
		var seen []string
		if e.SNI != "" {
			seen = append(seen, "SNI "+e.SNI)
		}
		if e.HTTPHost != "" {
			seen = append(seen, "Host "+e.HTTPHost)
		}
		if len(seen) > 0 {
			d.Reason += " (flow to " + e.Host + ", " + strings.Join(seen, ", ") + ")"
		}
	case audit.Packet:
		d.Reason = e.Reason + " (" + e.Proto + " " + e.Src + " -> " + e.Dst + ")"
	case audit.Exec:
		d.Reason = e.Reason
		if d.Reason == "" {
			d.Reason = "exec " + e.Path + " " + pastTense(e.Action)
		}
	case audit.Syscall:
		d.Reason = e.Reason + " (" + e.Syscall + "(" + e.Args + ") " + pastTense(e.Action) + ")"
	}
	if n := r.Count(); n > 0 {
		d.Reason += " (an aggregate: " + strconv.FormatUint(n, 10) + " more like it)"
	}
	return d
}

func pastTense(action string) string {
	switch action {
	case "deny":
		return "refused"
	case "allow":
		return "allowed"
	}
	return action
}
