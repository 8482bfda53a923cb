package netstack

import (
	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// The audit fails closed: once the audit log cannot record a
// decision (audit.Logger: disk full, I/O error, a reader that went away),
// the gateway admits no new flow. Every TCP and UDP flow is checked twice:
// when it is classified (nothing is resolved or dialled for it) and once
// more just before it is admitted, after its dial, so a flow whose dial
// was under way when the log failed is refused too. Inbound forwards
// (DialGuest) are refused. Flows already relaying are left to the caller,
// which ends the worker. The check is a receive without waiting from the
// sink's Failed channel: two atomic loads on the hot path, no lock.

// The log may also be full (audit.Filler: it can no longer keep the space
// set aside for the closing records). Then classify refuses every new
// flow, before anything is dialled, while flows already past it are still
// admitted and recorded, into that space: so no upstream connection is
// ever opened without its record.

// auditFullReason is the reason of flows refused because the audit log is
// full (their deny records fold into the reserve).
const auditFullReason = "audit log full: no new flows"

// auditFailedReason is the reason of flows refused because the audit log
// failed (their records are not written: the log cannot take them).
const auditFailedReason = "audit log failed: no new flows"

// auditDown reports whether the audit log has failed.
func (g *Gateway) auditDown() bool { return audit.IsFailed(g.auditFailed) }

// auditRefuses turns p into a refusal and reports true once the audit log
// has failed.
func (g *Gateway) auditRefuses(p *plan) bool {
	if !g.auditDown() {
		return false
	}
	p.d = policy.Decision{Verdict: policy.Deny, Rule: "audit", Reason: auditFailedReason}
	p.reason, p.targets = "", nil
	return true
}

// auditRefusesNew is auditRefuses for a flow not yet classified: it
// refuses too once the log is full.
func (g *Gateway) auditRefusesNew(p *plan) bool {
	if g.auditRefuses(p) {
		return true
	}
	if !audit.IsFailed(g.auditFull) {
		return false
	}
	p.d = policy.Decision{Verdict: policy.Deny, Rule: "audit", Reason: auditFullReason}
	p.reason, p.targets = "", nil
	return true
}
