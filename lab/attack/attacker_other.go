//go:build !linux

package attack

import (
	"context"
	"fmt"
	"io"
)

// The syscall-level attempts need Linux; elsewhere they cannot be carried
// out.

func (a *attacker) socket(kind socketKind) result { return erroredf("needs linux") }

func (a *attacker) ping(ctx context.Context, dst string, raw bool) result {
	return erroredf("needs linux")
}

func notLinux(ctx context.Context, a *attacker) result { return erroredf("needs linux") }

var (
	execShell       = notLinux
	execCopyTmp     = notLinux
	execCopyShm     = notLinux
	execSymlink     = notLinux
	execShebang     = notLinux
	execProcFD      = notLinux
	execMemfd       = notLinux
	execLdso        = notLinux
	execLdsoRenamed = notLinux
	nsNewUserns     = notLinux
	nsSetnsPID1     = notLinux
	nsMount         = notLinux
	nsPtraceInit    = notLinux
	nsIOUring       = notLinux
)

// Helper needs Linux.
func Helper(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "helper: needs linux")
	return 2
}
