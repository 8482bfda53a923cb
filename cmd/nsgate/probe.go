package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// The hidden probe command is a tiny, dependency-free client that tests and
// the lab run as the worker (it needs nothing installed in the sandbox):
//
//	nsgate __probe tcp ADDR             connect, send an HTTP/1.0 GET, print the status line
//	nsgate __probe udp ADDR             send one datagram, wait for a reply
//	nsgate __probe udp-flood ADDR SECS  send datagrams as fast as possible
//	nsgate __probe serve ADDR SECS      answer HTTP requests on ADDR for SECS seconds
//
// It prints "ok ..." or "refused ..."/"error ..." and exits 0 on success, 1
// when the attempt failed, 2 on usage errors.
func init() { extraCommands["__probe"] = cmdProbe }

func cmdProbe(e env, args []string) int {
	if len(args) < 2 {
		e.errorf("usage: nsgate __probe tcp|udp|udp-flood ADDR [SECS]")
		return exitUsage
	}
	addr := args[1]
	switch args[0] {
	case "tcp":
		return probeTCP(e, addr)
	case "udp":
		return probeUDP(e, addr)
	case "serve":
		secs := 10.0
		if len(args) > 2 {
			fmt.Sscan(args[2], &secs)
		}
		return probeServe(e, addr, time.Duration(secs*float64(time.Second)))
	case "udp-flood":
		secs := 5.0
		if len(args) > 2 {
			fmt.Sscan(args[2], &secs)
		}
		return probeUDPFlood(e, addr, time.Duration(secs*float64(time.Second)))
	}
	e.errorf("probe: unknown kind %q", args[0])
	return exitUsage
}

func probeTCP(e env, addr string) int {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s after %s: %v\n", addr, time.Since(start).Round(time.Millisecond), err)
		return 1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	host, _, _ := net.SplitHostPort(addr)
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", host)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintf(e.stdout, "error %s: %v\n", addr, err)
		return 1
	}
	fmt.Fprintf(e.stdout, "ok %s %s\n", addr, strings.TrimSpace(line))
	return 0
}

func probeUDP(e env, addr string) int {
	c, err := net.Dial("udp", addr)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", addr, err)
		return 1
	}
	defer c.Close()
	buf := make([]byte, 2048)
	for i := 0; i < 3; i++ {
		if _, err := c.Write([]byte("ping")); err != nil {
			fmt.Fprintf(e.stdout, "refused %s: %v\n", addr, err)
			return 1
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			fmt.Fprintf(e.stdout, "ok %s %q\n", addr, buf[:n])
			return 0
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			fmt.Fprintf(e.stdout, "refused %s: %v\n", addr, err)
			return 1
		}
	}
	fmt.Fprintf(e.stdout, "error %s: no reply\n", addr)
	return 1
}

func probeUDPFlood(e env, addr string, d time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := net.Dial("udp", addr)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", addr, err)
		return 1
	}
	defer c.Close()
	payload := make([]byte, 512)
	var sent, failed int
	for ctx.Err() == nil {
		for i := 0; i < 64; i++ {
			if _, err := c.Write(payload); err != nil {
				failed++ // ECONNREFUSED from an ICMP refusal: keep going
			} else {
				sent++
			}
		}
	}
	fmt.Fprintf(e.stdout, "flood %s sent=%d failed=%d\n", addr, sent, failed)
	return 0
}

// probeServe answers every HTTP request on addr with a fixed body until d
// has passed, then exits 0. It prints "listening ADDR" once ready.
func probeServe(e env, addr string, d time.Duration) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(e.stdout, "error listen %s: %v\n", addr, err)
		return 1
	}
	fmt.Fprintf(e.stdout, "listening %s\n", ln.Addr())
	time.AfterFunc(d, func() { ln.Close() })
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			for {
				l, err := br.ReadString('\n')
				if err != nil || strings.TrimSpace(l) == "" {
					break
				}
			}
			fmt.Fprint(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from the worker\n")
		}()
	}
}
