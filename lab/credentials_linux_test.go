package lab

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
)

// TestJudgeCred: the credential judge tells blocked from broken. An
// attack the worker saw refused passes only with no request at the
// upstreams and its deny record; a request carrying the secret or a
// placeholder fails it whatever the worker saw; the control needs
// exactly one request with the secret in Authorization; the worker
// seeing the secret fails anything.
func TestJudgeCred(t *testing.T) {
	secret := attack.CredSecretPrefix + strings.Repeat("ab", 16)
	ph := attack.CredPlaceholderPrefix + strings.Repeat("0f", 20)
	t0 := time.Now()
	o := func(id string, out attack.Outcome, detail string) attack.Observation {
		return attack.Observation{ID: id, Observed: out, Detail: detail, Start: t0, End: t0.Add(time.Second)}
	}
	in := t0.Add(500 * time.Millisecond)
	rec := func(name string, f map[string]any) audit.Record {
		f["event"] = name
		b, _ := json.Marshal(f)
		return audit.Record{Seq: 3, Time: in, Name: name, Raw: b}
	}
	bodyDeny := rec("credential", map[string]any{"action": "deny", "where": "body", "credential": "lab-api", "reason": "in the body"})
	allowOK := rec("request", map[string]any{"action": "allow", "path": "/v1/ok", "method": "GET", "host": attack.CredAPIName, "status": 200})
	withSecret := credHit{time: in, target: "creds-api", method: "GET", uri: "/v1/ok", auth: "Bearer " + secret, secret: true}
	withPlace := credHit{time: in, target: "creds-other", method: "GET", uri: "/v1/ok", auth: "Bearer " + ph, place: true}
	later := credHit{time: t0.Add(5 * time.Second), target: "creds-api", method: "GET", uri: "/v1/ok", auth: "Bearer " + secret, secret: true}

	find := func(id string) attack.Attempt {
		at, ok := attack.Find(id)
		if !ok {
			t.Fatalf("no attempt %s", id)
		}
		return at
	}
	for _, tc := range []struct {
		name string
		id   string
		obs  attack.Observation
		hits []credHit
		dns  []internet.Hit
		recs []audit.Record
		pass bool
		out  attack.Outcome
	}{
		{"refused, nothing upstream, the record", "creds-in-body", o("creds-in-body", attack.Blocked, "403"), []credHit{later}, nil, []audit.Record{bodyDeny}, true, attack.Blocked},
		{"refused but no record", "creds-in-body", o("creds-in-body", attack.Blocked, "403"), nil, nil, nil, false, attack.Blocked},
		{"refused, but the placeholder went upstream", "creds-other-host", o("creds-other-host", attack.Blocked, "403"), []credHit{withPlace}, nil, []audit.Record{bodyDeny}, false, attack.Allowed},
		{"refused, but the secret went upstream", "creds-path-confusion", o("creds-path-confusion", attack.Blocked, "403"), []credHit{withSecret}, nil, nil, false, attack.Allowed},
		{"the placeholder reached the resolver", "creds-in-dns", o("creds-in-dns", attack.Blocked, "nxdomain"), nil,
			[]internet.Hit{{Time: in, Target: "upstream-dns", Detail: ph + ".leak.creds.test A"}}, nil, false, attack.Allowed},
		{"the worker saw the secret", "creds-echo", o("creds-echo", attack.Blocked, "echo Bearer "+secret), []credHit{withSecret}, nil, []audit.Record{allowOK}, false, attack.Allowed},
		{"control: the secret upstream once", "control-credentials", o("control-credentials", attack.Allowed, "200"), []credHit{withSecret, later}, nil, []audit.Record{allowOK}, true, attack.Allowed},
		{"control: the placeholder upstream", "control-credentials", o("control-credentials", attack.Allowed, "200"), []credHit{withPlace}, nil, []audit.Record{allowOK}, false, attack.Allowed},
		{"control: refused", "control-credentials", o("control-credentials", attack.Blocked, "403"), nil, nil, nil, false, attack.Blocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := find(tc.id)
			res := ownRunResult(at)
			res.Control = at.Control()
			r := judgeCred(at, tc.obs, res, secret, tc.hits, tc.dns, tc.recs, nil, tc.obs.End.Add(time.Second), "cmd")
			if r.Pass != tc.pass || r.Observed != tc.out {
				t.Errorf("pass %v observed %s (%s), want %v %s", r.Pass, r.Observed, r.Why, tc.pass, tc.out)
			}
			if strings.Contains(r.Detail+r.HostCheck+r.Why, secret) {
				t.Errorf("the result holds the secret: %+v", r)
			}
			for _, h := range r.Hits {
				if strings.Contains(h.Detail, secret) || strings.Contains(h.Detail, ph) {
					t.Errorf("a hit's detail holds the secret or the placeholder: %q", h.Detail)
				}
			}
		})
	}
}
