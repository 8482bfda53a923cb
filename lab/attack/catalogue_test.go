package attack

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the catalogue in ../../integration/README.md")

func TestCatalogueShape(t *testing.T) {
	cat := Catalogue()
	layers := []string{LayerControl, LayerMetadata, LayerSpecial, LayerPolicy, LayerDNS, LayerResolve, LayerL7, LayerNetns, LayerCaps, LayerExecGuard, LayerView, LayerAudit, LayerQuota, LayerCredentials, LayerRequests}
	seen := map[string]bool{}
	cats := map[string]int{}
	attacks, controls := 0, 0
	for _, a := range cat {
		if seen[a.ID] {
			t.Errorf("duplicate id %s", a.ID)
		}
		seen[a.ID] = true
		cats[a.Category]++
		if !slices.Contains(Categories(), a.Category) {
			t.Errorf("%s: category %q is not in Categories", a.ID, a.Category)
		}
		if !slices.Contains(layers, a.Layer) {
			t.Errorf("%s: unknown layer %q", a.ID, a.Layer)
		}
		if a.Description == "" || a.Planned() {
			t.Errorf("%s: needs a description and a run function", a.ID)
		}
		if a.Control() != (a.Layer == LayerControl) || a.Control() != (a.Category == "control") {
			t.Errorf("%s: a control is exactly what has layer and category control", a.ID)
		}
		if (a.CheckHost != nil) != (a.HostCheck != "" && !strings.HasPrefix(a.HostCheck, "nothing to check")) && a.Phase == "" {
			t.Errorf("%s: a host check needs both its description and its function (HostCheck %q)", a.ID, a.HostCheck)
		}
		if a.Audit == AuditNone && a.Category == "containment" && a.NoRecord == "" && a.Phase == "" {
			t.Errorf("%s: a containment attempt without an audit record must say why (NoRecord)", a.ID)
		}
		if a.Phase != "" && a.Phase != PhaseAuditFill && a.Phase != PhaseInitRace && a.Phase != PhaseSessionBus && a.Phase != PhaseEngineSocket && a.Phase != PhaseSocketSweep && a.Phase != PhaseHostPaths && a.Phase != PhaseCredentials {
			t.Errorf("%s: unknown phase %q", a.ID, a.Phase)
		}
		if a.Control() {
			controls++
			network := a.Audit == AuditAllow && len(a.Aims) > 0
			files := a.CheckHost != nil && len(a.Aims) == 0
			if !network && !files {
				t.Errorf("%s: a control must want an allow record and name the target it must reach, or be checked on the host", a.ID)
			}
		} else {
			attacks++
			if a.Expect != Blocked {
				t.Errorf("%s: attacks expect blocked", a.ID)
			}
		}
		if a.Rule != "" && a.Audit == AuditNone {
			t.Errorf("%s: a rule without an audit expectation is never checked", a.ID)
		}
		if a.Audit == AuditDeny && a.Layer != LayerExecGuard && len(a.Keys) == 0 && !strings.HasPrefix(a.ID, "l7-") {
			t.Errorf("%s: wants a deny record but has no Keys to find it by", a.ID)
		}
		if strings.ToLower(a.ID) != a.ID || strings.ContainsAny(a.ID, " _") {
			t.Errorf("%s: ids are lower-case-with-dashes", a.ID)
		}
	}
	if attacks < 40 || len(cats) < 8 {
		t.Errorf("%d attacks in %d categories; the lab promises at least 40 in at least 8", attacks, len(cats))
	}
	if controls == 0 {
		t.Error("no controls: a gateway that blocks everything would pass")
	}
	for _, c := range Categories() {
		if cats[c] == 0 {
			t.Errorf("category %s has no attempt", c)
		}
	}
	for _, b := range BrowserAttempts() {
		if b.Category != CategoryBrowser || seen[b.ID] {
			t.Errorf("browser attempt %s: category %s, or id clashes", b.ID, b.Category)
		}
	}
	if _, ok := Find("meta-v4"); !ok {
		t.Error("Find(meta-v4) failed")
	}
	if _, ok := Find("no-such-attempt"); ok {
		t.Error("Find found a missing id")
	}
}

// TestCatalogueReadme: integration/README.md holds the catalogue exactly
// as generated (go test ./lab -run Readme -update rewrites it).
func TestCatalogueReadme(t *testing.T) {
	path := filepath.Join("..", "..", "integration", "README.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the catalogue: %v", err)
	}
	var gen bytes.Buffer
	WriteCatalogue(&gen)
	s := string(data)
	i, j := strings.Index(s, CatalogueBegin), strings.Index(s, CatalogueEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the catalogue markers", path)
	}
	cur := s[i : j+len(CatalogueEnd)+1]
	if cur == gen.String() {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(s[:i]+gen.String()+s[j+len(CatalogueEnd)+1:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date with the catalogue: run go test ./lab/attack -run TestCatalogueReadme -update", path)
}
