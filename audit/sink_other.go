//go:build !linux

package audit

import (
	"os"

	"github.com/nsgate/nsgate/internal/hostpath"
)

// openFIFO opens the FIFO p names for writing only (see sink_linux.go).
func openFIFO(p *hostpath.Path) (*os.File, error) {
	return p.OpenOutput(os.O_WRONLY|os.O_APPEND, 0, hostpath.FIFO)
}

// unlinked cannot tell here; nsgate itself runs on Linux only.
func unlinked(*os.File) bool { return false }

func gettid() int { return 0 }

// threadRunnable cannot tell here: the watch counts wall time.
func threadRunnable(int) bool { return false }
