//go:build !linux

package guard

import (
	"errors"
	"runtime"
)

// Probe reports no Landlock and no seccomp: both are Linux-only.
func Probe() Support {
	why := "not available on " + runtime.GOOS
	return Support{LandlockWhy: why, SeccompWhy: why}
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
