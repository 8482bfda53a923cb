package slirp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeHandler behaves like slirp4netns's forward table: IDs from 1, a
// second forward on the same proto/host address/port fails (as the bind
// would), a missing guest address becomes 10.0.2.100.
type fakeHandler struct {
	mu        sync.Mutex
	next      int
	fwds      []HostFwd
	failRm    bool // RemoveHostFwd fails for existing IDs
	failAddIP netip.Addr
}

func newFakeHandler() *fakeHandler { return &fakeHandler{next: 1} }

func (h *fakeHandler) AddHostFwd(f HostFwd) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.HostAddr == h.failAddIP {
		return 0, errors.New("bind: cannot assign requested address")
	}
	for _, o := range h.fwds {
		if o.Proto == f.Proto && o.HostPort == f.HostPort &&
			(o.HostAddr == f.HostAddr || o.HostAddr.IsUnspecified() || f.HostAddr.IsUnspecified()) {
			return 0, errors.New("bind: address already in use")
		}
	}
	if !f.GuestAddr.IsValid() {
		f.GuestAddr = netip.MustParseAddr("10.0.2.100")
	}
	f.ID = h.next
	h.next++
	h.fwds = append(h.fwds, f)
	return f.ID, nil
}

func (h *fakeHandler) ListHostFwd() []HostFwd {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]HostFwd(nil), h.fwds...)
}

