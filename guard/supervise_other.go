//go:build !linux

package guard

import (
	"fmt"
	"io"
	"os"
)

// ChildArg is the hidden first argument of the guard child (Linux only).
const ChildArg = "__guard-exec"

// SuperviseOptions are what Supervise runs (Linux only).
type SuperviseOptions struct {
	Config   Config
	Serve    func(*os.File) error
	Degraded func(layers string)
	OnStart  func(kill func())
	Stderr   io.Writer
}

// Supervise needs Linux.
func Supervise(o SuperviseOptions) int {
	fmt.Fprintln(o.Stderr, "nsgate: guard: needs Linux")
	return 125
}

// ChildMain needs Linux.
func ChildMain(stderr io.Writer) int {
	fmt.Fprintln(stderr, "nsgate: guard: needs Linux")
	return 125
}
