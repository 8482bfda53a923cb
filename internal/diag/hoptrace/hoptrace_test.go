package hoptrace

import (
	"bytes"
	"strings"
	"testing"
)

func TestDumpPairs(t *testing.T) {
	On = true
	defer func() { On = false; next.Store(0) }()
	next.Store(0)
	for range 3 {
		Mark(TunRead)
		Mark(RelayFromWork)
	}
	var b bytes.Buffer
	Dump(&b)
	out := b.String()
	if !strings.HasPrefix(out, "6 marks\n") {
		t.Fatalf("dump %q: want 6 marks", out)
	}
	if !strings.Contains(out, "tun-read") || !strings.Contains(out, "relay-read-worker") {
		t.Fatalf("dump %q: want the hop names", out)
	}
	// tun-read → relay-read-worker 3 times, the reverse twice.
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 5 && f[0] == "tun-read" && f[2] != "3" {
			t.Fatalf("line %q: want count 3", l)
		}
	}
}

func TestOffRecordsNothing(t *testing.T) {
	On = false
	next.Store(0)
	Mark(TunRead)
	if next.Load() != 0 {
		t.Fatal("a mark was recorded while off")
	}
}
