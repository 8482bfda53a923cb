package audit

import (
	"bytes"
	"fmt"
	"github.com/nsgate/nsgate/internal/hostpath"
	"io"
)

// MinKeyLen is the shortest HMAC key LoadKey accepts.
const MinKeyLen = 16

// LoadKey reads an HMAC key for --audit-key. The key is the file's bytes;
// when the file is text (every byte printable ASCII or whitespace), leading
// and trailing whitespace is removed, so a key written with
// `head -c 32 /dev/urandom | base64 > FILE` (newline included) works. A key
// shorter than MinKeyLen bytes is refused.
func LoadKey(path string) ([]byte, error) { return LoadKeyWith(path, nil) }

// LoadKeyWith is LoadKey with the path decided by paths (internal/hostpath;
// nil: hostpath.Default): a key inside a tree the worker may write, or
// behind a link another user owns, is refused.
func LoadKeyWith(path string, paths *hostpath.Checker) ([]byte, error) {
	b, err := readKeyFile(path, paths)
	if err != nil {
		return nil, fmt.Errorf("read audit key: %w", err)
	}
	if isText(b) {
		b = bytes.TrimSpace(b)
	}
	if len(b) < MinKeyLen {
		return nil, fmt.Errorf("audit key %s has %d bytes, want at least %d (make one with: head -c 32 /dev/urandom > %s)",
			path, len(b), MinKeyLen, path)
	}
	return b, nil
}

func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}

// maxKeyFile bounds what LoadKey reads: a key is bytes, not a stream.
const maxKeyFile = 64 << 10

// readKeyFile reads a regular file of at most maxKeyFile bytes. Anything
// else (a device such as /dev/zero, a FIFO) is refused at once instead of
// read without end.
func readKeyFile(path string, paths *hostpath.Checker) ([]byte, error) {
	if paths == nil {
		paths = hostpath.Default()
	}
	hp, err := paths.Resolve(path)
	if err != nil {
		return nil, err
	}
	defer hp.Close()
	f, err := hp.OpenRead() // a regular file only
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a key", path, maxKeyFile)
	}
	return b, nil
}
