package judge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

func TestRequireKeyedDenials(t *testing.T) {
	cat := []attack.Attempt{
		{ID: "ctl", Category: attack.CategoryBrowser, Layer: attack.LayerControl, Expect: attack.Allowed, Audit: attack.AuditAllow},
		{ID: "meta", Category: attack.CategoryBrowser, Layer: attack.LayerMetadata, Expect: attack.Blocked, Audit: attack.AuditDeny, Keys: []string{internet.MetadataV4 + ":80"}},
		{ID: "name", Category: attack.CategoryBrowser, Layer: attack.LayerDNS, Expect: attack.Blocked, Audit: attack.AuditDeny, Keys: []string{"dns:" + internet.UnapprovedName}},
	}
	// rec is a record as the log holds it: s's members after seq and time.
	rec := func(s string) json.RawMessage {
		return json.RawMessage(`{"seq":1,"time":"2026-01-02T03:04:05Z",` + s[1:])
	}
	noise := rec(`{"event":"dns","action":"deny","qname":"clients2.google.com","rule":"default"}`)
	for _, tc := range []struct {
		name  string
		audit map[string][]json.RawMessage
		fail  []string
		why   string
	}{
		{"keyed", map[string][]json.RawMessage{
			"meta": {rec(`{"event":"flow","action":"deny","dst":"169.254.169.254:80","rule":"builtin:metadata"}`)},
			"name": {noise, rec(`{"event":"dns","action":"deny","qname":"unapproved.test.","rule":"default"}`)},
		}, nil, "each attack has a deny record for what it tried"},
		{"noise only", map[string][]json.RawMessage{
			"meta": {rec(`{"event":"flow","action":"deny","dst":"169.254.169.254:80","rule":"builtin:metadata"}`)},
			"name": {noise},
		}, []string{"name"}, "Chromium's own denied lookups do not count for the attack"},
		{"other port", map[string][]json.RawMessage{
			"meta": {rec(`{"event":"flow","action":"deny","dst":"169.254.169.254:8080","rule":"builtin:metadata"}`)},
			"name": {rec(`{"event":"dns","action":"deny","qname":"unapproved.test","rule":"default"}`)},
		}, []string{"meta"}, "a denial on another port belongs to another attempt"},
	} {
		rep := Report{Pass: true}
		for _, at := range cat {
			a := tc.audit[at.ID]
			if a == nil {
				a = []json.RawMessage{}
			}
			rep.Results = append(rep.Results, Result{ID: at.ID, Pass: true, Audit: a})
		}
		RequireKeyedDenials(cat, &rep)
		var failed []string
		for _, r := range rep.Results {
			if !r.Pass {
				failed = append(failed, r.ID)
			}
		}
		if strings.Join(failed, ",") != strings.Join(tc.fail, ",") || rep.Pass != (len(tc.fail) == 0) || len(rep.Reasons) != len(tc.fail) {
			t.Errorf("%s: failed %v (pass %v, reasons %q), want %v: %s", tc.name, failed, rep.Pass, rep.Reasons, tc.fail, tc.why)
		}
	}
}
