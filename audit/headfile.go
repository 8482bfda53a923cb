package audit

import (
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
// head and a newline, so `nsgate audit verify --head "$(cat FILE.head)"`
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
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read head file: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || !isLowerHex(fields[0], 64) {
		return "", fmt.Errorf("head file %s does not hold a head (64 lower-case hex digits)", path)
	}
	return fields[0], nil
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
}

// writeHead replaces the head file with head, atomically (a new file renamed
// over the old). When that fails and a head file is already there, it is
// overwritten in place instead: a head always has the same length, so that
// needs no new space, and the anchor stays right when the disk is full
// (which is when the log fails).
func (h *headFile) writeHead(head string) error {
	content := head + "\n"
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
