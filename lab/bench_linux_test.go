package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/judge"
	"github.com/nsgate/nsgate/lab/sealed"
)

// envChild marks the re-executed test binary of TestSealedBench.
const envChild = "NSGATE_LAB_TEST_CHILD"

// need skips (or, under NSGATE_REQUIRE_ALL=1, fails) when err says a
// prerequisite is missing.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("NSGATE_REQUIRE_ALL") == "1" {
		t.Fatalf("%s is required (NSGATE_REQUIRE_ALL=1): %v", what, err)
	}
	t.Skipf("needs %s: %v", what, err)
}

// TestSealedBench re-executes the test binary in a sealed namespace
// (sealedChild does the work there): the fake internet comes up on
// lo, and attacks run with no gateway in the way are seen to get through.
func TestSealedBench(t *testing.T) {
	var out bytes.Buffer
	code, err := sealed.Enter([]string{os.Args[0]}, append(os.Environ(), envChild+"=1"), sealed.Stdio{Stdout: &out, Stderr: &out})
	need(t, "a sealed network namespace", err)
	if code != 0 || !strings.Contains(out.String(), "sealed child: ok") {
		t.Fatalf("sealed child exited %d:\n%s", code, out.String())
	}
	t.Logf("%s", out.String())
}

// TestMain runs sealedChild instead of the tests in the child that
// TestSealedBench starts.
func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(sealedChild())
	}
	os.Exit(m.Run())
}

// sealedChild is the body of TestSealedBench inside the sealed namespace.
// It prints what went wrong and returns the exit status.
func sealedChild() int {
	failed := false
	errorf := func(format string, args ...any) {
		failed = true
		fmt.Printf("sealed child: "+format+"\n", args...)
	}
	info, ok := sealed.Current()
	if !ok {
		errorf("sealed.Current() is false in the child sealed.Enter started")
		return 1
	}
	fmt.Printf("sealed child: %+v\n", info)
	dir, err := os.MkdirTemp("", "nsgate-lab-test-")
	if err != nil {
		errorf("%v", err)
		return 1
	}
	defer os.RemoveAll(dir)
	in, err := internet.Setup(internet.DefaultLayout(), dir)
	if err != nil {
		errorf("%v", err)
		return 1
	}
	defer in.Close()
	fmt.Printf("sealed child: skipped %v\n", in.Skipped())

	// With no gateway, every one of these reaches its target: the
	// attacker must say so, and the judge must fail each.
	ids := []string{
		"meta-v4", "meta-v6", "ip-hex", "v6-nat64", "v6-6to4", "v6-teredo", "private-literal", "link-local",
		"cgnat", "lo-v4", "unapproved-ip", "mptcp-unapproved", "app-ip-literal", "udp-stun", "udp-metadata",
		"dns-direct-udp", "dns-direct-tcp", "dns-dot", "dns-unapproved-name", "dns-txt-exfil",
		"unix-host-socket", "unix-abstract",
	}
	self, _ := os.Executable()
	cfg := attack.Config{
		CAFile: in.CAFile(), UnixPath: in.UnixPath(), Abstract: in.AbstractName(),
		Self: self, Only: ids, Timeout: time.Second, DNSServer: internet.UpstreamDNS,
	}
	var obs []attack.Observation
	if err := attack.Run(context.Background(), cfg, func(o attack.Observation) { obs = append(obs, o) }); err != nil {
		errorf("%v", err)
		return 1
	}
	var cat []attack.Attempt
	for _, id := range ids {
		a, _ := attack.Find(id)
		cat = append(cat, a)
	}
	rep := judge.Decide(cat, obs, nil, in.Hits(), in.Approved)
	for _, r := range rep.Results {
		if r.Observed != attack.Allowed || r.Pass {
			errorf("%s with no gateway: observed %s (%s), pass %v; want allowed and failed", r.ID, r.Observed, r.Detail, r.Pass)
		}
	}
	if rep.Pass {
		errorf("a gateway that blocks nothing passed the lab")
	}
	for _, target := range []string{"metadata", "private", "resolver", internet.TargetExfil, internet.TargetUnix, internet.TargetUnixAbstract} {
		if in.TargetHits(target) == 0 {
			errorf("target %s saw nothing", target)
		}
	}
	if n := in.HitsAt(internet.MetadataV4 + ":80/tcp"); n == 0 {
		errorf("HitsAt(metadata:80) = %d", n)
	}
	if failed {
		return 1
	}
	fmt.Println("sealed child: ok")
	return 0
}
