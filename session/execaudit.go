package session

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
)

// ExecAudit returns the function that serves an exec notifier's listener
// (sent by the sandbox init in run, by the guard child in guard) against
// plan, the allowlist the guard enforces, writing one `exec` record per
// attempt. It has the shape of sandbox.Child.ExecListener and takes
// ownership of the listener. Close stops what it started.
//
// The audit fails closed: once the log has failed, no exec runs. The
// server's report comes before the kernel is told to go on, and the server
// can only be told to refuse by its own checks, so an exec it would let
// through is stopped by killing its caller (SIGKILL to a task that waits in
// the notifier, so its pid cannot have been reused) before the answer; and
// the server is closed, after which the kernel fails every exec of the
// worker with ENOSYS.
func (s *Session) ExecAudit(plan guard.Plan) func(*os.File) error {
	a := &execAudit{log: s.sink, failed: audit.FailedOf(s.sink), plan: plan}
	s.mu.Lock()
	s.execs = append(s.execs, a)
	s.mu.Unlock()
	return a.serve
}

// execAudit serves one exec notifier. Its methods are safe for concurrent
// use.
type execAudit struct {
	log    audit.Sink
	failed <-chan struct{}
	plan   guard.Plan

	mu  sync.Mutex
	srv *guard.ExecServer // nil until serve
}

func (a *execAudit) serve(listener *os.File) error {
	srv, err := a.plan.ServeExec(listener, a.record)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.srv != nil {
		srv.Close()
		return errors.New("a second exec listener")
	}
	a.srv = srv
	if a.failed != nil {
		go a.closeOnFailure(srv)
	}
	return nil
}

// closeOnFailure closes srv when the audit log fails (unless it stops
// first).
func (a *execAudit) closeOnFailure(srv *guard.ExecServer) {
	select {
	case <-a.failed:
		a.close()
	case <-srv.Done():
	}
}

func (a *execAudit) record(ev guard.ExecEvent) {
	if ev.Syscall == "socket" { // a refused socket(AF_UNIX): nothing runs
		a.log.Log(audit.Syscall{Action: "deny", Syscall: ev.Syscall, Args: ev.Path, PID: ev.PID, Reason: ev.Reason})
		return
	}
	action := "deny"
	if ev.Allow {
		action = "allow"
	}
	missing := ev.Errno == unix.ENOENT || ev.Errno == unix.ENOTDIR
	a.log.Log(audit.Exec{Action: action, Path: ev.Path, PID: ev.PID, Reason: ev.Reason, Missing: missing})
	if ev.Allow && audit.IsFailed(a.failed) {
		// Not recorded, so not run.
		unix.Kill(ev.PID, unix.SIGKILL)
	}
}

// close stops the server. A server that stopped on an error is recorded as
// degraded.
func (a *execAudit) close() {
	a.mu.Lock()
	srv := a.srv
	a.srv = nil
	a.mu.Unlock()
	if srv == nil {
		return
	}
	if err := srv.Close(); err != nil {
		a.log.Log(audit.Policy{Action: "degraded", Error: err.Error()})
	}
}
