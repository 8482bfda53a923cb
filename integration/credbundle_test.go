//go:build integration

package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCredentialsNoSystemBundle: on a host without a system CA bundle (a
// minimal image without ca-certificates; here a private mount namespace
// with an empty /etc/ssl/certs), a run with a tls: terminate rule still
// starts: the worker's bundle is the run's CA alone in its private /tmp,
// the CA variables name it, curl trusts it with no flag, and the upstream
// gets the secret. Root and rootless.
func TestCredentialsNoSystemBundle(t *testing.T) {
	up := startCredUpstream(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir, pol, _ := credRun(t, m, up)
		log := filepath.Join(dir, "audit.jsonl")
		base := "https://api.example.test:" + fmt.Sprint(credPort)
		script := `echo "bundle=$SSL_CERT_FILE"; [ -e /etc/ssl/certs/ca-certificates.crt ] || echo no-host-bundle; curl -sS -H "Authorization: Bearer $API_TOKEN" ` + base + `/echo`
		run := []string{nsgateBin, "run", "--policy", pol, "--audit", log, "--exec-allow", "/usr/bin/curl", "--", "sh", "-c", script}
		if m.uid >= 0 {
			run = append([]string{"setpriv", "--reuid", strconv.Itoa(m.uid), "--regid", strconv.Itoa(m.gid), "--clear-groups"}, run...)
		}
		inner := "mount -t tmpfs -o size=64k tmpfs /etc/ssl/certs && exec " + shellJoin(run)
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", inner)
		cmd.Env = append(nsgateCmd(m).Env, "NSGATE_IT_SECRET="+credSecret)
		r := runBounded(t, cmd, 60*time.Second, "nsgate run without a system bundle", nil)
		t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("the run failed without a system bundle")
		}
		if !strings.Contains(r.stdout, "no-host-bundle") {
			t.Fatalf("the view still has a system bundle: the test shows nothing")
		}
		if !strings.Contains(r.stdout, "bundle=/tmp/.nsgate/ca-certificates.crt") {
			t.Errorf("SSL_CERT_FILE does not name the fallback bundle")
		}
		if !strings.Contains(r.stdout, "echo HTTP/2.0 Bearer nsgph") || strings.Contains(r.stdout, credSecret) {
			t.Errorf("curl did not get its scrubbed echo over the terminated flow")
		}
		if auths, _, _ := up.seen(); len(auths) != 1 || auths[0] != "Bearer "+credSecret {
			t.Errorf("upstream got %q, want the secret once", auths)
		}
	})
}

// shellJoin quotes args for sh.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