func (h *fakeHandler) RemoveHostFwd(id int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, f := range h.fwds {
		if f.ID == id {
			if h.failRm {
				return errors.New("close failed")
			}
			h.fwds = append(h.fwds[:i], h.fwds[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("remove %d: %w", id, ErrUnknownID)
}

// apiPath returns a socket path short enough for sun_path.
func apiPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "api.sock")
	if len(p) >= maxSunPath {
		t.Fatalf("temporary socket path too long: %s", p)
	}
	return p
}

// call sends one request the way Podman does (write, shutdown(SHUT_WR),
// read to EOF) and returns the reply.
func call(t *testing.T, path, req string) string {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	// A request too large is answered and then closed with unread data,
	// which resets the connection after the reply (slirp4netns too).
	if err != nil && len(b) == 0 {
		t.Fatalf("read reply: %v", err)
	}
	return string(b)
}

const list0 = `{"entries":[]}`

// TestAPIProtocol replays a session recorded against slirp4netns 1.2.0
// (Debian 12) and checks every reply byte for byte. Cases marked
// "nsgate:" are where slirp4netns crashes or wraps and nsgate refuses.
func TestAPIProtocol(t *testing.T) {
	path := apiPath(t)
	h := newFakeHandler()
	h.failAddIP = netip.MustParseAddr("192.0.2.1") // not a local address
	api, err := ListenAPI(path, h)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()

	steps := []struct {
		why, req, want string
	}{
		{"empty list", `{"execute":"list_hostfwd"}`, list0},
		{"add with every argument", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"0.0.0.0","host_port":8080,"guest_addr":"10.0.2.100","guest_port":80}}`, `{"return":{"id":1}}`},
		{"list shows it, keys in slirp4netns's order", `{"execute":"list_hostfwd"}`, `{"entries":[{"id":1,"proto":"tcp","host_addr":"0.0.0.0","host_port":8080,"guest_addr":"10.0.2.100","guest_port":80}]}`},
		{"udp with empty addresses and a trailing newline", `{"execute":"add_hostfwd","arguments":{"proto":"udp","host_addr":"","host_port":8081,"guest_addr":"","guest_port":81}}` + "\n", `{"return":{"id":2}}`},
		{"Podman's exact payload (guest_addr empty, not omitted)", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"0.0.0.0","host_port":8082,"guest_addr":"","guest_port":82}}` + "\n", `{"return":{"id":3}}`},
		{"explicit host and guest addresses", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.0.0.1","host_port":8083,"guest_addr":"10.0.2.50","guest_port":83}}`, `{"return":{"id":4}}`},
		{"the same port again fails like the bind", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8080,"guest_port":80}}`, errAddFailed},
		{"a host address that is not local fails", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"192.0.2.1","host_port":8099,"guest_port":99}}`, errAddFailed},
		{"proto sctp", `{"execute":"add_hostfwd","arguments":{"proto":"sctp","host_port":8084,"guest_port":84}}`, errAddProto},
		{"proto tcpx", `{"execute":"add_hostfwd","arguments":{"proto":"tcpx","host_port":8084,"guest_port":84}}`, errAddProto},
		{"proto tcp4 (only later slirp4netns knows it)", `{"execute":"add_hostfwd","arguments":{"proto":"tcp4","host_port":8085,"guest_port":85}}`, errAddProto},
		{"proto tcp6", `{"execute":"add_hostfwd","arguments":{"proto":"tcp6","host_port":8086,"guest_port":86}}`, errAddProto},
		{"proto is case-sensitive", `{"execute":"add_hostfwd","arguments":{"proto":"TCP","host_port":8086,"guest_port":86}}`, errAddProto},
		{"nsgate: missing proto (slirp4netns crashes)", `{"execute":"add_hostfwd","arguments":{"host_port":8110,"guest_port":99}}`, errAddProto},
		{"nsgate: arguments not an object (slirp4netns crashes)", `{"execute":"add_hostfwd","arguments":"x"}`, errAddProto},
		{"nsgate: proto a number (slirp4netns crashes)", `{"execute":"add_hostfwd","arguments":{"proto":5,"host_port":8105,"guest_port":99}}`, errAddProto},
		{"nsgate: add without arguments", `{"execute":"add_hostfwd"}`, errAddProto},
		{"IPv6 host address: IPv4 only", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"::","host_port":8087,"guest_port":87}}`, errAddHostAddr},
		{"IPv6 loopback host address", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"::1","host_port":8088,"guest_port":88}}`, errAddHostAddr},
		{"host address not an address", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"bad","host_port":8089,"guest_port":89}}`, errAddHostAddr},
		{"host address with three parts", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"1.2.3","host_port":8089,"guest_port":89}}`, errAddHostAddr},
		{"host address with a leading space", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":" 127.0.0.1","host_port":8100,"guest_port":99}}`, errAddHostAddr},
		{"host address with leading zeros", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"127.000.0.1","host_port":8101,"guest_port":99}}`, errAddHostAddr},
		{"host port 0", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":0,"guest_port":89}}`, errAddHostPort},
		{"host port missing", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","guest_port":89}}`, errAddHostPort},
		{"host port a string", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":"8090","guest_port":89}}`, errAddHostPort},
		{"host port a boolean", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":true,"guest_port":99}}`, errAddHostPort},
		{"host port 0.5 truncates to 0", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":0.5,"guest_port":1}}`, errAddHostPort},
		{"nsgate: host port 70000 (slirp4netns wraps it)", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":70000,"guest_port":96}}`, errAddHostPort},
		{"nsgate: host port -1 (slirp4netns wraps it)", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":-1,"guest_port":97}}`, errAddHostPort},
		{"nsgate: host port beyond int", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":2147483648,"guest_port":1}}`, errAddHostPort},
		{"guest port missing", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8092}}`, errAddGuestPort},
		{"guest port 0", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8093,"guest_port":0}}`, errAddGuestPort},
		{"guest port -0", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8201e0,"guest_port":-0}}`, errAddGuestPort},
		{"nsgate: guest port 70000 (slirp4netns wraps it)", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8098,"guest_port":70000}}`, errAddGuestPort},
		{"guest address not an address", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8094,"guest_addr":"bad","guest_port":94}}`, errAddGuestAddr},
		{"IPv6 guest address", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8095,"guest_addr":"fd00::100","guest_port":95}}`, errAddGuestAddr},
		{"checks run in order: host_addr first", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"bad","host_port":0,"guest_addr":"bad","guest_port":0}}`, errAddHostAddr},
		{"checks run in order: host_port before guest_addr", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":0,"guest_addr":"bad","guest_port":0}}`, errAddHostPort},
		{"checks run in order: guest_addr before guest_port", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":1,"guest_addr":"bad","guest_port":0}}`, errAddGuestAddr},
		{"fractional ports truncate like C's (int)", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8091.7,"guest_port":91.2}}`, `{"return":{"id":5}}`},
		{"exponent notation", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":1e3,"guest_port":99}}`, `{"return":{"id":6}}`},
		{"guest address 0.0.0.0 is taken as given", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"0.0.0.0","host_port":8102,"guest_addr":"0.0.0.0","guest_port":99}}`, `{"return":{"id":7}}`},
		{"non-string addresses count as absent", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":null,"host_port":8205,"guest_addr":5,"guest_port":1}}`, `{"return":{"id":8}}`},
		{"strings are C strings: \\u0000 ends them", `{"execute":"add_hostfwd","arguments":{"proto":"tcp\u0000x","host_port":8200,"guest_port":1}}`, `{"return":{"id":9}}`},
		{"a top-level key with a dot is not a path", `{"execute":"add_hostfwd","arguments.proto":"udp","arguments":{"proto":"tcp","host_port":8204,"guest_port":1}}`, `{"return":{"id":10}}`},
		{"extra arguments are ignored", `{"execute":"add_hostfwd","arguments":{"proto":"udp","host_port":8202,"guest_port":1,"extra":[1,2,{"a":null}]}}`, `{"return":{"id":11}}`},
		{"duplicate keys are a parse error", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8103,"guest_port":99,"host_port":8104}}`, errCannotParse},
		{"remove an unknown ID", `{"execute":"remove_hostfwd","arguments":{"id":42}}`, errRemoveID},
		{"remove with a string ID", `{"execute":"remove_hostfwd","arguments":{"id":"1"}}`, errRemoveID},
		{"remove with a fractional ID truncates", `{"execute":"remove_hostfwd","arguments":{"id":1.9}}`, replyOK},
		{"remove the same ID again", `{"execute":"remove_hostfwd","arguments":{"id":1}}`, errRemoveID},
		{"remove without arguments", `{"execute":"remove_hostfwd"}`, errRemoveID},
		{"remove ID 0", `{"execute":"remove_hostfwd","arguments":{"id":0}}`, errRemoveID},
		{"remove ID -1", `{"execute":"remove_hostfwd","arguments":{"id":-1}}`, errRemoveID},
		{"remove with arguments not an object", `{"execute":"remove_hostfwd","arguments":5}`, errRemoveID},
		{"remove with an ID beyond int", `{"execute":"remove_hostfwd","arguments":{"id":1e300}}`, errRemoveID},
		{"remove ID 2 given as 2e0", `{"execute":"remove_hostfwd","arguments":{"id":2e0}}`, replyOK},
		{"list ignores arguments", `{"execute":"list_hostfwd","arguments":5}`,
			`{"entries":[` +
				`{"id":3,"proto":"tcp","host_addr":"0.0.0.0","host_port":8082,"guest_addr":"10.0.2.100","guest_port":82},` +
				`{"id":4,"proto":"tcp","host_addr":"127.0.0.1","host_port":8083,"guest_addr":"10.0.2.50","guest_port":83},` +
				`{"id":5,"proto":"tcp","host_addr":"0.0.0.0","host_port":8091,"guest_addr":"10.0.2.100","guest_port":91},` +
				`{"id":6,"proto":"tcp","host_addr":"0.0.0.0","host_port":1000,"guest_addr":"10.0.2.100","guest_port":99},` +
				`{"id":7,"proto":"tcp","host_addr":"0.0.0.0","host_port":8102,"guest_addr":"0.0.0.0","guest_port":99},` +
				`{"id":8,"proto":"tcp","host_addr":"0.0.0.0","host_port":8205,"guest_addr":"10.0.2.100","guest_port":1},` +
				`{"id":9,"proto":"tcp","host_addr":"0.0.0.0","host_port":8200,"guest_addr":"10.0.2.100","guest_port":1},` +
				`{"id":10,"proto":"tcp","host_addr":"0.0.0.0","host_port":8204,"guest_addr":"10.0.2.100","guest_port":1},` +
				`{"id":11,"proto":"udp","host_addr":"0.0.0.0","host_port":8202,"guest_addr":"10.0.2.100","guest_port":1}]}`},
		{"IDs are not reused after removal", `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":8080,"guest_port":80}}`, `{"return":{"id":12}}`},
	}
	for _, s := range steps {
		if got := call(t, path, s.req); got != s.want {
			t.Errorf("%s:\n request %s\n     got %s\n    want %s", s.why, s.req, got, s.want)
		}
	}
}

