package intercept

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nsgate/nsgate/policy"
)

// maxSecret bounds a secret read from a file.
const maxSecret = 64 << 10

// placeholderPrefix starts every placeholder: letters and digits only, so
// that a placeholder is one DNS label, one URL segment and one header
// token, and a scan finds it in any of them.
const placeholderPrefix = "nsgph"

// Vault holds the run's credentials: each secret, read once at start from
// nsgate's own environment or a file, and the random placeholder the worker
// gets instead. It is immutable after NewVault and safe for concurrent use.
// Nothing in it formats a secret: String names the credentials only.
type Vault struct {
	creds []cred
	// secrets and placeholders are the creds' own, in order, made once
	// by NewVault for the scrubs (pairs).
	secrets, placeholders []string
	// pats are the secrets prepared for the any-case searches (fold.go).
	pats []foldPat
	// echoSearches find the echoes of the secrets the scrubs replace, one
	// a secret (fold.go); echoMax is the longest an echo can be.
	echoSearches []*echoSearch
	echoMax      int
}

type cred struct {
	spec        policy.Credential
	secret      string
	placeholder string
	phPat       foldPat // the placeholder, for the any-case searches
}

// NewVault reads each credential's secret (getenv for from.env, readFile
// for from.file; nil means the process's own) and makes its placeholder. A
// secret that is empty, shorter than 8 bytes, or holds bytes a header
// cannot carry is an error naming the credential and its source, never the
// value.
func NewVault(specs []policy.Credential, getenv func(string) string, readFile func(string) ([]byte, error)) (*Vault, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if readFile == nil {
		readFile = readBounded
	}
	v := &Vault{}
	for _, s := range specs {
		var secret, src string
		if s.FromEnv != "" {
			src = "environment variable " + s.FromEnv
			secret = getenv(s.FromEnv)
		} else {
			src = "file " + s.FromFile
			b, err := readFile(s.FromFile)
			if err != nil {
				if u := errors.Unwrap(err); u != nil {
					err = u // the path is in src already
				}
				return nil, fmt.Errorf("credential %s: read %s: %w", s.Name, src, err)
			}
			if len(b) > maxSecret {
				return nil, fmt.Errorf("credential %s: %s: larger than 64 KiB", s.Name, src)
			}
			secret = strings.TrimRight(string(b), "\r\n \t")
		}
		switch {
		case secret == "":
			return nil, fmt.Errorf("credential %s: %s is empty or unset", s.Name, src)
		case len(secret) < 8:
			return nil, fmt.Errorf("credential %s: the secret in %s is shorter than 8 bytes; too short to find in responses", s.Name, src)
		}
		for i := 0; i < len(secret); i++ {
			if c := secret[i]; c < 0x20 || c >= 0x7f {
				return nil, fmt.Errorf("credential %s: the secret in %s holds a byte a header cannot carry (printable ASCII only)", s.Name, src)
			}
		}
		var rb [20]byte
		if _, err := rand.Read(rb[:]); err != nil {
			return nil, fmt.Errorf("credential %s: placeholder: %w", s.Name, err)
		}
		ph := placeholderPrefix + hex.EncodeToString(rb[:])
		v.creds = append(v.creds, cred{spec: s, secret: secret, placeholder: ph, phPat: newFoldPat(ph)})
		v.secrets, v.placeholders = append(v.secrets, secret), append(v.placeholders, ph)
		v.pats = append(v.pats, newFoldPat(secret))
		es := newEchoSearch(secret, ph)
		v.echoSearches = append(v.echoSearches, es)
		v.echoMax = max(v.echoMax, es.maxLen)
	}
	return v, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, maxSecret+1)
	n, err := f.Read(b)
	if n > maxSecret {
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("larger than 64 KiB")}
	}
	if err != nil && n == 0 {
		return nil, err
	}
	return b[:n], nil
}

// Empty reports whether the vault holds no credential (a nil Vault is empty).
func (v *Vault) Empty() bool { return v == nil || len(v.creds) == 0 }

