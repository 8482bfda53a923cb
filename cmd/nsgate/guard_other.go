//go:build !linux

package main

import (
	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/session"
)

// superviseGuard needs Linux.
func superviseGuard(e env, _ *session.Session, _ guard.Plan, _ guard.Config) int {
	e.errorf("guard: needs Linux")
	return exitFailure
}

// cmdGuardExec needs Linux.
func cmdGuardExec(e env, _ []string) int {
	e.errorf("guard: needs Linux")
	return exitFailure
}
