//go:build !linux

package guard

import (
	"errors"
	"os"
	"runtime"
)

// Probe reports no Landlock and no seccomp: both are Linux-only.
func Probe() Support {
	why := "not available on " + runtime.GOOS
	return Support{LandlockWhy: why, SeccompWhy: why, ExecAuditWhy: why}
}

// Apply restricts nothing outside Linux: with cfg.BestEffort it reports
// both layers as degraded, otherwise it returns a *MissingLayerError for
// each (joined).
func (p Plan) Apply(cfg Config) (degraded []string, err error) {
	if p.Path == "" || len(p.Allow) == 0 {
		return nil, errors.New("exec guard: empty plan (use Resolve)")
	}
	s := Probe()
	if !cfg.BestEffort {
		return nil, errors.Join(&MissingLayerError{Layer: LayerLandlock, Why: s.LandlockWhy},
			&MissingLayerError{Layer: LayerSeccomp, Why: s.SeccompWhy})
	}
	return []string{LayerLandlock + ": " + s.LandlockWhy, LayerSeccomp + ": " + s.SeccompWhy}, nil
}

// Writable returns nil outside Linux, where Apply restricts nothing.
func (p Plan) Writable() []string { return nil }

// InstallExecNotifier is unavailable outside Linux: with cfg.BestEffort it
// reports the layer as degraded, otherwise it returns a *MissingLayerError.
func InstallExecNotifier(cfg Config) (listener *os.File, degraded []string, err error) {
	why := "not available on " + runtime.GOOS
	if cfg.BestEffort {
		return nil, []string{LayerExecAudit + ": " + why}, nil
	}
	return nil, nil, &MissingLayerError{Layer: LayerExecAudit, Why: why}
}

// ExecServer is unavailable outside Linux.
type ExecServer struct{}

// ServeExec fails outside Linux.
func (p Plan) ServeExec(listener *os.File, report func(ExecEvent)) (*ExecServer, error) {
	return nil, errors.ErrUnsupported
}

// Done is closed: there is nothing to serve.
func (s *ExecServer) Done() <-chan struct{} { c := make(chan struct{}); close(c); return c }

// Close does nothing.
func (s *ExecServer) Close() error { return nil }

// refuseUnixAlone is never needed off Linux (no notifier either).
func refuseUnixAlone() error { return errors.New("seccomp is Linux-only") }
