package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The head file anchors the end of a log (SPEC §8: truncation is caught
// only against an anchor). For a regular file FILE, the Logger writes
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

// writeHeadFile replaces the head file at path with head, atomically (a
// new file renamed over the old). When that fails and a head file is
// already there, it is overwritten in place instead: a head always has the
// same length, so that needs no new space, and the anchor stays right when
// the disk is full (which is when the log fails).
func writeHeadFile(path, head string) error {
	content := head + "\n"
	err := writeHeadFileAtomic(path, content)
	if err == nil {
		return nil
	}
	f, oerr := os.OpenFile(path, os.O_WRONLY, 0)
	if oerr != nil {
		return err
	}
	fi, serr := f.Stat()
	if serr != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(content)) {
		f.Close()
		return err
	}
	_, werr := f.WriteAt([]byte(content), 0)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return err
	}
	return nil
}

func writeHeadFileAtomic(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write head file: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write head file %s: %w", path, err)
	}
	return nil
}
