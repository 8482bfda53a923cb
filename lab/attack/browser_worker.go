package attack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// BrowserWorkerConfig configures BrowserWorker.
type BrowserWorkerConfig struct {
	// Chromium is the browser executable; Args are its arguments, to
	// which BrowserWorker adds --remote-debugging-port=Port.
	Chromium string
	Args     []string
	// Port is Chromium's DevTools port on the worker's 127.0.0.1.
	Port int
	// Listen is where the relay listens (default GuestV4:Port, the
	// address `nsgate run --publish` forwards to).
	Listen string
	// Stdout and Stderr receive Chromium's and the relay's output.
	Stdout, Stderr io.Writer
}

// BrowserWorker is `nsgate __browserworker`, the worker of the browser
// attempts: it starts Chromium with its DevTools port on 127.0.0.1:Port
// and relays every connection to Listen (the worker's own address) to it.
// Chromium 156 binds its DevTools port to 127.0.0.1 only (it ignores
// --remote-debugging-address), and `nsgate run --publish` forwards to the
// worker's 10.0.2.100, so without the relay nothing would answer the
// published port (docs/chromium.md, "Driving Chromium over CDP").
//
// It returns Chromium's exit status when Chromium exits (the lab closes
// it over CDP), 128+signal if it was killed, or an error if it could not
// start it or listen. When ctx is done it sends Chromium SIGTERM.
func BrowserWorker(ctx context.Context, cfg BrowserWorkerConfig) (int, error) {
	if cfg.Chromium == "" || cfg.Port <= 0 || cfg.Port > 65535 {
		return 0, errors.New("browser worker: needs the Chromium path and a port")
	}
	if cfg.Listen == "" {
		cfg.Listen = net.JoinHostPort(internet.GuestV4, strconv.Itoa(cfg.Port))
	}
	to := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return 0, fmt.Errorf("browser worker: relay: %w", err)
	}
	defer ln.Close()

	args := append([]string{"--remote-debugging-port=" + strconv.Itoa(cfg.Port)}, cfg.Args...)
	cmd := exec.Command(cfg.Chromium, args...)
	cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("browser worker: start %s: %w", cfg.Chromium, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { Relay(ln, to) })
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
			}
		case <-done:
		}
	}()
	werr := cmd.Wait()
	close(done)
	ln.Close()
	wg.Wait()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return 0, nil
	case errors.As(werr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, fmt.Errorf("browser worker: %w", werr)
}

// Relay accepts connections on ln until it is closed and copies each, in
// both directions, to a new connection to the TCP address to. A
// connection that cannot be dialed is closed at once. Relay returns when
// ln is closed; connections being relayed then go on until either side
// closes them.
func Relay(ln net.Listener, to string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", to, 5*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			pipe(c, up)
		}()
	}
}

// pipe copies a to b and b to a until both directions end; a direction
// that ends half-closes its writer, so the other can still finish.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Go(func() { half(a, b) })
	half(b, a)
	wg.Wait()
}
