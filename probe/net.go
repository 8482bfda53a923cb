package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The hidden probe command is a tiny, dependency-free client that tests and
// the lab run as the worker (it needs nothing installed in the sandbox):
//
//	nsgate __probe tcp ADDR             connect, send an HTTP/1.0 GET, print the status line
//	nsgate __probe send ADDR PART...    connect, write each Go-quoted PART as its own write (a pause
//	                                    between), read until the server closes; print what came back
//	nsgate __probe udp ADDR             send one datagram, wait for a reply
//	nsgate __probe udp-flood ADDR SECS  send datagrams as fast as possible
//	nsgate __probe serve ADDR SECS      answer HTTP requests on ADDR for SECS seconds (the page names the client)
//	nsgate __probe banner ADDR          connect and print the server's first line (server-first protocols)
//	nsgate __probe hold ADDR N          open N connections one after another and hold them; print each outcome
//	nsgate __probe stall ADDR N SECS    open N connections, never read from them for SECS; print how many opened
//	nsgate __probe keep ADDR SECS       one connection to an echo server, a line echoed every 100 ms; exit 0 once it is reset
//	nsgate __probe dns SERVER NAME TYPE udp|tcp   one DNS query; prints the rcode and answers
//	nsgate __probe tcp-from SRC ADDR N  N connects at once from source address SRC; prints how many completed
//
// It prints "ok ..." or "refused ..."/"error ..." and exits 0 on success, 1
// when the attempt failed, 2 on usage errors.

// Main runs `nsgate __probe ARGS...` and returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	e := env{stdout, stderr}
	if len(args) < 2 {
		e.errorf("usage: nsgate __probe tcp|udp|udp-flood ADDR [SECS]")
		return exitUsage
	}
	addr := args[1]
	switch args[0] {
	case "tcp":
		return probeTCP(e, addr)
	case "https":
		return probeHTTPS(e, addr, args[2:])
	case "send":
		return probeSend(e, addr, args[2:])
	case "udp":
		return probeUDP(e, addr)
	case "banner":
		return probeBanner(e, addr)
	case "dns":
		if len(args) != 5 {
			e.errorf("usage: nsgate __probe dns SERVER NAME TYPE udp|tcp")
			return exitUsage
		}
		return probeDNS(e, addr, args[2], args[3], args[4])
	case "serve":
		secs := 10.0
		if len(args) > 2 {
			fmt.Sscan(args[2], &secs)
		}
		return probeServe(e, addr, time.Duration(secs*float64(time.Second)))
	case "hold":
		n := 1
		if len(args) > 2 {
			fmt.Sscan(args[2], &n)
		}
		return probeHold(e, addr, n)
	case "stall":
		if len(args) != 4 {
			e.errorf("usage: nsgate __probe stall ADDR N SECS")
			return exitUsage
		}
		n, secs := 1, 5.0
		fmt.Sscan(args[2], &n)
		fmt.Sscan(args[3], &secs)
		return probeStall(e, addr, n, time.Duration(secs*float64(time.Second)))
	case "keep":
		secs := 10.0
		if len(args) > 2 {
			fmt.Sscan(args[2], &secs)
		}
		return probeKeep(e, addr, time.Duration(secs*float64(time.Second)))
	case "dns-flood":
		if len(args) != 4 {
			e.errorf("usage: nsgate __probe dns-flood SERVER NAME SECS")
			return exitUsage
		}
		secs := 5.0
		fmt.Sscan(args[3], &secs)
		return probeDNSFlood(e, addr, args[2], time.Duration(secs*float64(time.Second)))
	case "tcp-from":
		if len(args) != 4 {
			e.errorf("usage: nsgate __probe tcp-from SRC ADDR N")
			return exitUsage
		}
		n := 1
		fmt.Sscan(args[3], &n)
		return probeTCPFrom(e, args[1], args[2], n)
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

// probeTCPFrom opens n connections to addr at once, each bound to the
// source address src (one the sandbox's network has but the gateway must
// not accept, e.g. a second address a container's root added), and says
// how many completed within 2 s.
func probeTCPFrom(e env, src, addr string, n int) int {
	a, err := netip.ParseAddr(src)
	if err != nil || n < 1 || n > 10000 {
		e.errorf("probe: tcp-from: want an address and 1 to 10000 connections")
		return exitUsage
	}
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: a.AsSlice()}}
	done := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			c, err := d.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			done <- err
		}()
	}
	ok, last := 0, error(nil)
	for i := 0; i < n; i++ {
		if err := <-done; err != nil {
			last = err
		} else {
			ok++
		}
	}
	if ok < n {
		fmt.Fprintf(e.stdout, "refused %d/%d connected from %s: %v\n", ok, n, src, last)
		return 1
	}
	fmt.Fprintf(e.stdout, "ok %d/%d connected from %s\n", ok, n, src)
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

