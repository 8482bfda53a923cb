package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/inbound"
	"github.com/nsgate/nsgate/pasta"
	"github.com/nsgate/nsgate/podnet"
	"github.com/nsgate/nsgate/sandbox"
	"github.com/nsgate/nsgate/session"
)

// `nsgate pasta ...` (SPEC §10): a drop-in for pasta, the network helper of
// rootless Podman 5 and 6. Podman runs it (found as `pasta` in
// helper_binaries_dir) as uid 0 of its rootless user namespace, in the
// host's network namespace, and waits for it to exit 0; a detached copy
// then serves the container's namespace until the namespace is gone. See
// docs/podman.md.
func cmdPasta(e env, args []string) int {
	cfg, err := pasta.ParseArgs(args)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		return pasta.ExitFailure
	}
	switch {
	case cfg.Help:
		fmt.Fprint(e.stdout, pasta.Help())
		return 0
	case cfg.Version:
		fmt.Fprint(e.stdout, pasta.Version(versionLine()))
		return 0
	}
	if cfg.Debug {
		for _, n := range cfg.Notes {
			fmt.Fprintln(e.stderr, "nsgate pasta: "+n)
		}
	}
	ready, fail := pasta.ChildReady()
	if ready < 0 && !cfg.Foreground {
		if err := pasta.Background(args, time.Minute); err != nil {
			fmt.Fprintf(e.stderr, "nsgate pasta: %v\n", err)
			return pasta.ExitFailure
		}
		return 0
	}
	h, gone, err := startPasta(e, cfg, ready)
	if err != nil {
		switch {
		case h.AuditFailed(): // the session said the cause
		case fail != nil:
			fmt.Fprint(fail, err) // the waiting parent says it
		default:
			fmt.Fprintf(e.stderr, "nsgate pasta: %v\n", err)
		}
		return pasta.ExitFailure
	}
	return h.Serve(gone)
}

// startPasta turns pasta's command line into a helper and starts it; it
// signals ready on fd ready (-1: none). gone closes when the namespace is.
func startPasta(e env, cfg pasta.Config, ready int) (*podnet.Helper, <-chan struct{}, error) {
	host, err := pasta.HostIPv4()
	if err != nil {
		return nil, nil, err
	}
	plan, ifname, err := cfg.Plan(host)
	if err != nil {
		return nil, nil, err
	}
	gone, stop, err := pasta.WatchNetns(cfg.Netns, 250*time.Millisecond)
	if err != nil {
		return nil, nil, err
	}
	if cfg.PIDFile != "" {
		if err := pasta.WritePIDFile(cfg.PIDFile); err != nil {
			stop()
			return nil, nil, err
		}
	}
	getenv := os.Getenv
	pc := podnet.Config{
		Session: session.Config{
			PolicyPath: podnet.PolicyPath(getenv, podnet.FileExists),
			Reload:     session.NoReload,
			AuditPath:  podnet.AuditPath(getenv, cfg.NetnsName()),
			AuditKey:   getenv(podnet.EnvAuditKey),
			Stderr:     e.stderr,
			Stopped:    "the container's network was stopped",
			Start:      audit.Start{Version: versionString(), Argv: os.Args, PID: os.Getpid()},
			Plan:       plan,
			MTU:        uint32(cfg.MTU),
		},
		TAP:   cfg.TAPSpec(plan, ifname),
		TapFD: -1,
		MAC:   podnet.GatewayMAC(plan.Gateway4()),
		// -t and -u: the forwards are added once the gateway is attached.
		API: func(f *inbound.Forwarder) (io.Closer, error) {
			for _, r := range append(cfg.TCP, cfg.UDP...) {
				if _, err := f.Add(r); err != nil {
					return nil, fmt.Errorf("forward %s: %w", r.Listen(), err)
				}
			}
			return io.NopCloser(nil), nil
		},
		Confine:     &sandbox.Confinement{DropCaps: true, Seccomp: true},
		ReadyFD:     ready,
		ExitFD:      -1,
		ExitFailure: pasta.ExitFailure,
	}
	if pc.Session.AuditPath == "" && ready < 0 {
		pc.Session.Human = e.stderr
	}
	h, err := podnet.Start(pc)
	if err != nil {
		stop()
		if cfg.PIDFile != "" {
			os.Remove(cfg.PIDFile)
		}
		return h, nil, err
	}
	return h, gone, nil
}
