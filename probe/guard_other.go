//go:build !linux

package probe

import (
	"fmt"
	"io"
)

// GuardMain is unavailable off Linux.
func GuardMain(_ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "nsgate: __guardprobe needs Linux")
	return exitUsage
}
