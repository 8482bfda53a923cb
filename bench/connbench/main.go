// Command connbench is the connection-rate and idle-flow tool of nsgate's
// benchmark (bench/run.sh). It has no dependencies outside the standard
// library and builds as a static binary, so it runs unchanged as nsgate's
// worker, inside slirp4netns's and pasta's namespaces, and on the host side.
//
//	connbench serve -addr 127.0.0.1:8080 [-size 64]
//	    An HTTP/1.0 server: reads a request head, answers 200 with a body of
//	    -size bytes and closes. A connection that sends nothing is held open
//	    until its peer closes it (the idle-flow case).
//	connbench rate -addr HOST:PORT [-c 1] [-t 10s] [-host NAME] [-4]
//	    -c clients, each looping dial, GET, read to EOF, close for -t.
//	    Prints "conns=N errors=E secs=S rate=R". The name is resolved once
//	    (-4: IPv4 only), so the rate counts connections, not lookups.
//	connbench hold -addr HOST:PORT -n 10000 [-t 30s] [-4]
//	    Opens -n connections (sending nothing), prints "held=N failed=F"
//	    once each is open or has failed, keeps them open for -t, then
//	    closes them.
//	connbench proxy -map LISTEN=TARGET [-map LISTEN=TARGET ...]
//	    A minimal userspace TCP proxy: the floor for any gateway that
//	    terminates the client's connection and dials a new one. For each
//	    connection accepted on LISTEN it dials TARGET, copies both ways
//	    (between two *net.TCPConn, so the kernel splices), passes each
//	    half-close on with CloseWrite, and closes both sockets once both
//	    directions are done (at once if either fails). A failed dial closes
//	    the accepted connection. Prints "listening" once every LISTEN is
//	    bound; runs until killed. No policy, no TUN.
//
// Exit status: 0 on success, 1 when a run failed entirely, 2 on usage.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "rate":
		err = rate(os.Args[2:])
	case "hold":
		err = hold(os.Args[2:])
	case "proxy":
		err = proxy(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "connbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: connbench serve|rate|hold|proxy [flags] (see the package comment)")
	os.Exit(2)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	size := fs.Int("size", 64, "response body size in bytes")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	body := bytes.Repeat([]byte("x"), *size)
	resp := append([]byte("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(*size)+"\r\n\r\n"), body...)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			br := bufio.NewReaderSize(c, 1024)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return // idle holders end here when their peer closes
				}
				if len(bytes.TrimSpace(line)) == 0 {
					break
				}
			}
			c.Write(resp)
		}()
	}
}

func rate(args []string) error {
	fs := flag.NewFlagSet("rate", flag.ExitOnError)
	addr := fs.String("addr", "", "server HOST:PORT")
	clients := fs.Int("c", 1, "parallel clients")
	dur := fs.Duration("t", 10*time.Second, "duration")
	host := fs.String("host", "", "Host header (default: the host part of -addr)")
	v4 := fs.Bool("4", false, "resolve and connect over IPv4 only")
	fs.Parse(args)
	if *addr == "" {
		usage()
	}
	h := *host
	if h == "" {
		h, _, _ = net.SplitHostPort(*addr)
	}
	req := []byte("GET / HTTP/1.0\r\nHost: " + h + "\r\n\r\n")
	target, err := resolveOnce(*addr, *v4)
	if err != nil {
		return err
	}
	var conns, errs atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 5 * time.Second}
			buf := make([]byte, 4096)
			for ctx.Err() == nil {
				if err := once(&d, target, req, buf); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				conns.Add(1)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	n := conns.Load()
	fmt.Printf("conns=%d errors=%d secs=%.2f rate=%.1f", n, errs.Load(), secs, float64(n)/secs)
	if e := firstErr.Load(); e != nil {
		fmt.Printf(" first_error=%q", e)
	}
	fmt.Println()
	if n == 0 {
		return fmt.Errorf("no connection succeeded: %v", firstErr.Load())
	}
	return nil
}