// String names the credentials, never a secret. It has a value receiver
// so that printing a Vault value, not only a pointer, goes through it.
func (v Vault) String() string {
	if len(v.creds) == 0 {
		return "vault()"
	}
	names := make([]string, len(v.creds))
	for i, c := range v.creds {
		names[i] = c.spec.Name
	}
	return "vault(" + strings.Join(names, ",") + ")"
}

// GoString is String.
func (v Vault) GoString() string { return v.String() }

// WorkerEnv returns "NAME=placeholder" for each credential with a
// placeholder_env.
func (v *Vault) WorkerEnv() []string {
	if v.Empty() {
		return nil
	}
	var out []string
	for _, c := range v.creds {
		if c.spec.PlaceholderEnv != "" {
			out = append(out, c.spec.PlaceholderEnv+"="+c.placeholder)
		}
	}
	return out
}

// WorkerFiles returns, for each credential with a placeholder_file, the
// path as written ("~/rel") and the content (the placeholder and a newline).
func (v *Vault) WorkerFiles() map[string]string {
	if v.Empty() {
		return nil
	}
	out := map[string]string{}
	for _, c := range v.creds {
		if c.spec.PlaceholderFile != "" {
			out[c.spec.PlaceholderFile] = c.placeholder + "\n"
		}
	}
	return out
}

// SourceEnv returns the environment variables secrets were read from: the
// worker's environment must not hold them.
func (v *Vault) SourceEnv() []string {
	if v.Empty() {
		return nil
	}
	var out []string
	for _, c := range v.creds {
		if c.spec.FromEnv != "" {
			out = append(out, c.spec.FromEnv)
		}
	}
	return out
}

// SourceFiles returns the files secrets were read from: the worker's view
// must hide them.
func (v *Vault) SourceFiles() []string {
	if v.Empty() {
		return nil
	}
	var out []string
	for _, c := range v.creds {
		if c.spec.FromFile != "" {
			out = append(out, c.spec.FromFile)
		}
	}
	return out
}

// Find returns the name of a credential whose placeholder b holds, ASCII
// case ignored (a DNS name may come in any case).
func (v *Vault) Find(b []byte) (string, bool) {
	if v.Empty() || len(b) < len(placeholderPrefix)+40 {
		return "", false
	}
	for i := range v.creds {
		c := &v.creds[i]
		if c.phPat.index(b) >= 0 {
			return c.spec.Name, true
		}
	}
	return "", false
}

// FindString is Find for a string.
func (v *Vault) FindString(s string) (string, bool) {
	if v.Empty() {
		return "", false
	}
	return v.Find([]byte(s))
}

// pairs returns the secrets and their placeholders, for scrubbing (made
// once; the caller must not change them).
func (v *Vault) pairs() (secrets, placeholders []string) { return v.secrets, v.placeholders }

// scrub returns s with every echo of a secret replaced by its placeholder.
func (v *Vault) scrub(s string) string {
	if out, found := replaceEchoes([]byte(s), v.echoSearches); found {
		return string(out)
	}
	return s
}

// holdsEcho reports whether s holds an echo of a secret.
func (v *Vault) holdsEcho(s string) bool {
	_, found := replaceEchoes([]byte(s), v.echoSearches)
	return found
}

// forHost reports whether any credential may go to host.
func (v *Vault) forHost(host string) bool {
	if v.Empty() {
		return false
	}
	for _, c := range v.creds {
		if c.allowed(host, "") {
			return true
		}
	}
	return false
}

// allowed reports whether the credential may be injected on a request to
// host that rule ("allow[0]" or "allow[0].requests[1]") allowed; rule ""
// asks about the host alone.
func (c *cred) allowed(host, rule string) bool {
	hostOK := false
	for _, h := range c.spec.Hosts {
		if h == host {
			hostOK = true
			break
		}
	}
	if !hostOK {
		return false
	}
	if rule == "" || c.spec.Rules == nil {
		return true
	}
	base, _, _ := strings.Cut(rule, ".requests[")
	for _, r := range c.spec.Rules {
		if r == rule || r == base {
			return true
		}
	}
	return false
}
