package main

import (
	"errors"
	"os"
	"sync"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/guard"
)

// execAudit serves the exec notifier's listener (sent by the sandbox init
// in run, by the guard child in guard) and writes one `exec` audit record
// per attempt (SPEC §6, §8). Its methods are safe for concurrent use.
type execAudit struct {
	log  *audit.Logger
	plan guard.Plan

	mu  sync.Mutex
	srv *guard.ExecServer // nil until serve
}

// newExecAudit prepares to audit execs against plan (the allowlist the
// guard enforces).
func newExecAudit(log *audit.Logger, plan guard.Plan) *execAudit {
	return &execAudit{log: log, plan: plan}
}

// serve starts answering on listener; it has the shape of
// sandbox.Child.ExecListener and takes ownership of listener.
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
	return nil
}

func (a *execAudit) record(ev guard.ExecEvent) {
	action := "deny"
	if ev.Allow {
		action = "allow"
	}
	a.log.Log(audit.Exec{Action: action, Path: ev.Path, PID: ev.PID, Reason: ev.Reason})
}

// close stops the server; call it once the worker is gone (or will not
// start). A server that stopped on an error is recorded as degraded.
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
