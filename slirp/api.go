package slirp

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// HostFwd is one port forward from the host to the guest (add_hostfwd).
type HostFwd struct {
	ID        int    // assigned by the Handler, from 1
	Proto     string // "tcp" or "udp"
	HostAddr  netip.Addr
	HostPort  uint16
	GuestAddr netip.Addr
	GuestPort uint16
}

// Handler carries out API requests. The API serializes its calls (one
// request at a time, as slirp4netns's single loop does), but a Handler
// may also be used by others and must then be safe for concurrent use.
type Handler interface {
	// AddHostFwd starts forwarding f.Proto on f.HostAddr:f.HostPort to
	// f.GuestAddr:f.GuestPort and returns the forward's ID: 1 for the
	// first one, then increasing, never reused. f.HostAddr is an IPv4
	// address (0.0.0.0 when the request named none). f.GuestAddr is the
	// zero Addr when the request named none: the Handler substitutes its
	// default guest address and reports it in ListHostFwd. Any error is
	// answered "slirp_add_hostfwd failed" and must leave nothing behind.
	AddHostFwd(f HostFwd) (id int, err error)
	// ListHostFwd returns the current forwards in the order they were
	// added, with their IDs and actual guest addresses.
	ListHostFwd() []HostFwd
	// RemoveHostFwd stops the forward with this ID. It returns an error
	// wrapping ErrUnknownID if there is none.
	RemoveHostFwd(id int) error
}

// ErrUnknownID is returned (wrapped) by RemoveHostFwd for an ID that names
// no forward.
var ErrUnknownID = errors.New("no such forward")

// Protocol limits of slirp4netns's API.
const (
	// apiBufLen is slirp4netns's request buffer: a request must be
	// shorter; one of exactly this many bytes is "too large".
	apiBufLen = 4096
	// apiReadTimeout bounds how long a connection may take to send its
	// request. slirp4netns does a single read(2); nsgate reads until the
	// client's shutdown(SHUT_WR), a complete JSON object or this timeout,
	// then answers what it has.
	apiReadTimeout = 5 * time.Second
	// apiWriteTimeout bounds writing the reply.
	apiWriteTimeout = 5 * time.Second
	// apiMaxConns bounds connections being served at once; more wait in
	// the listen backlog.
	apiMaxConns = 16
)

// Replies, byte for byte as slirp4netns 1.2.0 writes them.
const (
	replyOK              = `{"return":{}}`
	errCannotParse       = `{"error":{"desc":"bad request: cannot parse JSON"}}`
	errNotObject         = `{"error":{"desc":"bad request: json_object() failed"}}`
	errNoExecute         = `{"error":{"desc":"bad request: no execute found"}}`
	errUnknownExecute    = `{"error":{"desc":"bad request: unknown execute"}}`
	errTooLarge          = `{"error":{"desc":"bad request: too large message"}}`
	errAddProto          = `{"error":{"desc":"bad request: add_hostfwd: bad arguments.proto"}}`
	errAddHostAddr       = `{"error":{"desc":"bad request: add_hostfwd: bad arguments.host_addr"}}`
	errAddHostPort       = `{"error":{"desc":"bad request: add_hostfwd: bad arguments.host_port"}}`
	errAddGuestAddr      = `{"error":{"desc":"bad request: add_hostfwd: bad arguments.guest_addr"}}`
	errAddGuestPort      = `{"error":{"desc":"bad request: add_hostfwd: bad arguments.guest_port"}}`
	errAddFailed         = `{"error":{"desc":"bad request: add_hostfwd: slirp_add_hostfwd failed"}}`
	errRemoveID          = `{"error":{"desc":"bad request: remove_hostfwd: bad arguments.id"}}`
	errRemoveFailed      = `{"error":{"desc":"bad request: remove_hostfwd: slirp_remove_hostfwd failed"}}`
	defaultHostAddrInAPI = "0.0.0.0"
)

