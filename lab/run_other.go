//go:build !linux

package lab

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Exit statuses of Run (and `nsgate lab`).
const (
	ExitPass  = 0
	ExitFail  = 1
	ExitError = 2
)

// Config configures Run; see run_linux.go.
type Config struct {
	Self           string
	AttackArgs     []string
	Version        string
	Evidence       string
	Break          string
	Only           []string
	Stdout, Stderr io.Writer
	Timeout        time.Duration
	Browser        string
}

// Run needs Linux namespaces.
func Run(ctx context.Context, cfg Config) int {
	fmt.Fprintln(cfg.Stderr, "nsgate lab: needs Linux network and user namespaces")
	return ExitError
}
