package audit

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MinKeyLen is the shortest HMAC key LoadKey accepts.
const MinKeyLen = 16

// LoadKey reads an HMAC key for --audit-key. The key is the file's bytes;
// when the file is text (every byte printable ASCII or whitespace), leading
// and trailing whitespace is removed, so a key written with
// `head -c 32 /dev/urandom | base64 > FILE` (newline included) works. A key
// shorter than MinKeyLen bytes is refused.
func LoadKey(path string) ([]byte, error) {
	b, err := readKeyFile(path)
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
func readKeyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a key", path, maxKeyFile)
	}
	return b, nil
}