// API serves slirp4netns's JSON API on a unix socket. Each connection
// carries one request: the client writes it and shuts down its write side,
// nsgate writes one compact JSON reply and closes the connection.
//
//	{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"0.0.0.0","host_port":8080,"guest_addr":"10.0.2.100","guest_port":80}}
//	  → {"return":{"id":1}}
//	{"execute":"list_hostfwd"}
//	  → {"entries":[{"id":1,"proto":"tcp","host_addr":"0.0.0.0","host_port":8080,"guest_addr":"10.0.2.100","guest_port":80}]}
//	{"execute":"remove_hostfwd","arguments":{"id":1}}
//	  → {"return":{}}
//
// Note that list_hostfwd's reply has no "return" wrapper: slirp4netns
// documents one, but 1.2.0 does not send it, and nsgate answers as the
// binary does. Errors are {"error":{"desc":"bad request: ..."}}.
//
// Differences from slirp4netns 1.2.0, all on requests it mishandles: a
// missing or non-string proto, or non-object arguments, is "bad
// arguments.proto" (slirp4netns crashes); a port outside 1..65535 is "bad
// arguments.host_port" / "guest_port" (slirp4netns wraps it modulo 65536);
// requests are served concurrently with other traffic, never "stopping
// the world".
//
// Its methods are safe for concurrent use.
type API struct {
	ln          *net.UnixListener
	path        string
	h           Handler
	readTimeout time.Duration

	reqMu sync.Mutex // serializes Handler calls, one request at a time
	sem   chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// ListenAPI creates the API socket at path and serves h on it until Close.
// Like slirp4netns it replaces a stale socket at path (but refuses to
// remove anything that is not a socket), and the path must be shorter than
// 108 bytes ("the specified API socket path is too long (>= 108)").
func ListenAPI(path string, h Handler) (*API, error) {
	return listenAPI(path, h, apiReadTimeout)
}

func listenAPI(path string, h Handler, readTimeout time.Duration) (*API, error) {
	if h == nil {
		return nil, errors.New("api socket: nil handler")
	}
	if err := checkSocketPath(path); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("api socket %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api socket: remove stale socket: %w", err)
		}
	}
	ln, err := listenOwnerOnly(path)
	if err != nil {
		return nil, fmt.Errorf("api socket: %w", err)
	}
	a := &API{
		ln:          ln,
		path:        path,
		h:           h,
		readTimeout: readTimeout,
		sem:         make(chan struct{}, apiMaxConns),
		conns:       map[net.Conn]struct{}{},
	}
	a.wg.Add(1)
	go a.serve()
	return a, nil
}

// listenOwnerOnly listens on a unix socket at path that only its owner
// may connect to (0600), whatever the umask: whoever can connect can
// publish the container on a host port. The mode is set between bind and
// listen, when a connect is still refused, so there is no moment at which
// another user could connect. The listener unlinks the file on Close.
func listenOwnerOnly(path string) (*net.UnixListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path) // closes fd
	defer f.Close()
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: os.NewSyscallError("bind", err)}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		os.Remove(path)
		return nil, err
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		os.Remove(path)
		return nil, os.NewSyscallError("listen", err)
	}
	l, err := net.FileListener(f) // a dup of fd
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	ln := l.(*net.UnixListener)
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// Path returns the socket's path.
func (a *API) Path() string { return a.path }

// Close stops accepting, ends connections being served, removes the
// socket file and waits for its goroutines. It does not touch the
// Handler's forwards.
func (a *API) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	err := a.ln.Close() // also unlinks the socket file
	a.wg.Wait()
	return err
}

func (a *API) serve() {
	defer a.wg.Done()
	for {
		a.sem <- struct{}{}
		c, err := a.ln.AcceptUnix()
		if err != nil {
			<-a.sem
			if a.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		if !a.track(c) {
			c.Close()
			<-a.sem
			return
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer func() { <-a.sem }()
			defer a.untrack(c)
			a.serveConn(c)
		}()
	}
}

func (a *API) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

func (a *API) track(c net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.conns[c] = struct{}{}
	return true
}

func (a *API) untrack(c net.Conn) {
	a.mu.Lock()
	delete(a.conns, c)
	a.mu.Unlock()
	c.Close()
}

// serveConn reads one request and writes its reply.
func (a *API) serveConn(c *net.UnixConn) {
	req, tooLarge := readRequest(c, a.readTimeout)
	var reply string
	if tooLarge {
		reply = errTooLarge
	} else {
		a.reqMu.Lock()
		reply = handleRequest(a.h, req)
		a.reqMu.Unlock()
	}
	c.SetWriteDeadline(time.Now().Add(apiWriteTimeout))
	c.Write([]byte(reply))
}

// readRequest reads until EOF, a complete JSON object, apiBufLen bytes
// (too large) or the read timeout.
func readRequest(c net.Conn, timeout time.Duration) (req []byte, tooLarge bool) {
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, apiBufLen)
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
		if m > 0 && completeObject(buf[:n]) {
			break
		}
	}
	if n >= len(buf) {
		return nil, true
	}
	return buf[:n], false
}

