package learn

import (
	"testing"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/policy"
)

// FuzzLearnedParses: whatever names, addresses and paths the worker puts
// in its events, the learned file and the suggestion parse.
func FuzzLearnedParses(f *testing.F) {
	f.Add("img1.cdn.test", "198.18.0.1:443", "/usr/bin/git", true)
	f.Add("Bücher.TEST.", "[2001:db8::1]:53", "/a b/\n# x: [", false)
	f.Add("a\nversion: 2", "203.0.113.9:0", "relative", true)
	f.Fuzz(func(t *testing.T, host, dst, path string, tcp bool) {
		proto := "udp"
		if tcp {
			proto = "tcp"
		}
		learned, denied := NewCollector(Learned), NewCollector(Denied)
		for _, h := range []string{host, "", "x." + host, "y." + host, "z." + host} {
			learned.Observe(audit.Flow{Action: "allow", Proto: proto, Dst: dst, Host: h, Rule: policy.RuleLearn})
			denied.Observe(audit.Flow{Action: "deny", Proto: proto, Dst: dst, Host: h, Rule: policy.RuleDefault})
			denied.Observe(audit.DNS{Action: "deny", QName: h, Rule: policy.RuleDefault})
			learned.Observe(audit.Flow{Action: "deny", Proto: proto, Dst: dst, Host: h, Rule: policy.RuleLearn, Reason: path})
		}
		for _, c := range []*Collector{learned, denied} {
			c.Observe(audit.Exec{Action: "deny", Path: path})
			c.Observe(audit.Exec{Action: "deny", Path: "/" + path, Reason: "/" + path + audit.ExecNotListed})
		}
		if _, err := LearnedPolicy(learned.Result(nil), Run{Argv: []string{host, path}, Time: time.Now(), BasePath: path, ExecAllow: []string{path, "/" + path}}); err != nil {
			t.Fatalf("learned: %v", err)
		}
		if _, err := Suggestions(denied.Result(nil), SuggestInput{Log: path}); err != nil {
			t.Fatalf("suggest: %v", err)
		}
	})
}