// resolveOnce resolves the host part of addr once, so that the rate
// measures connections rather than DNS lookups (Go's resolver does not
// cache).
func resolveOnce(addr string, v4 bool) (string, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	network := "ip"
	if v4 {
		network = "ip4"
	}
	ips, err := net.DefaultResolver.LookupIP(context.Background(), network, h)
	if err != nil {
		return "", err
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("%s: no address", h)
	}
	return net.JoinHostPort(ips[0].String(), p), nil
}

// once makes one request and reads the response to EOF.
func once(d *net.Dialer, addr string, req, buf []byte) error {
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(req); err != nil {
		return err
	}
	got := 0
	for {
		n, err := c.Read(buf)
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if got < len("HTTP/1.0 200") || !bytes.HasPrefix(buf, []byte("HTTP/1.")) {
		return fmt.Errorf("short or bad response (%d bytes)", got)
	}
	return nil
}

func hold(args []string) error {
	fs := flag.NewFlagSet("hold", flag.ExitOnError)
	addr := fs.String("addr", "", "server HOST:PORT")
	n := fs.Int("n", 10000, "connections to hold")
	dur := fs.Duration("t", 30*time.Second, "how long to hold them")
	par := fs.Int("p", 64, "dials in flight")
	v4 := fs.Bool("4", false, "resolve and connect over IPv4 only")
	fs.Parse(args)
	if *addr == "" {
		usage()
	}
	target, err := resolveOnce(*addr, *v4)
	if err != nil {
		return err
	}
	conns := make([]net.Conn, 0, *n)
	var mu sync.Mutex
	var failed atomic.Int64
	var firstErr atomic.Value
	sem := make(chan struct{}, *par)
	var wg sync.WaitGroup
	for range *n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", target, 10*time.Second)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("held=%d failed=%d", len(conns), failed.Load())
	if e := firstErr.Load(); e != nil {
		fmt.Printf(" first_error=%q", e)
	}
	fmt.Println()
	time.Sleep(*dur)
	for _, c := range conns {
		c.Close()
	}
	if len(conns) == 0 {
		return fmt.Errorf("no connection opened: %v", firstErr.Load())
	}
	return nil
}

// proxyMap is one -map LISTEN=TARGET of the proxy subcommand.
type proxyMap struct{ listen, target string }

// mapFlags collects repeated -map flags.
type mapFlags []proxyMap

func (m *mapFlags) String() string {
	parts := make([]string, len(*m))
	for i, p := range *m {
		parts[i] = p.listen + "=" + p.target
	}
	return strings.Join(parts, " ")
}

func (m *mapFlags) Set(s string) error {
	l, t, ok := strings.Cut(s, "=")
	if !ok || l == "" || t == "" {
		return fmt.Errorf("want LISTEN=TARGET, got %q", s)
	}
	*m = append(*m, proxyMap{listen: l, target: t})
	return nil
}

func proxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	var maps mapFlags
	fs.Var(&maps, "map", "LISTEN=TARGET to forward (repeatable)")
	fs.Parse(args)
	if len(maps) == 0 || fs.NArg() != 0 {
		usage()
	}
	lns := make([]*net.TCPListener, len(maps))
	for i, m := range maps {
		ln, err := net.Listen("tcp", m.listen)
		if err != nil {
			return err
		}
		lns[i] = ln.(*net.TCPListener)
	}
	fmt.Println("listening")
	errc := make(chan error, len(maps))
	for i, m := range maps {
		go func() { errc <- forward(lns[i], m.target) }()
	}
	return <-errc
}

// forward accepts connections on ln and relays each to target. It returns
// only when accepting fails for a reason other than running out of file
// descriptors (after which it retries shortly).
func forward(ln *net.TCPListener, target string) error {
	for {
		c, err := ln.AcceptTCP()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		go relay(c, target)
	}
}

// relay dials target for the accepted connection a and copies both ways
// until both directions have ended.
func relay(a *net.TCPConn, target string) {
	defer a.Close()
	bc, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	b := bc.(*net.TCPConn)
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a)
	}()
	pipe(a, b)
	<-done
}

// pipe copies src to dst. At src's EOF it half-closes dst; on an error it
// closes both, which also ends the copy in the other direction.
func pipe(dst, src *net.TCPConn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	dst.CloseWrite()
}
