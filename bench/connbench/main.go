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
//	connbench lserve -addr 127.0.0.1:8081
//	    The latency server, HTTP/1.1 with keep-alive: on each connection,
//	    for every request head it reads, writes a 100-byte response head
//	    and then a 1,000-byte body as two separate writes (the pattern
//	    Nagle's algorithm and delayed ACK can stall), until the peer
//	    closes.
//	connbench latency -addr HOST:PORT [-mode keep|fresh] [-n 2000] [-4]
//	    The request is a 64-byte HTTP/1.1 GET (Host: the host part of
//	    -addr), so a gateway's HTTP checks see a real request.
//	    keep: one connection, -n request/response round trips on it, each
//	    timed from the request's write to the last byte of the response.
//	    fresh: -n times dial, send a request, time to the response's first
//	    byte (then read the rest and close). The name is resolved once.
//	    Prints "mode=M n=N p50_us=A p99_us=B p999_us=C max_us=D".
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
	"slices"
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
	case "lserve":
		err = lserve(os.Args[2:])
	case "latency":
		err = latency(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "connbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: connbench serve|rate|hold|proxy|lserve|latency [flags] (see the package comment)")
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

// The latency exchange's sizes (see lserve).
const (
	latReqSize  = 64
	latHeadSize = 100
	latBodySize = 1000
)

func lserve(args []string) error {
	fs := flag.NewFlagSet("lserve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveLatency(c)
	}
}

// padded returns start + an X-Pad header + "\r\n" such that the whole,
// with end appended, is size bytes (or as short as it can be).
func padded(start, end string, size int) []byte {
	pad := size - len(start) - len(end) - len("X-Pad: \r\n")
	if pad < 0 {
		return []byte(start + end)
	}
	return []byte(start + "X-Pad: " + strings.Repeat("p", pad) + "\r\n" + end)
}

// latRequest is the latency client's request for host.
func latRequest(host string) []byte {
	return padded("GET / HTTP/1.1\r\nHost: "+host+"\r\n", "\r\n", latReqSize)
}

// serveLatency answers each request head on c with a response head and a
// body, written separately, until c ends.
func serveLatency(c net.Conn) {
	defer c.Close()
	head := padded("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(latBodySize)+"\r\n", "\r\n", latHeadSize)
	body := bytes.Repeat([]byte("b"), latBodySize)
	br := bufio.NewReaderSize(c, 1024)
	for {
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(bytes.TrimSpace(line)) == 0 {
				break
			}
		}
		if _, err := c.Write(head); err != nil {
			return
		}
		if _, err := c.Write(body); err != nil {
			return
		}
	}
}

func latency(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	addr := fs.String("addr", "", "server HOST:PORT (connbench lserve)")
	mode := fs.String("mode", "keep", "keep (one kept-alive connection) or fresh (a connection per request)")
	n := fs.Int("n", 2000, "requests")
	warm := fs.Int("warm", 20, "requests made first and not counted")
	v4 := fs.Bool("4", false, "resolve and connect over IPv4 only")
	fs.Parse(args)
	if *addr == "" || *n <= 0 || (*mode != "keep" && *mode != "fresh") {
		usage()
	}
	target, err := resolveOnce(*addr, *v4)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(*addr)
	req := latRequest(host)
	var samples []time.Duration
	switch *mode {
	case "keep":
		samples, err = latencyKeep(target, req, *warm, *n)
	case "fresh":
		samples, err = latencyFresh(target, req, *warm, *n)
	}
	if err != nil {
		return err
	}
	fmt.Println(latencySummary(*mode, samples))
	return nil
}

// latencyKeep times n round trips (request written to the response's last
// byte read) on one connection, after warm uncounted ones.
func latencyKeep(target string, req []byte, warm, n int) ([]time.Duration, error) {
	c, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	resp := make([]byte, latHeadSize+latBodySize)
	samples := make([]time.Duration, 0, n)
	for i := range warm + n {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		if i >= warm {
			samples = append(samples, time.Since(t0))
		}
	}
	return samples, nil
}

// latencyFresh times n fresh connections from the dial to the response's
// first byte, after warm uncounted ones. Each reads its whole response
// before it closes, so the server never sees a reset.
func latencyFresh(target string, req []byte, warm, n int) ([]time.Duration, error) {
	resp := make([]byte, latHeadSize+latBodySize)
	samples := make([]time.Duration, 0, n)
	for i := range warm + n {
		t0 := time.Now()
		c, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("dial %d: %w", i, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(req); err != nil {
			c.Close()
			return nil, err
		}
		got, err := io.ReadAtLeast(c, resp, 1)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		d := time.Since(t0)
		// The rest of the response; then close.
		for got < len(resp) {
			m, err := c.Read(resp[got:])
			got += m
			if err != nil {
				break
			}
		}
		c.Close()
		if i >= warm {
			samples = append(samples, d)
		}
	}
	return samples, nil
}

// latencySummary sorts samples and formats their percentiles in µs.
func latencySummary(mode string, samples []time.Duration) string {
	slices.Sort(samples)
	q := func(p float64) float64 {
		if len(samples) == 0 {
			return 0
		}
		i := int(p * float64(len(samples)-1))
		return float64(samples[i]) / 1e3
	}
	return fmt.Sprintf("mode=%s n=%d p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f",
		mode, len(samples), q(0.50), q(0.99), q(0.999), q(1))
}
