package intercept

import (
	"os"
	"slices"
	"strings"
)

// BundlePath is the system CA bundle in the worker's view (Debian's and
// Ubuntu's path; OpenSSL, GnuTLS, curl, Python and Go read it by default).
// The view binds the host's bundle plus the run's CA over it, read-only.
const BundlePath = "/etc/ssl/certs/ca-certificates.crt"

// FallbackBundlePath is where the bundle goes in the view of a host that
// has none at BundlePath (a minimal image without ca-certificates): a
// file of the worker's private /tmp, which the CA variables (caEnv) name.
const FallbackBundlePath = "/tmp/.nsgate/ca-certificates.crt"

// BundleTarget is where the worker's bundle goes: BundlePath when the host
// has one there, else FallbackBundlePath, which the view creates.
func BundleTarget() (path string, create bool) {
	if st, err := os.Stat(BundlePath); err == nil && st.Mode().IsRegular() {
		return BundlePath, false
	}
	return FallbackBundlePath, true
}

// caEnv are the variables that point common runtimes at a CA bundle; the
// worker gets each set to BundlePath, so that a client that reads one
// trusts the run's CA without flags.
var caEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}

// Bundle returns the host's system bundle with the run's CA appended: the
// content the view binds at BundlePath. A host without a bundle gives the
// CA alone.
func (e *Engine) Bundle() []byte {
	host, _ := os.ReadFile(BundlePath)
	b := slices.Clone(host)
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	b = append(b, "# nsgate run CA\n"...)
	return append(b, e.CA.PEM()...)
}

// WorkerEnv returns the worker's environment made from base (nsgate's
// own): the variables secrets were read from removed, each credential's
// placeholder variable set, and the CA variables (caEnv) pointing at
// the bundle (BundleTarget).
func (e *Engine) WorkerEnv(base []string) []string {
	drop := append(e.Vault.SourceEnv(), caEnv...)
	for _, kv := range e.Vault.WorkerEnv() {
		k, _, _ := strings.Cut(kv, "=")
		drop = append(drop, k)
	}
	out := make([]string, 0, len(base)+8)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			out = append(out, kv)
		}
	}
	path, _ := BundleTarget()
	for _, k := range caEnv {
		out = append(out, k+"="+path)
	}
	return append(out, e.Vault.WorkerEnv()...)
}
