package judge

import (
	"strings"

	"github.com/nsgate/nsgate/audit"
)

// aggKey is the key under which the audit logger folds repeated denials
// into one record with a count (audit/aggregate.go): event, action,
// protocol, source address without port, destination, host and rule for
// flows; the reason instead of the rule for packets; name, type and rule
// for DNS. Other records have no key ("").
func aggKey(r audit.Record) string {
	switch e := r.Event.(type) {
	case audit.Flow:
		if e.Action == "deny" {
			return strings.Join([]string{"flow", e.Proto, audit.HostOnly(e.Src), e.Dst, e.Host, e.Rule}, "|")
		}
	case audit.Packet:
		if e.Action == "deny" {
			return strings.Join([]string{"packet", e.Proto, audit.HostOnly(e.Src), e.Dst, e.Reason}, "|")
		}
	case audit.DNS:
		if e.Action == "deny" {
			return strings.Join([]string{"dns", e.QName, e.QType, e.Rule}, "|")
		}
	}
	return ""
}

// recordKeys returns the Attempt.Keys forms that match a deny record: the
// destination (and name:port) of a flow, "dns:NAME" of a query,
// "packet:IP" of a packet. Other records have none.
func recordKeys(r audit.Record) []string {
	switch e := r.Event.(type) {
	case audit.Flow:
		if e.Action != "deny" {
			return nil
		}
		suffix := ""
		if e.Proto == "udp" {
			suffix = "/udp"
		}
		ks := []string{e.Dst + suffix}
		if e.Host != "" {
			if i := strings.LastIndexByte(e.Dst, ':'); i >= 0 {
				ks = append(ks, strings.ToLower(e.Host)+e.Dst[i:]+suffix)
			}
		}
		return ks
	case audit.DNS:
		if e.Action == "deny" {
			return []string{"dns:" + strings.TrimSuffix(strings.ToLower(e.QName), ".")}
		}
	case audit.Packet:
		if e.Action == "deny" {
			return []string{"packet:" + audit.HostOnly(e.Dst)}
		}
	}
	return nil
}

// keysMatch reports whether any pattern matches any key. A pattern
// "dns:*.zone" matches every "dns:NAME" with NAME below zone.
func keysMatch(patterns, keys []string) bool {
	for _, p := range patterns {
		for _, k := range keys {
			if p == k {
				return true
			}
			if strings.HasPrefix(p, "dns:*.") && strings.HasPrefix(k, "dns:") && strings.HasSuffix(k, p[len("dns:*"):]) {
				return true
			}
		}
	}
	return false
}
