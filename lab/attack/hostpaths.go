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
			Description: "start: the operator's --policy is reached through a link in the worker's --rw folder, which the worker would re-point to a permissive policy it wrote; reload: the policy lies outside the --rw folder, the worker writes a permissive policy (cidr 0.0.0.0/0, dns.hosts " + RelinkName + " to 127.0.0.1) in its folder, the policy's folder is re-pointed by name to it and the lab sends SIGHUP while the worker tries " + RelinkName + ":" + strconv.Itoa(RelinkPort),
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "start: nsgate refused to start (the policy's path lies in a tree the worker may write), the worker never ran, the operator's policy and its link are unchanged; reload: the policy record carries the start policy's sha256 and the loopback server saw no connection",
			NoRecord:  "the start run refuses before its log is open (the refusal and the unchanged policy are the evidence); the reload stage's policy record, from its own log, is in the attempt's audit",
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

// RelinkName and RelinkPort are what the permissive policy of the
// reload stage of fs-relink-policy-reload opens (dns.hosts to 127.0.0.1
// and an allow rule for the port), where the lab listens and counts.
const (
	RelinkName = "relink.test"
	RelinkPort = 2223
)

// RelinkPermissiveText is the permissive policy the worker writes in the
// reload stage of fs-relink-policy-reload.
var RelinkPermissiveText = "version: 1\nallow:\n  - host: " + RelinkName + "\n    ports: [" + strconv.Itoa(RelinkPort) + "]\n  - cidr: 0.0.0.0/0\ndns:\n  hosts:\n    " + RelinkName + ": [127.0.0.1]\n"

// relinkPolicy is the worker's step of fs-relink-policy-reload. With the
// policy's link in its --rw folder (the start stage, which the lab
// expects never to run: nsgate refuses to start), it writes a permissive
// policy and renames a new link to it over the policy's link. Without it
// (the reload stage: the policy lies outside the --rw folder, and the lab
// re-points the policy's folder to the worker's folder and reloads), it
// writes the permissive policy as RelinkPolicy and tries RelinkName:
// RelinkPort for a few seconds, across the reload.
func relinkPolicy(ctx context.Context, a *attacker) result {
	rw, err := a.rwDir()
	if err != nil {
		return erroredf("%v", err)
	}
	if fi, err := os.Lstat(filepath.Join(rw, RelinkPolicy)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return relinkReload(ctx, rw)
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

// relinkReload is the reload stage of relinkPolicy.
func relinkReload(ctx context.Context, rw string) result {
	if err := os.WriteFile(filepath.Join(rw, RelinkPolicy), []byte(RelinkPermissiveText), 0o644); err != nil {
		return erroredf("%v", err)
	}
	addr := net.JoinHostPort(RelinkName, strconv.Itoa(RelinkPort))
	var last error
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(150 * time.Millisecond) {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			last = err
			continue
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 1)
		_, err = c.Read(buf)
		c.Close()
		if err == nil {
			return allowedf("after the reload, connected to %s and read from the server", addr)
		}
		last = err
	}
	return blockedf("wrote a permissive policy as %s and tried %s for 6 s across the reload: %v", filepath.Join(rw, RelinkPolicy), addr, last)
}
