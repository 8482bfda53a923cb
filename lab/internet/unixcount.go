package internet

import (
	"net"
	"os"
	"sync/atomic"
)

// ListenUnixCounting stands in for a host daemon's unix stream socket (a
// session bus, a container engine's API), which a worker must never
// reach: it listens at path, open to everyone (mode 0777, as a daemon's
// socket whose own authentication decides), and adds each connection it
// accepts to hits. serve, when not nil, has each connection on a goroutine
// of its own before it is closed; nil closes it at once. Closing the
// listener stops it.
func ListenUnixCounting(path string, hits *atomic.Int64, serve func(net.Conn)) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	os.Chmod(path, 0o777)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			if serve == nil {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln, nil
}
