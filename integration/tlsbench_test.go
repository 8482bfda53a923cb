//go:build integration

package integration

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/tlsca"
)

// BenchmarkTLSTermination: the added cost of `tls: terminate`, side by side
// on one fake host (docs/performance.md, "TLS termination"). Three cases,
// each a fresh `nsgate run` per round, the order rotated every round:
// passthrough (SNI-checked; curl trusts the upstream's CA directly),
// terminate (curl trusts the run's CA with no flag) and terminate with a
// credential injected (curl sends the placeholder). In each run curl makes
// benchTTFB fresh connections and reports time to first byte (dial, TLS,
// request, first byte), then downloads benchBulk bytes once. It reports
// p50/p99 TTFB and MiB/s per case and the ratios to passthrough; it
// asserts no time, only that every transfer completed. A last run of the
// terminated bulk case writes a CPU profile, and the pprof top 15 is
// logged. Not run by CI: `make bench-tls`.
const (
	benchTLSPort = 9444
	benchTTFB    = 10
	benchRounds  = 5
	benchBulk    = 64 << 20
)

func BenchmarkTLSTermination(b *testing.B) {
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(internet.AppV4, strconv.Itoa(benchTLSPort)))
	if err != nil {
		b.Fatalf("listen: %v", err)
	}
	blob := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bulk" {
			w.Header().Set("Content-Length", strconv.Itoa(benchBulk))
			for i := 0; i < benchBulk/len(blob); i++ {
				if _, err := w.Write(blob); err != nil {
					return
				}
			}
			return
		}
		w.Write([]byte("ok\n"))
	}), TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"}, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Leaf("api.example.test")
	}}, ReadHeaderTimeout: 5 * time.Second}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()

	dir, err := os.MkdirTemp("/var/tmp", "nsgate-tlsbench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o755)
	caFile := filepath.Join(ro, "upstream-ca.pem")
	os.WriteFile(caFile, ca.PEM(), 0o644)
	// The passthrough case's curl gets the host's bundle plus the
	// upstream's CA, as big a file as the terminated cases' bundle (the
	// host's plus the run's CA): curl parses its CA file on every start,
	// which costs tens of milliseconds for a full bundle, and that cost
	// is curl's, not the gateway's.
	hostBundle, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	passBundle := filepath.Join(ro, "pass-bundle.pem")
	os.WriteFile(passBundle, append(append(hostBundle, '\n'), ca.PEM()...), 0o644)
	pol := func(mode string, cred bool) string {
		p := fmt.Sprintf(`version: 1
allow:
  - host: api.example.test
    ports: [%d]
%sdns:
  upstream: ["%s"]
  hosts:
    api.example.test: [%s]
tls:
  upstream_ca: %s
`, benchTLSPort, mode, internet.UpstreamDNS, internet.AppV4, caFile)
		if cred {
			p += `credentials:
  - name: api
    from: {env: NSGATE_IT_SECRET}
    placeholder_env: API_TOKEN
    hosts: [api.example.test]
    header: Authorization
    format: "Bearer {}"
`
		}
		f := filepath.Join(dir, strconv.Itoa(len(p))+"-"+strconv.FormatBool(cred)+".yaml")
		os.WriteFile(f, []byte(p), 0o644)
		return f
	}
	type bcase struct {
		name, policy, curl string
		ttfb, mibs         []float64
	}
	term := "    tls: terminate\n    requests:\n      - methods: [GET]\n        paths: [\"/t\", \"/bulk\"]\n"
	cases := []*bcase{
		{name: "passthrough", policy: pol("", false), curl: "--cacert " + passBundle},
		{name: "terminate", policy: pol(term, false)},
		{name: "terminate+credential", policy: pol(term, true), curl: `-H "Authorization: Bearer $API_TOKEN"`},
	}
	base := fmt.Sprintf("https://api.example.test:%d", benchTLSPort)
	script := func(c *bcase, n int, bulk bool) string {
		s := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); curl -sS --http1.1 -o /dev/null -w 'ttfb %%{time_starttransfer}\n' %s %s/t || echo fail; done`, n, c.curl, base)
		if bulk {
			s += fmt.Sprintf("\ncurl -sS --http1.1 -o /dev/null -w 'bulk %%{size_download} %%{speed_download}\\n' %s %s/bulk || echo fail", c.curl, base)
		}
		return s
	}
	runs := 0
	run := func(c *bcase, sc string, env ...string) string {
		runs++
		cmd := exec.Command(nsgateBin, "run", "--policy", c.policy, "--audit", filepath.Join(dir, fmt.Sprintf("audit-%d.jsonl", runs)), "--ro", ro,
			"--exec-allow", "/usr/bin/curl", "--", "sh", "-c", sc)
		cmd.Env = append(os.Environ(), append(env, "NSGATE_IT_SECRET="+credSecret)...)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Contains(string(out), "fail") {
			b.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		return string(out)
	}
	b.ResetTimer()
	for round := 0; round < benchRounds; round++ {
		for k := range cases {
			c := cases[(k+round)%len(cases)]
			out := run(c, script(c, benchTTFB, true))
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) == 2 && f[0] == "ttfb":
					v, _ := strconv.ParseFloat(f[1], 64)
					c.ttfb = append(c.ttfb, v*1000)
				case len(f) == 3 && f[0] == "bulk":
					if f[1] != strconv.Itoa(benchBulk) {
						b.Fatalf("%s: bulk got %s bytes", c.name, f[1])
					}
					v, _ := strconv.ParseFloat(f[2], 64)
					c.mibs = append(c.mibs, v/(1<<20))
				}
			}
		}
	}
	b.StopTimer()
	pct := func(v []float64, p float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	p50 := map[string]float64{}
	mib := map[string]float64{}
	for _, c := range cases {
		p50[c.name], mib[c.name] = pct(c.ttfb, 0.5), pct(c.mibs, 0.5)
		b.Logf("%-22s ttfb p50 %.2f ms p99 %.2f ms (n=%d)  bulk p50 %.0f MiB/s (n=%d)", c.name, p50[c.name], pct(c.ttfb, 0.99), len(c.ttfb), mib[c.name], len(c.mibs))
	}
	for _, c := range cases[1:] {
		b.Logf("%s / passthrough: ttfb p50 x%.2f, bulk throughput x%.2f", c.name, p50[c.name]/p50["passthrough"], mib[c.name]/mib["passthrough"])
	}
	prof := filepath.Join(dir, "cpu.pprof")
	run(cases[2], script(cases[2], 0, true), "NSGATE_CPUPROFILE="+prof)
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", nsgateBin, prof).CombinedOutput()
	b.Logf("CPU profile, terminate+credential bulk (%v):\n%s", err, top)
}