// completeObject reports whether b already holds a whole JSON object, so
// that a client which does not shut down its write side is answered at
// once (slirp4netns answers after its single read).
func completeObject(b []byte) bool {
	v, err := parseJSON(b)
	if err != nil {
		return false
	}
	_, ok := v.(jsonObject)
	return ok
}

// handleRequest answers one request (without the size check). It never
// panics, whatever req holds.
func handleRequest(h Handler, req []byte) string {
	v, err := parseJSON(req)
	if err != nil {
		return errCannotParse
	}
	obj, ok := v.(jsonObject)
	if !ok {
		return errNotObject
	}
	execute, ok := obj.getString("execute")
	if !ok {
		return errNoExecute
	}
	switch execute {
	case "add_hostfwd":
		return addHostFwd(h, obj)
	case "list_hostfwd":
		return listHostFwd(h)
	case "remove_hostfwd":
		return removeHostFwd(h, obj)
	}
	return errUnknownExecute
}

// addHostFwd checks the arguments in slirp4netns's order: proto,
// host_addr, host_port, guest_addr, guest_port.
func addHostFwd(h Handler, obj jsonObject) string {
	var f HostFwd
	switch proto, _ := obj.dotString("arguments", "proto"); proto {
	case "tcp", "udp":
		f.Proto = proto
	default:
		return errAddProto
	}
	hostAddr, _ := obj.dotString("arguments", "host_addr")
	if hostAddr == "" {
		hostAddr = defaultHostAddrInAPI
	}
	a, ok := parseInet4(hostAddr)
	if !ok {
		return errAddHostAddr
	}
	f.HostAddr = a
	if f.HostPort, ok = apiPort(obj.dotNumber("arguments", "host_port")); !ok {
		return errAddHostPort
	}
	if guestAddr, _ := obj.dotString("arguments", "guest_addr"); guestAddr != "" {
		if f.GuestAddr, ok = parseInet4(guestAddr); !ok {
			return errAddGuestAddr
		}
	}
	if f.GuestPort, ok = apiPort(obj.dotNumber("arguments", "guest_port")); !ok {
		return errAddGuestPort
	}
	id, err := h.AddHostFwd(f)
	if err != nil {
		return errAddFailed
	}
	return `{"return":{"id":` + strconv.Itoa(id) + `}}`
}

func listHostFwd(h Handler) string {
	var b strings.Builder
	b.WriteString(`{"entries":[`)
	for i, f := range h.ListHostFwd() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"proto":%s,"host_addr":%s,"host_port":%d,"guest_addr":%s,"guest_port":%d}`,
			f.ID, quoteJSON(f.Proto), quoteJSON(addrString(f.HostAddr)), f.HostPort,
			quoteJSON(addrString(f.GuestAddr)), f.GuestPort)
	}
	b.WriteString(`]}`)
	return b.String()
}

func removeHostFwd(h Handler, obj jsonObject) string {
	id, ok := cInt(obj.dotNumber("arguments", "id"))
	if !ok {
		return errRemoveID
	}
	if err := h.RemoveHostFwd(id); err != nil {
		if errors.Is(err, ErrUnknownID) {
			return errRemoveID
		}
		return errRemoveFailed
	}
	return replyOK
}

// parseInet4 is inet_pton(AF_INET, ...): a dotted quad, no leading zeros.
func parseInet4(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// apiPort converts a JSON number as C's (int) cast does (truncating toward
// zero) and accepts 1..65535.
func apiPort(f float64) (uint16, bool) {
	n, ok := cInt(f)
	if !ok || n < 1 || n > math.MaxUint16 {
		return 0, false
	}
	return uint16(n), true
}

// cInt is C's (int) cast of a double, where defined.
func cInt(f float64) (int, bool) {
	t := math.Trunc(f)
	if math.IsNaN(t) || t < math.MinInt32 || t > math.MaxInt32 {
		return 0, false
	}
	return int(t), true
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return defaultHostAddrInAPI
	}
	return a.Unmap().String()
}

// quoteJSON quotes s as parson serializes strings (it also escapes '/').
func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\\', '/':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
