// Command nsgate-init is the sandbox's init: PID 1 of the worker's PID
// namespace, started by `nsgate run` (and `nsgate lab`) from the same
// build, never by hand. It is package sandbox's InitMain with the exec
// guard, and nothing of the gateway, so that it starts in about half the
// time nsgate itself takes; without it, nsgate re-executes itself as init
// (docs/design.md, "Process model").
package main

import (
	"fmt"
	"os"

	"github.com/nsgate/nsgate/guard"
	"github.com/nsgate/nsgate/internal/diag/starttrace"
	"github.com/nsgate/nsgate/sandbox"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != sandbox.InitArg {
		fmt.Fprintln(os.Stderr, "nsgate-init: the sandbox's init, started by nsgate run; it is not a command (see nsgate help)")
		os.Exit(2)
	}
	// As in nsgate's main: what the caller left open must not reach the
	// worker.
	sandbox.CloseInheritedOnExec()
	starttrace.Start()
	os.Exit(sandbox.InitMain(guard.ApplySandbox))
}
