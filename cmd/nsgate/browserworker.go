package main

import (
	"context"
	"errors"
	"flag"
	"os/signal"
	"syscall"

	"github.com/nsgate/nsgate/lab"
)

// `nsgate __browserworker` (hidden) is the worker of `nsgate lab
// --browser`: inside `nsgate run` it starts Chromium with its DevTools
// port on the worker's 127.0.0.1:PORT and relays the worker's
// 10.0.2.100:PORT (where --publish forwards) to it (lab.BrowserWorker).
// It exits with Chromium's status; 125 if it could not start, 2 on usage
// errors.
//
//	nsgate __browserworker --chromium PATH [--port 9222] [--listen ADDR] -- CHROMIUM-ARGS...

func cmdBrowserWorker(e env, args []string) int {
	fs := flag.NewFlagSet("nsgate __browserworker", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	chromium := fs.String("chromium", "", "Chromium executable `PATH`")
	port := fs.Int("port", 9222, "Chromium's DevTools `PORT` on 127.0.0.1, relayed from the same port of --listen's address")
	listen := fs.String("listen", "", "relay listen `ADDR` (default "+lab.GuestV4+":PORT)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if *chromium == "" {
		e.errorf("__browserworker: --chromium PATH is required")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := lab.BrowserWorker(ctx, lab.BrowserWorkerConfig{
		Chromium: *chromium,
		Args:     fs.Args(),
		Port:     *port,
		Listen:   *listen,
		Stdout:   e.stdout,
		Stderr:   e.stderr,
	})
	if err != nil {
		e.errorf("__browserworker: %v", err)
		return exitFailure
	}
	return code
}
