package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The head file anchors the end of a log (a chain cannot show that records
// were cut from its end: truncation is caught only against an anchor). For a regular file FILE, the Logger writes
// FILE.head, mode 0600, atomically (a new file renamed over the old), when
// it opens the log (anchoring the records already there) and when it closes
// it (anchoring its last record, also after a failure). It holds the hex
// head, for a keyed log a space and the head's mac (headMAC), and a
// newline, so `nsgate audit verify --head "$(cut -d' ' -f1 FILE.head)"`
// works as well as the automatic check.
//
// Because the file names a record's hash rather than a count, one left
// behind by a run that was killed still anchors a record of the log: Check
// finds the line it names wherever it is and reports the records after it
// as not anchored (a run that did not end), not as tampering.

// HeadFile returns the head file of the log at path.
func HeadFile(path string) string { return path + ".head" }

// readHeadFile returns the head in the head file at path, "" when there is
// none.
func readHeadFile(path string) (string, error) {
	head, _, err := readHeadFileMAC(path)
	return head, err
}

// readHeadFileMAC returns the head in the head file at path and its mac
// ("" when it has none), "" when there is no head file.
func readHeadFileMAC(path string) (head, mac string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read head file: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || len(fields) > 2 || !isLowerHex(fields[0], 64) || (len(fields) == 2 && !isLowerHex(fields[1], 64)) {
		return "", "", fmt.Errorf("head file %s does not hold a head (64 lower-case hex digits, and its mac with a key)", path)
	}
	if len(fields) == 2 {
		mac = fields[1]
	}
	return fields[0], mac, nil
}

// checkHeadMAC checks, when key is not empty, the mac of the head that the
// head file at path holds (readHeadFileMAC): a head file without one, or
// with a wrong one, is an error. Without a key, or without a head file
// (head ""), there is nothing to check. Call it once the records verified
// with the key, so that a wrong key is reported at the first record.
func checkHeadMAC(path, head, mac string, key []byte) error {
	if head == "" || len(key) == 0 {
		return nil
	}
	if mac == "" {
		return fmt.Errorf("head file %s has no mac, but the log is checked with a key: anyone who can write its folder could have written it "+
			"(an nsgate older than the head mac wrote none: check the head printed at exit with --head, or move the log and its head file aside)", path)
	}
	if !hmac.Equal([]byte(headMAC(key, head)), []byte(mac)) {
		return fmt.Errorf("head file %s: mac mismatch: it was not written with this key (rewritten, or another key)", path)
	}
	return nil
}

// headMAC is the mac a keyed log's head file holds after the head:
// HMAC-SHA256, keyed with the log's key, of "nsgate audit head " and the
// head, in lower-case hex. The head file is then as hard to move as a
// record is to change: records cut from the end of a keyed log show,
// unless an older head file of the same log (whose mac is good) is put
// back with them (docs/threat-model.md).
func headMAC(key []byte, head string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("nsgate audit head "))
	m.Write([]byte(head))
	return hex.EncodeToString(m.Sum(nil))
}

// headFile writes one log's head file, in the directory the log was opened
// in: on Linux it holds that directory open and works relative to it, so
// that the head file is still written next to the log after nsgate has
// changed its root (the Podman helper confines itself in a new root once
// the log is open) or after the directory was renamed.
type headFile struct {
	path string // for messages
	name string // the head file's base name
	dir  int    // the log's directory (O_PATH), or -1: work by path
	key  []byte // the log's key: the head is written with its mac
}

// writeHead replaces the head file with head, atomically (a new file renamed
// over the old). When that fails and a head file is already there, it is
// overwritten in place instead: a head always has the same length, so that
// needs no new space, and the anchor stays right when the disk is full
// (which is when the log fails).
func (h *headFile) writeHead(head string) error {
	content := head + "\n"
	if len(h.key) > 0 {
		content = head + " " + headMAC(h.key, head) + "\n"
	}
	err := h.replace(content)
	if err == nil {
		return nil
	}
	if h.overwrite(content) == nil {
		return nil
	}
	return fmt.Errorf("write head file %s: %w", h.path, err)
}

// writeHeadFile writes the head file at path (see headFile.writeHead).
func writeHeadFile(path, head string) error {
	h := openHeadFile(path)
	defer h.close()
	return h.writeHead(head)
}

// IsHead reports whether s is written as a head is: 64 lower-case hex
// digits (a hex SHA-256).
func IsHead(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
