package attack

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// PhaseHostPaths is the phase of the attempts on the host paths nsgate
// itself opens (issue 27): each runs in `nsgate run`s of its own, one
// for the worker's step and, where the step plants something for the
// operator's next run, one for that run; the lab judges them on the host
// (a canary, the policy, a counting server) and on the runs' own logs.
const PhaseHostPaths = "host-paths"

// HostPathCanary is the file, relative to the lab's work directory, that
// the worker's planted links point to: the caller's file a later run's
// output must never reach.
const HostPathCanary = "host-paths/canary"

// PlantedOutputs are the names fs-plant-output-links plants in its --rw
// directory, each the name a later run is given as --pcap, --learn and
// --audit.
var PlantedOutputs = []string{"capture.pcap", "learned.yaml", "audit.jsonl"}

// RelinkPolicy is the name of the link to the operator's policy in the
// --rw directory of fs-relink-policy-reload, and RelinkPermissive the
// policy the worker writes and points it to.
const (
	RelinkPolicy     = "policy.yaml"
	RelinkPermissive = "permissive.yaml"
)

// LearnLoopbackName and LearnLoopbackPort are the dns.hosts name (mapped
// to 127.0.0.1) and the port no rule allows that learn-hosts-loopback
// tries while learning; the lab listens there and counts.
const (
	LearnLoopbackName = "svc.internal"
	LearnLoopbackPort = 2222
)

func hostPathAttempts() []Attempt {
	return []Attempt{
		{
			ID: "fs-plant-output-links", Category: "host-paths", Layer: LayerView, Phase: PhaseHostPaths,
			Description: "in a run with --rw WS, plant WS/capture.pcap, WS/learned.yaml and WS/audit.jsonl as symbolic links to a file of the caller's outside WS; the operator's next runs are given those names as --pcap, --learn and --audit",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "each later run refused at start naming the link, and the caller's file is byte for byte what it was",
			NoRecord:  "the later runs refuse before any log is open (the log itself is one of the planted names): the refusal and the unchanged file are the evidence",
			run:       plantOutputLinks,
		},
		{
			ID: "fs-relink-policy-reload", Category: "host-paths", Layer: LayerView, Phase: PhaseHostPaths,
			Description: "the operator's --policy is reached through a link in the worker's --rw folder; the worker re-points the link to a permissive policy it wrote (cidr 0.0.0.0/0) and the lab sends SIGHUP",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nsgate refused to start (the policy's path lies in a tree the worker may write), the worker never ran, the operator's policy and its link are unchanged",
			NoRecord:  "the run refuses before its log is open: the refusal, the worker that never ran and the unchanged policy are the evidence",
			run:       relinkPolicy,
		},
		{
			ID: "learn-hosts-loopback", Category: "learn", Layer: LayerSpecial, Phase: PhaseHostPaths,
			Description: fmt.Sprintf("in a --learn run whose policy allows %s:8080 with dns.hosts %s: [127.0.0.1], connect to %s:%d, a server on the host's loopback that no rule allows", LearnLoopbackName, LearnLoopbackName, LearnLoopbackName, LearnLoopbackPort),
			Expect:      Blocked, Audit: AuditDeny, Rule: "builtin:special-range",
			Keys:      []string{fmt.Sprintf("%s:%d", LearnLoopbackName, LearnLoopbackPort)},
			HostCheck: "the loopback server saw no connection, the run's log has the deny record (rule builtin:special-range) and the learned file does not allow the port",
			run:       learnHostsLoopback,
		},
	}
}

// plantOutputLinks is the worker's step of fs-plant-output-links.
func plantOutputLinks(_ context.Context, a *attacker) result {
	rw, err := a.rwDir()
	if err != nil {
		return erroredf("%v", err)
	}
	if a.cfg.WorkDir == "" {
		return erroredf("the lab gave no work directory (--work-dir)")
	}
	canary := filepath.Join(a.cfg.WorkDir, HostPathCanary)
	for _, n := range PlantedOutputs {
		if err := os.Symlink(canary, filepath.Join(rw, n)); err != nil {
			return erroredf("plant %s: %v", n, err)
		}
	}
	// Allowed here means the worker's step was carried out: planting is
	// not refused; what the lab judges is the operator's next run.
	return allowedf("planted %v in %s, each a link to %s", PlantedOutputs, rw, canary)
}

// relinkPolicy is the worker's step of fs-relink-policy-reload: write a
// permissive policy and rename a new link to it over the policy's link.
// The lab expects this never to run (the run refuses to start).
func relinkPolicy(_ context.Context, a *attacker) result {
	rw, err := a.rwDir()
	if err != nil {
		return erroredf("%v", err)
	}
	evil := filepath.Join(rw, RelinkPermissive)
	if err := os.WriteFile(evil, []byte("version: 1\nallow:\n  - cidr: 0.0.0.0/0\n    l7: none\n"), 0o644); err != nil {
		return erroredf("%v", err)
	}
	tmp := filepath.Join(rw, ".relink")
	os.Remove(tmp)
	if err := os.Symlink(evil, tmp); err != nil {
		return erroredf("%v", err)
	}
	if err := os.Rename(tmp, filepath.Join(rw, RelinkPolicy)); err != nil {
		return erroredf("%v", err)
	}
	return allowedf("the worker ran and re-pointed %s to %s", filepath.Join(rw, RelinkPolicy), evil)
}

// learnHostsLoopback is the worker's step of learn-hosts-loopback.
func learnHostsLoopback(ctx context.Context, _ *attacker) result {
	addr := net.JoinHostPort(LearnLoopbackName, strconv.Itoa(LearnLoopbackPort))
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return blockedf("connect %s: %v", addr, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil {
		return blockedf("connect %s: the gateway accepted, then %v (no byte from the server)", addr, err)
	}
	return allowedf("connected to %s and read from the server", addr)
}
