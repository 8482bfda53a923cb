//go:build integration

package integration

import (
	"strings"
	"testing"
)

// probe is one `nsgate __probe tcp ADDR` that a test runs in a worker or a
// container, and the start of the line it must print ("ok " or "refused ").
type probe struct{ why, addr, want string }

// containerProbes are the checks every container-engine test makes of its
// policy: an approved name answers, and the metadata address, an IP literal
// and a name the policy does not allow are refused.
func containerProbes() []probe {
	return []probe{
		{"approved name", "app.test:8080", "ok "},
		{"cloud metadata address", metadataV4 + ":80", "refused "},
		{"IP literal the policy does not allow", otherV4 + ":8080", "refused "},
		{"name the policy does not approve", "evil.test:8080", "refused "},
	}
}

// probeScript is the shell line that runs each probe in order with the
// nsgate binary at bin.
func probeScript(bin string, probes []probe) []string {
	var script []string
	for _, p := range probes {
		script = append(script, bin+" __probe tcp "+p.addr)
	}
	return script
}

// checkProbes checks that lines start with one line for each probe (more
// lines may follow when more is set), each beginning as the probe wants,
// the first, an approved name, with the server's 200 status line. It
// returns the lines after the probes'.
func checkProbes(t *testing.T, lines []string, probes []probe, more bool) []string {
	t.Helper()
	if len(lines) < len(probes) || !more && len(lines) != len(probes) {
		t.Fatalf("want %d probe lines, got:\n%s", len(probes), strings.Join(lines, "\n"))
	}
	for i, p := range probes {
		if !strings.HasPrefix(lines[i], p.want) {
			t.Errorf("%s (%s): %q, want %q...", p.why, p.addr, lines[i], p.want)
		}
	}
	if !strings.Contains(lines[0], " 200 ") {
		t.Errorf("%s (%s): %q, want the app server's 200 status line", probes[0].why, probes[0].addr, lines[0])
	}
	return lines[len(probes):]
}
