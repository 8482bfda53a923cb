// Package starttrace writes the start-up trace of `nsgate run` and its
// sandbox's init (one line per phase), asked for through the environment,
// for the density benchmark and docs/performance.md. It is apart from
// package profile so that init, a small program, does not link the
// profiler.
package starttrace

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Start-up trace: with NSGATE_STARTTRACE=FILE in the environment of
// `nsgate run`, the parent and the sandbox's init each append one line
// per phase of the start to FILE,
//
//	ID PROCESS PHASE UNIXNANO
//
// where ID is the parent's process id in both (init, PID 1 in its own
// namespace, is told it), PROCESS is "parent" or "init", and UNIXNANO the
// wall clock. The density benchmark (bench/density -trace) turns them
// into per-phase latencies. Init writes to the parent's descriptor of the
// file (TraceFile), which it must close on exec: a descriptor open for
// writing on a mount of init's own namespace would keep init from making
// that mount read-only, and the worker never sees the file.
const (
	traceEnv   = "NSGATE_STARTTRACE"
	traceIDEnv = "NSGATE_STARTTRACE_ID"
	traceFD    = "fd:"
)

var trace struct {
	mu  sync.Mutex
	f   *os.File
	id  string
	who string
}

// Start opens the trace file named in the environment, if any, and
// removes the variables from the environment.
func Start() {
	path := os.Getenv(traceEnv)
	id := os.Getenv(traceIDEnv)
	os.Unsetenv(traceEnv)
	os.Unsetenv(traceIDEnv)
	if path == "" {
		return
	}
	if n, ok := strings.CutPrefix(path, traceFD); ok && id != "" {
		// Init: the parent's descriptor.
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 {
			return
		}
		syscall.CloseOnExec(fd)
		trace.f, trace.id, trace.who = os.NewFile(uintptr(fd), "trace"), id, "init"
		Mark("main")
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nsgate: %s: %v\n", traceEnv, err)
		return
	}
	trace.f, trace.id, trace.who = f, strconv.Itoa(os.Getpid()), "parent"
	Mark("main")
}

// Mark records that this process reached phase (one word) now, when a
// start-up trace was asked for; otherwise it does nothing.
func Mark(phase string) {
	if trace.f == nil {
		return
	}
	line := fmt.Sprintf("%s %s %s %d\n", trace.id, trace.who, strings.ReplaceAll(phase, " ", "_"), time.Now().UnixNano())
	trace.mu.Lock()
	trace.f.WriteString(line)
	trace.mu.Unlock()
}

// TraceFile is the start-up trace a child (the sandbox's init) should
// add to, and the environment that tells it that the file is its
// descriptor fd; nil when no trace was asked for.
func TraceFile(fd int) (*os.File, []string) {
	if trace.f == nil || trace.who != "parent" {
		return nil, nil
	}
	return trace.f, []string{traceEnv + "=" + traceFD + strconv.Itoa(fd), traceIDEnv + "=" + trace.id}
}
