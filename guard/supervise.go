package guard

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// RestrictSelf resolves cfg and restricts the calling process: Landlock
// and seccomp (Plan.Apply), then the exec notifier. The caller must hand
// the listener (nil under best effort without the notifier) to a process
// that serves it before anything is executed.
func RestrictSelf(cfg Config) (Plan, []string, *os.File, error) {
	plan, err := Resolve(cfg)
	if err != nil {
		return Plan{}, nil, nil, err
	}
	runtime.LockOSThread() // never unlocked: the thread is restricted
	cfg.unixToNotifier = !cfg.AllowUnix && cfg.support().ExecAudit
	degraded, err := plan.Apply(cfg)
	if err != nil {
		return Plan{}, nil, nil, err
	}
	listener, d, err := InstallExecNotifier(cfg)
	if err != nil {
		return Plan{}, nil, nil, err
	}
	if listener == nil && cfg.unixToNotifier {
		// Best-effort without the notifier: refuse unix sockets here.
		if err := refuseUnixAlone(); err != nil {
			return Plan{}, nil, nil, fmt.Errorf("exec guard: seccomp: %w", err)
		}
	}
	return plan, append(degraded, d...), listener, nil
}

// Preflight checks, before any namespace exists, that the guard can be
// enforced, so a missing layer is one clear line and exit 125 (fail closed).
// Under best-effort (cfg.BestEffort) it returns the layers that will be
// missing.
func Preflight(cfg Config) ([]string, error) {
	sup := cfg.support()
	var missing []string
	var errs []error
	for _, l := range []struct {
		name string
		ok   bool
		why  string
	}{
		{LayerLandlock, sup.LandlockABI > 0, sup.LandlockWhy},
		{LayerSeccomp, sup.Seccomp, sup.SeccompWhy},
		{LayerExecAudit, sup.ExecAudit, sup.ExecAuditWhy},
	} {
		if !l.ok {
			missing = append(missing, l.name)
			errs = append(errs, &MissingLayerError{Layer: l.name, Why: l.why})
		}
	}
	if len(errs) > 0 && !cfg.BestEffort {
		return nil, errors.Join(errs...)
	}
	return missing, nil
}
