package audit

import (
	"bytes"
	"fmt"
	"os"
)

// MinKeyLen is the shortest HMAC key LoadKey accepts.
const MinKeyLen = 16

// LoadKey reads an HMAC key for --audit-key. The key is the file's bytes;
// when the file is text (every byte printable ASCII or whitespace), leading
// and trailing whitespace is removed, so a key written with
// `head -c 32 /dev/urandom | base64 > FILE` (newline included) works. A key
// shorter than MinKeyLen bytes is refused.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
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
