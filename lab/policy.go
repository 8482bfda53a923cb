package lab

import (
	_ "embed"
	"fmt"
	"strings"
)

// labPolicy is the policy the lab runs its attacker under.
//
//go:embed policy.yaml
var labPolicy []byte

// Breakable layers for `nsgate lab --break LAYER` (testing the lab
// itself: with one layer off, attacks must get through and the lab must
// fail).
const (
	// BreakMetadata turns off the built-in metadata step in `nsgate run`
	// (its hidden --unsafe-break metadata flag); with the lab policy's
	// careless cidr rule, 169.254.169.254 then becomes reachable.
	BreakMetadata = "metadata"
	// BreakPolicy runs the gateway under a policy that approves every
	// address and every .test name on every port and protocol.
	BreakPolicy = "policy"
	// BreakL7 turns the SNI and Host checks off in the lab policy.
	BreakL7 = "l7"
	// BreakExecGuard runs the gateway with --exec-guard=best-effort and
	// the guard's test knobs that hide Landlock and seccomp.
	BreakExecGuard = "exec-guard"
	// BreakCredentials runs the gateway with --unsafe-break credentials:
	// placeholders are neither replaced nor refused, echoes not scrubbed
	// (the credential attempts' leaks then reach the fake upstreams).
	BreakCredentials = "credentials"
	// BreakRequestRules runs the gateway with --unsafe-break
	// request-rules: terminated requests are not decided (path confusion
	// and method override then reach the upstream with the secret).
	BreakRequestRules = "request-rules"
	// BreakEchoScrub runs the gateway with --unsafe-break echo-scrub: the
	// secret is still put in, but what comes back is not scrubbed (the
	// echo attempts then see the secret).
	BreakEchoScrub = "echo-scrub"
)

// BreakLayers lists the layers --break accepts.
func BreakLayers() []string {
	return []string{BreakMetadata, BreakPolicy, BreakL7, BreakExecGuard, BreakCredentials, BreakRequestRules, BreakEchoScrub}
}

// Policy returns the lab policy for a run with layer broken ("" for
// none): the YAML text to write to the policy file.
func Policy(broken string) ([]byte, error) {
	switch broken {
	case "", BreakMetadata, BreakExecGuard, BreakCredentials, BreakRequestRules, BreakEchoScrub:
		return append([]byte(nil), labPolicy...), nil
	case BreakL7:
		return append(append([]byte(nil), labPolicy...), "tls: { verify_sni: false }\nhttp: { verify_host: false }\n"...), nil
	case BreakPolicy:
		return []byte(`# --break policy: approves everything the lab can name.
version: 1
allow:
  - cidr: 0.0.0.0/0
    proto: any
  - cidr: ::/0
    proto: any
  # 0.0.0.0/0 and ::/0 do not open the special ranges: name them.
  - {cidr: 10.0.0.0/8, proto: any}
  - {cidr: 100.64.0.0/10, proto: any}
  - {cidr: 127.0.0.0/8, proto: any}
  - {cidr: 169.254.0.0/16, proto: any}
  - {cidr: 172.16.0.0/12, proto: any}
  - {cidr: 192.168.0.0/16, proto: any}
  - {cidr: "::1/128", proto: any}
  - {cidr: "fc00::/7", proto: any}
  - host: "*.test"
    proto: any
  - host: "*.ok.test"
    proto: any
dns:
  upstream: ["127.0.0.53:53"]
tls: { verify_sni: false }
http: { verify_host: false }
`), nil
	}
	return nil, fmt.Errorf("--break %q: want one of %s", broken, strings.Join(BreakLayers(), ", "))
}
