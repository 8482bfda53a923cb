package audit

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestTeeSeesFoldedEvents: the observer sees every event, also those the
// Logger folds into one aggregate, and the tee fails with its Logger.
func TestTeeSeesFoldedEvents(t *testing.T) {
	var buf bytes.Buffer
	l := startMem(Options{Window: time.Hour}, &buf)
	var mu sync.Mutex
	var seen []Event
	s := Tee(l, func(ev Event) { mu.Lock(); seen = append(seen, ev); mu.Unlock() })
	deny := Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: "203.0.113.9:81", Rule: "default"}
	for range 5 {
		s.Log(deny)
	}
	if _, err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 5 {
		t.Errorf("observer saw %d events, want 5", len(seen))
	}
	if n := bytes.Count(buf.Bytes(), []byte(`"dst":"203.0.113.9:81"`)); n != 2 || !bytes.Contains(buf.Bytes(), []byte(`"count":4`)) {
		t.Errorf("log has %d records of the denial, want 2 (the first, then an aggregate of 4):\n%s", n, buf.String())
	}
	if FailedOf(s) != l.Failed() {
		t.Errorf("the tee does not pass on its Logger's Failed")
	}
	if Tee(l, nil) != Sink(l) {
		t.Errorf("Tee with no observer is not the sink itself")
	}
}
