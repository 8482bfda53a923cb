// Package probe holds the small clients that nsgate's tests and lab run as
// the worker: `nsgate __probe` (network: connect, resolve, flood, serve)
// and `nsgate __guardprobe` (one thing the exec and syscall guard must
// refuse). They are part of the nsgate binary so that the sandbox needs
// nothing installed; cmd/nsgate lists them as hidden commands.
package probe

import (
	"fmt"
	"io"
)

// env carries a probe's output streams.
type env struct{ stdout, stderr io.Writer }

func (e env) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "nsgate: "+format+"\n", args...)
}

// exitUsage is the status of a probe called with bad arguments.
const exitUsage = 2
