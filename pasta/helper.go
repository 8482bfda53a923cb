package pasta

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/podnet"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
)

// Options are what a Start needs beyond the command line.
type Options struct {
	// Start is the audit log's first record (version, argv, PID).
	Start audit.Start
	// Stderr is where the session speaks (and, with no audit directory
	// and no waiting parent, the readable denial lines go).
	Stderr io.Writer
	// ReadyFD gets "1" once the helper serves (-1: none): ChildReady's.
	ReadyFD int
	// Getenv reads the environment (os.Getenv).
	Getenv func(string) string
}

// netnsPoll is how often the helper checks that the namespace is there.
const netnsPoll = 250 * time.Millisecond

// Start turns the command line into a helper (podnet) and starts it: the
// host's address copied (HostIPv4, Plan), the TAP in the container's
// namespace, the gateway with the policy and audit log of the
// environment (podnet.PolicyPath, podnet.AuditPath), the -t/-u forwards,
// confinement (no_new_privs, capabilities, seccomp), the --pid file and
// the ready signal. gone closes once the namespace is gone: give it to
// Helper.Serve. On error nothing is left running; the helper returned
// with it says whether the audit log failed (then the session said why).
func Start(c Config, o Options) (h *podnet.Helper, gone <-chan struct{}, err error) {
	host, err := HostIPv4()
	if err != nil {
		return nil, nil, err
	}
	plan, ifname, err := c.Plan(host)
	if err != nil {
		return nil, nil, err
	}
	gone, stop, err := WatchNetns(c.Netns, netnsPoll)
	if err != nil {
		return nil, nil, err
	}
	if c.PIDFile != "" {
		if err := WritePIDFile(c.PIDFile); err != nil {
			stop()
			return nil, nil, err
		}
	}
	pc := podnet.Config{
		Session: session.Config{
			PolicyPath: podnet.PolicyPath(o.Getenv, podnet.FileExists),
			// SIGHUP ends the helper, as it ends pasta; a new policy
			// applies to the next container.
			Reload:    session.NoReload,
			AuditPath: podnet.AuditPath(o.Getenv, c.NetnsName()),
			AuditKey:  o.Getenv(podnet.EnvAuditKey),
			Stderr:    o.Stderr,
			Stopped:   "the container's network was stopped",
			Start:     o.Start,
			Plan:      plan,
			MTU:       uint32(c.MTU),
		},
		TAP:   c.TAPSpec(plan, ifname),
		TapFD: -1,
		MAC:   podnet.GatewayMAC(plan.Gateway4()),
		// -t and -u: added once the gateway is attached.
		API: func(f *inbound.Forwarder) (io.Closer, error) {
			for _, r := range append(append([]inbound.Rule(nil), c.TCP...), c.UDP...) {
				if _, err := f.Add(r); err != nil {
					return nil, fmt.Errorf("forward %s: %w", r.Listen(), err)
				}
			}
			return io.NopCloser(nil), nil
		},
		// Not Root: the helper keeps watching the namespace's path.
		Confine:     &sandbox.Confinement{DropCaps: true, Seccomp: true},
		NoDHCP:      c.NoDHCP,
		ReadyFD:     o.ReadyFD,
		ExitFD:      -1,
		ExitFailure: ExitFailure,
	}
	if pc.Session.AuditPath == "" && o.ReadyFD < 0 {
		pc.Session.Human = o.Stderr
	}
	h, err = podnet.Start(pc)
	if err != nil {
		stop()
		if c.PIDFile != "" {
			os.Remove(c.PIDFile)
		}
		return h, nil, err
	}
	return h, gone, nil
}
