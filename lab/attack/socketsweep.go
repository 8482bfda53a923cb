package attack

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// PhaseSocketSweep is the phase of the attempt that tries every unix
// socket in the worker's view: a run of its own with --allow-unix, with a
// host-side socket of the lab's in a directory the run shows (--ro).
const PhaseSocketSweep = "socket-sweep"

// unixSocketSweep makes a socket of its own (the control: it must answer,
// or the sweep proves nothing), then walks the whole view (but /proc and
// /sys) for unix sockets and connects to each, and to every abstract
// socket /proc/net/unix lists. Blocked when only its own answered.
func unixSocketSweep(ctx context.Context, a *attacker) result {
	own := filepath.Join(os.TempDir(), "nsgate-lab-own.sock")
	ln, err := net.Listen("unix", own)
	if err != nil {
		return erroredf("own socket: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var found []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > 12 || dir == "/proc" || dir == "/sys" || len(found) > 10000 {
			return
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			switch {
			case e.Type()&os.ModeSocket != 0:
				found = append(found, p)
			case e.IsDir():
				walk(p, depth+1)
			}
		}
	}
	walk("/", 0)
	if b, err := os.ReadFile("/proc/net/unix"); err == nil {
		for _, l := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(l); len(f) >= 8 && strings.HasPrefix(f[7], "@") {
				found = append(found, f[7])
			}
		}
	}
	var reached []string
	ownOK := false
	for _, s := range found {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := (&net.Dialer{}).DialContext(dctx, "unix", s)
		cancel()
		if err != nil {
			continue
		}
		c.Close()
		if s == own {
			ownOK = true
		} else {
			reached = append(reached, s)
		}
	}
	switch {
	case len(reached) > 0:
		return allowedf("reached %d sockets not its own: %s", len(reached), strings.Join(reached, ", "))
	case !ownOK:
		return erroredf("its own socket %s did not answer (%d sockets found): the sweep proves nothing", own, len(found))
	}
	return blockedf("%d sockets in the view and /proc/net/unix; only its own (%s) answered", len(found), own)
}
