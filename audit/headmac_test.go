//go:build linux

package audit

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestKeyedHeadFileCannotBeRewritten: the MACs make a keyed log's records
// unforgeable without the key, but its head file was a bare hash that
// anyone who can write the log's directory could write. Whole runs cut
// from the end of a keyed log, with the head file rewritten to the new
// last record, verified with --key as "anchored: nothing was cut from the
// end", and nsgate appended to it. With a key, the head file carries a MAC
// of the head, so only the key's holder can move the anchor.
func TestKeyedHeadFileCannotBeRewritten(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, forged := range []string{"bare hash", "old head file's mac"} {
		t.Run(forged, func(t *testing.T) {
			path := tempLog(t)
			writeRun(t, path, key, true)
			first, err := os.ReadFile(HeadFile(path))
			if err != nil {
				t.Fatal(err)
			}
			writeRun(t, path, key, true)
			// Cut the second run off, as someone without the key would.
			lines := readLines(t, path)
			kept := lines[:3]
			if err := os.WriteFile(path, joinLines(kept), 0o600); err != nil {
				t.Fatal(err)
			}
			content := hashHex(kept[len(kept)-1]) + "\n"
			if forged == "old head file's mac" {
				// The mac of another head than the one it names.
				f := strings.Fields(string(first))
				if len(f) != 2 {
					t.Fatalf("the first run's head file %q has no mac", first)
				}
				content = hashHex(kept[1]) + " " + f[1] + "\n"
			}
			if err := os.WriteFile(HeadFile(path), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Check(path, key, "")
			if err == nil || !strings.Contains(err.Error(), "mac") {
				t.Errorf("Check with the key accepted the cut log and its rewritten head file (%d records, notes %q); err %v", s.Records, s.Notes(), err)
			}
			if l, err := Open(path, Options{Key: key}); err == nil {
				l.Close()
				t.Errorf("Open with the key appended to the cut log")
			}
		})
	}
}

// TestKeyedHeadFileRoundTrip: the head file of a keyed log holds the head
// and its mac, verifies with the key, and still anchors without it.
func TestKeyedHeadFileRoundTrip(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	path := tempLog(t)
	head := writeRun(t, path, key, true)
	b, err := os.ReadFile(HeadFile(path))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(head+" ")) || len(strings.Fields(string(b))) != 2 {
		t.Errorf("head file %q; want the head %s and its mac", b, head)
	}
	for _, k := range [][]byte{key, nil} {
		s, err := Check(path, k, "")
		if err != nil || s.Anchor != head {
			t.Errorf("Check (key %v): anchor %q, %v", k != nil, s.Anchor, err)
		}
	}
	writeRun(t, path, key, true) // appends: the head file verified
	if _, err := Check(path, []byte("another key, 32 bytes long......"), ""); err == nil {
		t.Error("Check with another key accepted the log")
	}
}
