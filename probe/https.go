package probe

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// probeHTTPS is `nsgate __probe https URL [ENV]`: a GET verified against
// the system roots only (SSL_CERT_FILE, if set, names them, as for any Go
// program; no flag trusts anything else), with Authorization: Bearer and
// the value of the environment variable ENV when given. It prints the
// status and the body and exits 0 on any HTTP answer, 1 when there is
// none (the handshake failed).
func probeHTTPS(e env, u string, rest []string) int {
	roots, err := x509.SystemCertPool()
	if err != nil {
		e.errorf("system roots: %v", err)
		return 1
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		e.errorf("%v", err)
		return exitUsage
	}
	if len(rest) > 0 {
		req.Header.Set("Authorization", "Bearer "+os.Getenv(rest[0]))
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(e.stdout, "https error: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(e.stdout, "https %d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	return 0
}
