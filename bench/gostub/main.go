// Command gostub is the smallest Go program a sandbox could start: it
// replaces itself with its arguments (execve) and does nothing else. The
// density benchmark's case unshare-go runs it inside each bare unshare
// sandbox before the worker, so that the burst's cost of starting one Go
// runtime per sandbox is measured beside the floor, in the same run: a
// lower bound for any gateway that starts a Go program per sandbox
// (nsgate starts two, each of a much larger binary).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gostub COMMAND [ARG...]")
		os.Exit(2)
	}
	path, err := exec.LookPath(os.Args[1])
	if err == nil {
		err = syscall.Exec(path, os.Args[1:], os.Environ())
	}
	fmt.Fprintln(os.Stderr, "gostub:", err)
	os.Exit(127)
}
