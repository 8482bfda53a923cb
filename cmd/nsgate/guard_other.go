//go:build !linux

package main

import (
	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
)

// superviseGuard needs Linux.
func superviseGuard(e env, _ *audit.Logger, _ *auditWatch, _ guard.Plan, _ guard.Config, _ []string) int {
	e.errorf("guard: needs Linux")
	return exitFailure
}

// cmdGuardExec needs Linux.
func cmdGuardExec(e env, _ []string) int {
	e.errorf("guard: needs Linux")
	return exitFailure
}