// probeDNSFlood asks SERVER for NAME's A record over UDP, one query after
// another as fast as the answers come, for d, and prints how many were
// sent and answered. A %d in NAME is replaced by the query's number.
func probeDNSFlood(e env, server, name string, d time.Duration) int {
	qn, err := dnsmessage.NewName(strings.ReplaceAll(strings.TrimSuffix(name, "."), "%d", "0") + ".")
	if err != nil {
		e.errorf("probe dns-flood: %v", err)
		return exitUsage
	}
	c, err := net.Dial("udp", server)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", server, err)
		return 1
	}
	defer c.Close()
	buf := make([]byte, 1500)
	var sent, answered int
	for end := time.Now().Add(d); time.Now().Before(end); {
		if strings.Contains(name, "%d") {
			// A new name each time: nothing for the audit to fold.
			if qn, err = dnsmessage.NewName(fmt.Sprintf(strings.TrimSuffix(name, ".")+".", sent)); err != nil {
				e.errorf("probe dns-flood: %v", err)
				return exitUsage
			}
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(sent), RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: qn, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		msg, _ := b.Finish()
		if _, err := c.Write(msg); err != nil {
			continue
		}
		sent++
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(buf); err == nil {
			answered++
		}
	}
	fmt.Fprintf(e.stdout, "dns-flood %s sent=%d answered=%d\n", name, sent, answered)
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
			// The page names the client as the server sees it: tests of
			// published ports check which source address arrives.
			fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from the worker\nclient %s\n", c.RemoteAddr())
		}()
	}
}

func probeBanner(e env, addr string) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", addr, err)
		return 1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintf(e.stdout, "error %s: %v\n", addr, err)
		return 1
	}
	fmt.Fprintf(e.stdout, "ok %s %s\n", addr, strings.TrimSpace(line))
	return 0
}

// probeDNS sends one query to server ("ip:port") over udp or tcp and
// prints "rcode RCODE answers N [ADDR...]". Exit 0 when an answer came.
func probeDNS(e env, server, name, qtype, transport string) int {
	types := map[string]dnsmessage.Type{"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "TXT": dnsmessage.TypeTXT, "MX": dnsmessage.TypeMX, "HTTPS": dnsmessage.Type(65)}
	t, ok := types[strings.ToUpper(qtype)]
	if !ok {
		e.errorf("probe dns: unknown type %q", qtype)
		return exitUsage
	}
	qn, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		e.errorf("probe dns: %v", err)
		return exitUsage
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x5a5a, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: qn, Type: t, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	c, err := net.DialTimeout(transport, server, 3*time.Second)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", server, err)
		return 1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if transport == "tcp" {
		msg = append([]byte{byte(len(msg) >> 8), byte(len(msg))}, msg...)
	}
	if _, err := c.Write(msg); err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", server, err)
		return 1
	}
	buf := make([]byte, 65537)
	n, err := c.Read(buf)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", server, err)
		return 1
	}
	reply := buf[:n]
	if transport == "tcp" && len(reply) >= 2 {
		reply = reply[2:]
	}
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	if err != nil {
		fmt.Fprintf(e.stdout, "error bad reply: %v\n", err)
		return 1
	}
	p.SkipAllQuestions()
	var answers []string
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		switch rh.Type {
		case dnsmessage.TypeA:
			r, _ := p.AResource()
			answers = append(answers, netip.AddrFrom4(r.A).String())
		case dnsmessage.TypeAAAA:
			r, _ := p.AAAAResource()
			answers = append(answers, netip.AddrFrom16(r.AAAA).String())
		default:
			p.SkipAnswer()
			answers = append(answers, rh.Type.String())
		}
	}
	fmt.Fprintf(e.stdout, "rcode %s answers %d %s\n", strings.TrimPrefix(h.RCode.String(), "RCode"), len(answers), strings.Join(answers, " "))
	if len(answers) == 0 {
		return 1
	}
	return 0
}

// probeStall opens n connections to addr and holds them for d without
// reading: a server that sends fills every window, and what it sends then
// waits in the gateway.
func probeStall(e env, addr string, n int, d time.Duration) int {
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	failed := 0
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			failed++
			continue
		}
		held = append(held, c)
	}
	fmt.Fprintf(e.stdout, "stalled=%d failed=%d\n", len(held), failed)
	time.Sleep(d)
	if failed > 0 {
		return 1
	}
	return 0
}

// probeHold opens n connections to addr in turn, holding each open, and
// prints "connected I" or "refused I: ERR" for each. Exit 0 when all
// connected.
func probeHold(e env, addr string, n int) int {
	code := 0
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 1; i <= n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Fprintf(e.stdout, "refused %d: %v\n", i, err)
			code = 1
			continue
		}
		held = append(held, c)
		fmt.Fprintf(e.stdout, "connected %d\n", i)
	}
	return code
}

// probeKeep opens one connection to addr (an echo server) and, every
// 100 ms for d, sends a line and reads its echo. It prints "echoed 1"
// after the first echo and "cut after N echoes: ERR" when the connection
// fails. Exit 0 when the connection was reset (ECONNRESET: the gateway cut
// it), 1 when it ended another way or d passed with it still open.
func probeKeep(e env, addr string, d time.Duration) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused: %v\n", err)
		return 1
	}
	defer c.Close()
	buf := make([]byte, 5)
	end := time.Now().Add(d)
	n := 0
	for time.Now().Before(end) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Write([]byte("ping\n"))
		if err == nil {
			_, err = io.ReadFull(c, buf)
		}
		if err != nil {
			fmt.Fprintf(e.stdout, "cut after %d echoes: %v\n", n, err)
			if errors.Is(err, syscall.ECONNRESET) {
				return 0
			}
			return 1
		}
		if n++; n == 1 {
			fmt.Fprintln(e.stdout, "echoed 1")
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(e.stdout, "still open after %d echoes\n", n)
	return 1
}
