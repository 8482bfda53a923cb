package attack

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestNextAttemptKeepsKeysApart(t *testing.T) {
	now := time.Unix(1000, 0)
	todo := []Attempt{
		{ID: "a", Keys: []string{"k1"}},
		{ID: "b", Keys: []string{"k1", "k2"}},
		{ID: "c"},
	}
	cool := time.Second
	for _, tc := range []struct {
		last     map[string]time.Time
		wantIdx  int
		wantWait time.Duration
		why      string
	}{
		{map[string]time.Time{}, 0, 0, "nothing used yet: catalogue order"},
		{map[string]time.Time{"k1": now.Add(-300 * time.Millisecond)}, 2, 0, "k1 is warm: skip to the first attempt without it"},
		{map[string]time.Time{"k1": now.Add(-2 * time.Second)}, 0, 0, "k1 has cooled"},
	} {
		i, w := nextAttempt(todo, tc.last, cool, now)
		if i != tc.wantIdx || w != tc.wantWait {
			t.Errorf("%s: got %d %v, want %d %v", tc.why, i, w, tc.wantIdx, tc.wantWait)
		}
	}
	_, w := nextAttempt(todo[:2], map[string]time.Time{"k1": now.Add(-300 * time.Millisecond), "k2": now}, cool, now)
	if w != 700*time.Millisecond {
		t.Errorf("all warm: wait %v, want the shortest remaining 700ms", w)
	}
}

func TestAttackRejectsUnknownIDs(t *testing.T) {
	err := Run(context.Background(), Config{Only: []string{"meta-v4", "nope"}, Self: "/bin/true"}, func(Observation) {})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("got %v, want an error naming the unknown id", err)
	}
}

func TestRunOneContainsPanics(t *testing.T) {
	a := testAttacker()
	o := a.runOne(context.Background(), Attempt{ID: "boom", run: func(context.Context, *attacker) result { panic("kaboom") }})
	if o.Observed != Errored || !strings.Contains(o.Detail, "kaboom") || o.End.Before(o.Start) {
		t.Errorf("panic gave %+v", o)
	}
	o = a.runOne(context.Background(), Attempt{ID: "planned"})
	if o.Observed != Errored {
		t.Errorf("a planned attempt gave %+v", o)
	}
}
