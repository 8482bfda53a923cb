package slirp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nsgate/nsgate/inbound"
)

// echoGuest stands in for the worker: a TCP echo server on loopback that
// dial reaches whatever worker address it is given. It records the dials.
type echoGuest struct {
	ln    net.Listener
	mu    sync.Mutex
	dials []string // "proto addr"
}

func newEchoGuest(t *testing.T) *echoGuest {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c) // echo until EOF, then close
			}()
		}
	}()
	return &echoGuest{ln: ln}
}

func (g *echoGuest) dial(ctx context.Context, proto string, _, addr netip.AddrPort) (net.Conn, error) {
	g.mu.Lock()
	g.dials = append(g.dials, proto+" "+addr.String())
	g.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp4", g.ln.Addr().String())
}

// freeTCPPort returns a loopback port that was free a moment ago.
func freeTCPPort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).AddrPort().Port()
}

// TestForwarderThroughAPI drives an inbound.Forwarder over the API socket,
// as Podman with port_handler=slirp4netns does.
func TestForwarderThroughAPI(t *testing.T) {
	g := newEchoGuest(t)
	fwds := inbound.New(inbound.Options{Guest: netip.MustParseAddr("10.0.2.100"), Dial: g.dial})
	defer fwds.Close()
	path := apiPath(t)
	api, err := ListenAPI(path, NewHandler(fwds))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()

	var port uint16
	var reply string
	for i := 0; i < 5; i++ {
		port = freeTCPPort(t)
		reply = call(t, path, fmt.Sprintf(`{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.0.0.1","host_port":%d,"guest_addr":"","guest_port":80}}`+"\n", port))
		if reply == `{"return":{"id":1}}` {
			break
		}
	}
	if reply != `{"return":{"id":1}}` {
		t.Fatalf("add: %s", reply)
	}
	want := fmt.Sprintf(`{"entries":[{"id":1,"proto":"tcp","host_addr":"127.0.0.1","host_port":%d,"guest_addr":"10.0.2.100","guest_port":80}]}`, port)
	if got := call(t, path, `{"execute":"list_hostfwd"}`); got != want {
		t.Fatalf("list:\n got %s\nwant %s", got, want)
	}
	// Only the container is a target: 10.0.2.2 (slirp4netns's host
	// loopback), the host's own loopback and the metadata address fail.
	for _, guest := range []string{"10.0.2.2", "127.0.0.1", "169.254.169.254", "10.0.2.3"} {
		req := fmt.Sprintf(`{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.0.0.1","host_port":%d,"guest_addr":%q,"guest_port":22}}`, freeTCPPort(t), guest)
		if got := call(t, path, req); got != errAddFailed {
			t.Fatalf("add to guest %s: %s", guest, got)
		}
	}
	// The same port again: the bind fails.
	if got := call(t, path, fmt.Sprintf(`{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.0.0.1","host_port":%d,"guest_port":80}}`, port)); got != errAddFailed {
		t.Fatalf("duplicate add: %s", got)
	}
	c, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("via api"))
	c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "via api" {
		t.Fatalf("relay: %q, %v", b, err)
	}
	g.mu.Lock()
	dials := append([]string(nil), g.dials...)
	g.mu.Unlock()
	if len(dials) != 1 || dials[0] != "tcp 10.0.2.100:80" {
		t.Fatalf("an empty guest_addr dials the default worker address: %q", dials)
	}
	if got := call(t, path, `{"execute":"remove_hostfwd","arguments":{"id":1}}`); got != replyOK {
		t.Fatalf("remove: %s", got)
	}
	if got := call(t, path, `{"execute":"list_hostfwd"}`); got != list0 {
		t.Fatalf("list after remove: %s", got)
	}
	if _, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), time.Second); err == nil {
		t.Fatal("port still open after remove_hostfwd")
	}
	// The forwarder's unknown ID is the API's.
	if got := call(t, path, `{"execute":"remove_hostfwd","arguments":{"id":1}}`); got != errRemoveID {
		t.Fatalf("second remove: %s", got)
	}
}
