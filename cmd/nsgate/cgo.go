//go:build linux && cgo && !race

package main

// nsgate must be a cgo-free binary: the sandbox changes capabilities and
// no_new_privs on every thread of a process (syscall.AllThreadsSyscall),
// which a binary with cgo threads cannot do, so `nsgate run` and the
// Podman helper would fail at run time. This line stops a plain `go build`
// on a machine with a C compiler at build time instead, naming the fix.
// (Race-detector test builds need cgo and are let through.)
var _ = build_nsgate_with_CGO_ENABLED_0__for_example__CGO_ENABLED_0_go_build_dot_slash_cmd_slash_nsgate
