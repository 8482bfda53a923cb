package worker

import (
	"slices"
	"testing"
)

// TestBreak: the guard's layers travel to the guard as missing layers;
// the others are recorded as broken on their own; String names them all.
func TestBreak(t *testing.T) {
	b := Break{Metadata: true, FSLandlock: true, Seccomp: true, ExecAudit: true}
	if got := b.String(); got != "metadata,fs-landlock,seccomp,exec-audit" {
		t.Errorf("String() = %q", got)
	}
	if got := b.absent(); !slices.Equal(got, []string{"seccomp", "exec-audit"}) {
		t.Errorf("absent() = %q, want the guard's layers only", got)
	}
	if got := b.layers(false); !slices.Equal(got, []string{"metadata", "fs-landlock"}) {
		t.Errorf("layers(false) = %q, want the non-guard layers only", got)
	}
	if got := (Break{}).String(); got != "" {
		t.Errorf("zero Break: %q", got)
	}
}
