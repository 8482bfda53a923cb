package audit

import (
	"testing"
	"time"
)

// TestRequestFloodIsAggregated: a worker that repeats one request on a
// terminated flow (allowed or refused) makes a bounded number of records,
// whose counts and byte sums account for every request.
func TestRequestFloodIsAggregated(t *testing.T) {
	const events = 20_000
	for _, action := range []string{"allow", "deny"} {
		path := tempLog(t)
		clock := newFakeClock()
		l := mustOpen(t, path, Options{Now: clock.Now})
		step := 5 * time.Second / events
		for range events {
			l.Log(Request{Action: action, FlowSeq: 3, Method: "GET", Host: "api.test", Path: "/x", Status: 200, BytesIn: 10, Rule: "allow[0]"})
			clock.Advance(step)
		}
		mustClose(t, l)
		lines := readLines(t, path)
		if len(lines) > events/10 {
			t.Fatalf("%s: %d records for a flood of one request", action, len(lines))
		}
		var total, in float64
		for _, line := range lines {
			m := decode(t, line)
			if m["event"] != "request" {
				continue
			}
			c, ok := m["count"].(float64)
			if !ok {
				c = 1
			}
			total += c
			in += m["bytes_in"].(float64)
		}
		if total != events || in != 10*events {
			t.Errorf("%s: records account for %v requests and %v bytes, want %d and %d", action, total, in, events, 10*events)
		}
	}
}
