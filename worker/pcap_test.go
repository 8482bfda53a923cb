package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/session"
)

// TestPcapRefusesNsgatesOwnFiles: --pcap is opened with O_TRUNC, so a pcap
// path that names the audit log (or its head file, the key, the policy)
// emptied it: `nsgate run --audit a.jsonl --pcap a.jsonl` wiped the earlier
// runs' records, filled the file with packets and exited 0. Such a path
// is refused before anything is opened, also through another name (a
// symbolic link).
func TestPcapRefusesNsgatesOwnFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("keep me\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	log, key, pol := file("audit.jsonl"), file("audit.key"), file("policy.yaml")
	head := file("audit.jsonl.head")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(log, link); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Session: session.Config{AuditPath: log, AuditKey: key, PolicyPath: pol}}
	for _, p := range []string{log, key, pol, head, link} {
		cfg.Pcap = p
		if err := cfg.pcapClash(); err == nil || !strings.Contains(err.Error(), "--pcap") {
			t.Errorf("--pcap %s: %v; want it refused", p, err)
		}
	}
	// Neither there yet: the pcap would make the file the log opens.
	fresh := filepath.Join(dir, "new.jsonl")
	cfg2 := Config{Pcap: fresh, Session: session.Config{AuditPath: dir + "/./new.jsonl"}}
	if err := cfg2.pcapClash(); err == nil {
		t.Errorf("--pcap and --audit both %s (new): not refused", fresh)
	}
	cfg.Pcap = filepath.Join(dir, "worker.pcap")
	if err := cfg.pcapClash(); err != nil {
		t.Errorf("--pcap of a new file: %v", err)
	}
}