// TestAPIRequestErrors covers the request-level errors and the JSON rules,
// each recorded against slirp4netns 1.2.0.
func TestAPIRequestErrors(t *testing.T) {
	path := apiPath(t)
	api, err := ListenAPI(path, newFakeHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	pad := func(n int, tail string) string { return strings.Repeat(" ", n-len(tail)) + tail }
	list := `{"execute":"list_hostfwd"}`
	tests := []struct {
		why, req, want string
	}{
		{"not JSON", "not json", errCannotParse},
		{"what slirp4netns's own test sends", "badjson\n", errCannotParse},
		{"empty request", "", errCannotParse},
		{"an array is not an object", `[]`, errNotObject},
		{"a number is not an object", `1`, errNotObject},
		{"a string is not an object", `"s"`, errNotObject},
		{"null is not an object", `null`, errNotObject},
		{"no execute", `{}`, errNoExecute},
		{"slirp4netns's test: unexpected JSON", `{"unexpectedjson": 42}`, errNoExecute},
		{"execute a number", `{"execute":1}`, errNoExecute},
		{"execute null", `{"execute":null}`, errNoExecute},
		{"unknown execute", `{"execute":"nope"}`, errUnknownExecute},
		{"execute is case-sensitive", `{"execute":"LIST_HOSTFWD"}`, errUnknownExecute},
		{"slirp4netns's test: bad proto", `{"execute": "add_hostfwd", "arguments":{"proto": "bad"}}`, errAddProto},
		{"trailing text after the value is ignored", list + " trailing", list0},
		{"a second object is ignored", list + `{"execute":"x"}`, list0},
		{"surrounding white space", " " + list + " ", list0},
		{"C isspace: vertical tab and form feed", "\v" + list[:len(list)-1] + "\f}", list0},
		{"a UTF-8 BOM is skipped", "\xef\xbb\xbf" + list, list0},
		{"the request ends at a NUL byte", list + "\x00garbage", list0},
		{"a NUL inside the value truncates it", `{"execute":"list_hostfwd"` + "\x00}", errCannotParse},
		{"escapes in strings", `{"execute":"list\u005fhostfwd"}`, list0},
		{"\\u0000 ends the execute string", `{"execute":"list_hostfwd\u0000x"}`, list0},
		{"trailing comma", `{"execute":"list_hostfwd",}`, errCannotParse},
		{"duplicate execute", `{"execute":"list_hostfwd","execute":"nope"}`, errCannotParse},
		{"duplicate empty keys", `{"execute":"list_hostfwd","":1,"":2}`, errCannotParse},
		{"an empty key is fine", `{"execute":"list_hostfwd","":1}`, list0},
		{"comments", `{"execute":"list_hostfwd"/*c*/}`, errCannotParse},
		{"single quotes", `{'execute':'list_hostfwd'}`, errCannotParse},
		{"a number that overflows a double", `{"execute":"list_hostfwd","x":1e999}`, errCannotParse},
		{"a leading zero", `{"execute":"list_hostfwd","x":01}`, errCannotParse},
		{"an unknown escape", `{"execute":"list_hostfwd","x":"\x01"}`, errCannotParse},
		{"a raw control character in a string", "{\"execute\":\"list_hostfwd\",\"x\":\"a\x01b\"}", errCannotParse},
		{"a raw newline in a string", "{\"execute\":\"list_hostfwd\",\"x\":\"a\nb\"}", errCannotParse},
		{"a raw tab in a string", "{\"execute\":\"list_hostfwd\",\"x\":\"a\tb\"}", errCannotParse},
		{"invalid UTF-8 is taken as is", "{\"execute\":\"list_hostfwd\",\"x\":\"\xff\"}", list0},
		{"a lone high surrogate", `{"execute":"list_hostfwd","x":"\ud800"}`, errCannotParse},
		{"a lone low surrogate", `{"execute":"list_hostfwd","x":"\udc00"}`, errCannotParse},
		{"a surrogate pair", `{"execute":"list_hostfwd","x":"\ud83d\ude00"}`, list0},
		{"a short \\u escape", `{"execute":"list_hostfwd","x":"\u12"}`, errCannotParse},
		{"1. is a number to strtod", `{"execute":"list_hostfwd","x":1.}`, list0},
		{"-inf is not", `{"execute":"list_hostfwd","x":-inf}`, errCannotParse},
		{".5 is not", `{"execute":"list_hostfwd","x":.5}`, errCannotParse},
		{"a bare minus", `{"execute":"list_hostfwd","x":-}`, errCannotParse},
		{"an exponent without digits", `{"execute":"list_hostfwd","x":1.5e}`, errCannotParse},
		{"an upper-case exponent with a sign", `{"execute":"list_hostfwd","x":1E+2}`, list0},
		{"true misspelt", `{"execute":"list_hostfwd","x":tru}`, errCannotParse},
		{"True capitalised", `{"execute":"list_hostfwd","x":True}`, errCannotParse},
		{"a trailing comma in an array", `{"execute":"list_hostfwd","x":[1,]}`, errCannotParse},
		{"an empty array element", `{"execute":"list_hostfwd","x":[,]}`, errCannotParse},
		{"nested objects may repeat keys across levels", `{"a":{"a":1},"execute":"list_hostfwd","b":{"a":2}}`, list0},
		{"deep nesting within the size limit", `{"execute":"list_hostfwd","x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, list0},
		{"4095 bytes is the largest request", pad(4095, list), list0},
		{"4096 bytes is too large", pad(4096, list), errTooLarge},
		{"5000 bytes is too large", strings.Repeat(" ", 5000), errTooLarge},
		{"slirp4netns's test: a stream of zeros", strings.Repeat("\x00", 8192), errTooLarge},
	}
	for _, tt := range tests {
		if got := call(t, path, tt.req); got != tt.want {
			t.Errorf("%s:\n request %q\n     got %s\n    want %s", tt.why, tt.req, got, tt.want)
		}
	}
}

func TestAPIRemoveFailure(t *testing.T) {
	path := apiPath(t)
	h := newFakeHandler()
	api, err := ListenAPI(path, h)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if got := call(t, path, `{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_port":1,"guest_port":1}}`); got != `{"return":{"id":1}}` {
		t.Fatal(got)
	}
	h.mu.Lock()
	h.failRm = true
	h.mu.Unlock()
	if got := call(t, path, `{"execute":"remove_hostfwd","arguments":{"id":1}}`); got != errRemoveFailed {
		t.Errorf("a failing removal: got %s, want %s", got, errRemoveFailed)
	}
}

// TestAPIClientStyles checks clients that do not shut down their write
// side, or write a request in pieces.
func TestAPIClientStyles(t *testing.T) {
	path := apiPath(t)
	api, err := listenAPI(path, newFakeHandler(), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	dial := func() *net.UnixConn {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c.(*net.UnixConn)
	}

	t.Run("a complete object without shutdown is answered at once, as slirp4netns's single read does", func(t *testing.T) {
		c := dial()
		defer c.Close()
		start := time.Now()
		c.Write([]byte(`{"execute":"list_hostfwd"}`))
		b, err := io.ReadAll(c)
		if err != nil || string(b) != list0 {
			t.Fatalf("got %q, %v", b, err)
		}
		if d := time.Since(start); d > 250*time.Millisecond {
			t.Errorf("answered after %v: it waited for the read timeout", d)
		}
	})
	t.Run("a request written in two pieces, then shutdown", func(t *testing.T) {
		c := dial()
		defer c.Close()
		c.Write([]byte(`{"execute":`))
		time.Sleep(50 * time.Millisecond)
		c.Write([]byte(`"list_hostfwd"}`))
		c.CloseWrite()
		b, err := io.ReadAll(c)
		if err != nil || string(b) != list0 {
			t.Fatalf("got %q, %v", b, err)
		}
	})
	t.Run("an incomplete request without shutdown is answered at the read timeout", func(t *testing.T) {
		c := dial()
		defer c.Close()
		c.Write([]byte(`{"exec`))
		b, err := io.ReadAll(c)
		if err != nil || string(b) != errCannotParse {
			t.Fatalf("got %q, %v", b, err)
		}
	})
	t.Run("a client that sends nothing is answered at the read timeout", func(t *testing.T) {
		c := dial()
		defer c.Close()
		b, err := io.ReadAll(c)
		if err != nil || string(b) != errCannotParse {
			t.Fatalf("got %q, %v", b, err)
		}
	})
	t.Run("concurrent clients each get their own reply", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan string, 40)
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				c, err := net.Dial("unix", path)
				if err != nil {
					errs <- err.Error()
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				req, want := `{"execute":"list_hostfwd"}`, list0
				if i%2 == 1 {
					req, want = `{"execute":"nope"}`, errUnknownExecute
				}
				c.Write([]byte(req))
				c.(*net.UnixConn).CloseWrite()
				b, _ := io.ReadAll(c)
				if string(b) != want {
					errs <- fmt.Sprintf("client %d got %q", i, b)
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	})
}

func TestListenAPISocketFile(t *testing.T) {
	t.Run("a stale socket is replaced, as slirp4netns unlinks it", func(t *testing.T) {
		path := apiPath(t)
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close() // leaves the file behind
		api, err := ListenAPI(path, newFakeHandler())
		if err != nil {
			t.Fatalf("stale socket: %v", err)
		}
		if got := call(t, path, `{"execute":"list_hostfwd"}`); got != list0 {
			t.Errorf("got %s", got)
		}
		if err := api.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket file left after Close: %v", err)
		}
		if err := api.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	t.Run("a regular file is never removed", func(t *testing.T) {
		path := apiPath(t)
		if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ListenAPI(path, newFakeHandler()); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
			t.Fatalf("ListenAPI over a file: %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "keep" {
			t.Error("the file was changed")
		}
	})
	t.Run("a path too long for sun_path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), strings.Repeat("x", 120))
		_, err := ListenAPI(path, newFakeHandler())
		if err == nil || err.Error() != "the specified API socket path is too long (>= 108)" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a missing directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no", "api.sock")
		if _, err := ListenAPI(path, newFakeHandler()); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("a nil handler", func(t *testing.T) {
		if _, err := ListenAPI(apiPath(t), nil); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("Close ends a connection that is still sending", func(t *testing.T) {
		path := apiPath(t)
		api, err := ListenAPI(path, newFakeHandler())
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte(`{"exec`))
		time.Sleep(20 * time.Millisecond)
		done := make(chan struct{})
		go func() { api.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("Close waited for the client")
		}
	})
}

// FuzzAPIRequest feeds arbitrary bytes to the request handler: it must
// never panic, and always answer one of slirp4netns's reply shapes.
func FuzzAPIRequest(f *testing.F) {
	for _, s := range []string{
		`{"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":"0.0.0.0","host_port":8080,"guest_addr":"10.0.2.100","guest_port":80}}`,
		`{"execute":"list_hostfwd"}`,
		`{"execute":"remove_hostfwd","arguments":{"id":1}}`,
		`{"execute":"add_hostfwd","arguments":{"proto":"udp","host_port":1e3,"guest_port":-0}}`,
		`{"a":[1,2.5e-3,true,false,null,"\ud83d\ude00",{}],"execute":"x"}`,
		"\xef\xbb\xbf{\"execute\":\"list_hostfwd\"}\x00",
		`[[[[[[[[`,
		`{"execute":"add_hostfwd","arguments":{"proto":"tcp\u0000","host_port":65535,"guest_port":65536}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, req []byte) {
		h := newFakeHandler()
		reply := handleRequest(h, req)
		switch {
		case strings.HasPrefix(reply, `{"error":{"desc":"bad request: `) && strings.HasSuffix(reply, `"}}`):
		case strings.HasPrefix(reply, `{"return":{`) && strings.HasSuffix(reply, `}}`):
		case strings.HasPrefix(reply, `{"entries":[`) && strings.HasSuffix(reply, `]}`):
		default:
			t.Fatalf("reply %q to %q", reply, req)
		}
		// The reply is itself valid JSON to our parser.
		if _, err := parseJSON([]byte(reply)); err != nil {
			t.Fatalf("reply %q does not parse: %v", reply, err)
		}
		// A successful add leaves a forward with valid fields.
		for _, fw := range h.ListHostFwd() {
			if (fw.Proto != "tcp" && fw.Proto != "udp") || fw.HostPort == 0 || fw.GuestPort == 0 ||
				!fw.HostAddr.Is4() || !fw.GuestAddr.Is4() {
				t.Fatalf("bad forward %+v from %q", fw, req)
			}
		}
	})
}

// FuzzParseJSON checks the parser against itself: whatever it accepts it
// accepts again with trailing junk, and it never panics or loops.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `"a\u0041"`, `-0.5e+3`, `1.`, `{"a":{"b":[null,true]}}`, "\xef\xbb\xbf1", `[` + strings.Repeat(`[`, 3000)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseJSON(b)
		if err != nil {
			return
		}
		v2, err := parseJSON(append(append([]byte{}, b...), " ]junk"...))
		if err != nil {
			t.Fatalf("%q parses, but not with trailing junk: %v", b, err)
		}
		if fmt.Sprint(v) != fmt.Sprint(v2) {
			t.Fatalf("%q: %v vs %v", b, v, v2)
		}
	})
}

// TestAPISocketIsOwnerOnly: whoever can connect to the API socket can
// publish the container on any host port, or remove Podman's forwards.
// The socket is the user's alone (0600), whatever the umask: slirp4netns
// leaves it to the umask, and with 0 or 002 another user, or the group,
// could connect.
func TestAPISocketIsOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := apiPath(t)
	api, err := ListenAPI(path, newFakeHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("API socket mode %v under umask 0: group or others may connect", perm)
	}
	if got := call(t, path, `{"execute":"list_hostfwd"}`); got != list0 {
		t.Errorf("the owner's request: %s", got)
	}
}
