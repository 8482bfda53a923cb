package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// AuditRecord is one record of an nsgate audit log (SPEC §8), with the
// fields the lab correlates on. Raw holds the record exactly as written.
type AuditRecord struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Action  string    `json:"action"`
	Rule    string    `json:"rule"`
	Reason  string    `json:"reason"`
	Proto   string    `json:"proto"`
	Src     string    `json:"src"`
	Dst     string    `json:"dst"`
	Host    string    `json:"host"`
	QName   string    `json:"qname"`
	QType   string    `json:"qtype"`
	Path    string    `json:"path"`
	Flow    uint64    `json:"flow"`
	Count   uint64    `json:"count"`
	Refused []string  `json:"refused"`
	// Raw is the record's line, without its newline.
	Raw json.RawMessage `json:"-"`
}

// ReadAudit parses a JSON-lines audit log. It does not verify the hash
// chain (audit.Verify does); a line that is not a JSON object is an error
// naming its line number.
func ReadAudit(r io.Reader) ([]AuditRecord, error) {
	var recs []AuditRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec AuditRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return recs, fmt.Errorf("audit line %d: %w", line, err)
		}
		rec.Raw = append(json.RawMessage(nil), b...)
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return recs, fmt.Errorf("read audit log: %w", err)
	}
	return recs, nil
}

// ReadAuditFile is ReadAudit on a file.
func ReadAuditFile(path string) ([]AuditRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAudit(f)
}

// aggKey is the key under which the audit logger folds repeated denials
// into one record with a count (audit/aggregate.go): event, action,
// protocol, source address without port, destination, host and rule for
// flows; the reason instead of the rule for packets; name, type and rule
// for DNS. Other records have no key ("").
func (r AuditRecord) aggKey() string {
	if r.Action != "deny" {
		return ""
	}
	switch r.Event {
	case "flow":
		return strings.Join([]string{"flow", r.Proto, audit.HostOnly(r.Src), r.Dst, r.Host, r.Rule}, "|")
	case "packet":
		return strings.Join([]string{"packet", r.Proto, audit.HostOnly(r.Src), r.Dst, r.Reason}, "|")
	case "dns":
		return strings.Join([]string{"dns", r.QName, r.QType, r.Rule}, "|")
	}
	return ""
}

// keys returns the Attempt.Keys forms that match a deny record: the
// destination (and name:port) of a flow, "dns:NAME" of a query,
// "packet:IP" of a packet. Other records have none.
func (r AuditRecord) keys() []string {
	if r.Action != "deny" {
		return nil
	}
	switch r.Event {
	case "flow":
		suffix := ""
		if r.Proto == "udp" {
			suffix = "/udp"
		}
		ks := []string{r.Dst + suffix}
		if r.Host != "" {
			if i := strings.LastIndexByte(r.Dst, ':'); i >= 0 {
				ks = append(ks, strings.ToLower(r.Host)+r.Dst[i:]+suffix)
			}
		}
		return ks
	case "dns":
		return []string{"dns:" + strings.TrimSuffix(strings.ToLower(r.QName), ".")}
	case "packet":
		return []string{"packet:" + audit.HostOnly(r.Dst)}
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
