package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// The audit fails closed (SPEC §8): when a record cannot be written, nsgate
// admits no new flow, DNS answer or exec from that moment (netstack, dns
// and execaudit.go check the log themselves), ends the worker, and exits
// 125 with one line naming the cause:
//
//	nsgate: audit log failed: write audit.jsonl: no space left on device; the worker was stopped
//
// auditWatch is the part that ends the worker and reports. A nil
// *auditWatch does nothing (no log was opened).
type auditWatch struct {
	log  *audit.Logger
	path string // --audit as given ("" none, "-" stderr)

	mu     sync.Mutex
	kill   func() // ends the worker; nil until there is one
	killed bool   // the worker was ended because the log failed
	stop   chan struct{}
}

// watchAudit starts watching log, opened from path.
func watchAudit(log *audit.Logger, path string) *auditWatch {
	w := &auditWatch{log: log, path: path, stop: make(chan struct{})}
	if path == "-" {
		// A write to a stderr nobody reads any more must fail (EPIPE)
		// and fail the log, not kill nsgate with SIGPIPE before it can
		// end the worker and say why.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	go func() {
		select {
		case <-log.Failed():
			w.mu.Lock()
			if w.kill != nil && !w.killed {
				w.killed = true
				w.kill()
			}
			w.mu.Unlock()
		case <-w.stop:
		}
	}()
	return w
}

// worker tells w how to end the worker; if the log has already failed, it
// is ended at once.
func (w *auditWatch) worker(kill func()) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kill = kill
	if w.log.Err() != nil && !w.killed {
		w.killed = true
		kill()
	}
}

// failed reports whether the audit log has failed: then the one line
// finish prints is the error to report, and no other.
func (w *auditWatch) failed() bool {
	return w != nil && w.log.Err() != nil
}

// finish ends the log with the exit record of code, closes it (bounded, see
// audit.Logger.Close) and reports: the head, or the failure. It returns the
// exit status: code, or 125 when the log failed.
func (w *auditWatch) finish(e env, code int) int {
	if w == nil {
		return code
	}
	close(w.stop)
	w.mu.Lock()
	killed := w.killed
	w.mu.Unlock()
	what := fmt.Sprintf("the worker exited with status %d", code)
	if killed {
		what = "the worker was stopped"
	}
	if !closeAudit(e, w.log, w.path, code, what) {
		return exitFailure
	}
	return code
}

// closeAudit ends log with the exit record of code and closes it. It prints
// the head (when path is not ""), or the one line saying why the log
// failed, ending with what (what became of the worker), and reports whether
// the log was intact.
func closeAudit(e env, log *audit.Logger, path string, code int, what string) bool {
	log.Log(audit.Exit{Code: code})
	head, err := log.Close()
	if err != nil {
		writeBounded(e.stderr, fmt.Sprintf("nsgate: audit log failed: %v; %s\n", err, what))
		return false
	}
	if herr := log.HeadFileErr(); herr != nil {
		e.errorf("warning: %v (anchor the head printed below instead)", herr)
	}
	if path != "" {
		fmt.Fprintf(e.stderr, "nsgate: audit head %s\n", head)
	}
	return true
}

// writeBounded writes s to w, waiting at most a second: the failed log
// may be stderr itself, and a stderr nobody reads must not keep nsgate
// from exiting.
func writeBounded(w io.Writer, s string) {
	done := make(chan struct{})
	go func() {
		io.WriteString(w, s)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}
