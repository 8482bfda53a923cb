package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	s := <-ch
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// relayed sets up worker <-> [a relay b] <-> upstream over loopback TCP (a is
// the relay's worker side, b its upstream side) and runs Copy in the
// background.
func relayed(t *testing.T, ctx context.Context, idle time.Duration) (worker, upstream *net.TCPConn, done <-chan Result) {
	t.Helper()
	worker, a := tcpPair(t)
	b, upstream := tcpPair(t)
	ch := make(chan Result, 1)
	go func() { ch <- Copy(ctx, a, b, idle) }()
	return worker, upstream, ch
}

func wait(t *testing.T, ch <-chan Result) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not end")
		return Result{}
	}
}

func TestCopyHalfClose(t *testing.T) {
	worker, upstream, done := relayed(t, context.Background(), time.Minute)
	if _, err := worker.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	worker.CloseWrite()
	got, err := io.ReadAll(upstream)
	if err != nil || string(got) != "hello" {
		t.Fatalf("upstream read %q, %v; want hello and EOF (half-close must reach upstream)", got, err)
	}
	// The other direction still works after the half-close.
	if _, err := upstream.Write([]byte("world!")); err != nil {
		t.Fatal(err)
	}
	upstream.CloseWrite()
	got, err = io.ReadAll(worker)
	if err != nil || string(got) != "world!" {
		t.Fatalf("worker read %q, %v; want world! and EOF", got, err)
	}
	r := wait(t, done)
	if r.Err != nil || r.Failed != SideNone || r.ToUpstream != 5 || r.ToWorker != 6 {
		t.Fatalf("result %+v; want clean end with 5/6 bytes", r)
	}
}

func TestCopyEnds(t *testing.T) {
	cases := []struct {
		name string
		why  string
		idle time.Duration
		act  func(t *testing.T, cancel func(), worker, upstream *net.TCPConn)
		err  error
		side Side
	}{
		{
			name: "idle",
			why:  "a flow with no traffic either way ends after the idle period",
			idle: 100 * time.Millisecond,
			act:  func(*testing.T, func(), *net.TCPConn, *net.TCPConn) {},
			err:  ErrIdle,
		},
		{
			name: "idle-after-half-close",
			why:  "a half-closed flow is still reaped when the open direction goes quiet",
			idle: 100 * time.Millisecond,
			act: func(t *testing.T, _ func(), worker, _ *net.TCPConn) {
				worker.CloseWrite()
			},
			err: ErrIdle,
		},
		{
			name: "cancel",
			why:  "cancelling the context (gateway shutdown) ends the relay",
			idle: time.Minute,
			act:  func(_ *testing.T, cancel func(), _, _ *net.TCPConn) { cancel() },
			err:  context.Canceled,
		},
		{
			name: "upstream-reset",
			why:  "a reset from upstream is recorded as the upstream side failing first",
			idle: time.Minute,
			act: func(t *testing.T, _ func(), _, upstream *net.TCPConn) {
				upstream.SetLinger(0)
				upstream.Close()
			},
			side: SideUpstream,
		},
		{
			name: "worker-reset",
			why:  "a reset from the worker is recorded as the worker's side failing first",
			idle: time.Minute,
			act: func(t *testing.T, _ func(), worker, _ *net.TCPConn) {
				worker.SetLinger(0)
				worker.Close()
			},
			side: SideWorker,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			worker, upstream, done := relayed(t, ctx, tc.idle)
			tc.act(t, cancel, worker, upstream)
			r := wait(t, done)
			if tc.err != nil && !errors.Is(r.Err, tc.err) {
				t.Fatalf("%s: err %v, want %v", tc.why, r.Err, tc.err)
			}
			if tc.err == nil && r.Err == nil {
				t.Fatalf("%s: no error recorded", tc.why)
			}
			if r.Failed != tc.side {
				t.Fatalf("%s: failed side %v, want %v (err %v)", tc.why, r.Failed, tc.side, r.Err)
			}
		})
	}
}

func TestCopyIdleCountsBothDirections(t *testing.T) {
	// Traffic in one direction only keeps the whole flow alive: a
	// download with a silent client must not be cut.
	// The idle time is six times the gap between writes, so that a loaded
	// machine's scheduling delays do not look like silence.
	idle := 600 * time.Millisecond
	_, upstream, done := relayed(t, context.Background(), idle)
	for i := 0; i < 8; i++ {
		if _, err := upstream.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("relay ended while upstream was sending: %+v", r)
		case <-time.After(idle / 6):
		}
	}
	r := wait(t, done)
	if !errors.Is(r.Err, ErrIdle) || r.ToWorker != 8 {
		t.Fatalf("result %+v; want idle end after 8 bytes", r)
	}
}

func TestCopyWithoutCloseWrite(t *testing.T) {
	// net.Pipe has no CloseWrite: EOF on one side ends the relay cleanly.
	wk, a := net.Pipe()
	b, up := net.Pipe()
	done := make(chan Result, 1)
	go func() { done <- Copy(context.Background(), a, b, time.Minute) }()
	go func() { io.Copy(io.Discard, up) }()
	wk.Write([]byte("abc"))
	wk.Close()
	r := wait(t, done)
	if r.Err != nil || r.ToUpstream != 3 {
		t.Fatalf("result %+v; want clean end with 3 bytes", r)
	}
}

func TestCopyLarge(t *testing.T) {
	worker, upstream, done := relayed(t, context.Background(), time.Minute)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() {
		worker.Write(payload)
		worker.CloseWrite()
	}()
	got, err := io.ReadAll(upstream)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(payload))
	}
	upstream.CloseWrite()
	io.ReadAll(worker)
	r := wait(t, done)
	if r.Err != nil || r.ToUpstream != int64(len(payload)) {
		t.Fatalf("result %+v", r)
	}
}

func udpPair(t *testing.T) (x, y *net.UDPConn) {
	t.Helper()
	x, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	y, err = net.DialUDP("udp", nil, x.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close(); y.Close() })
	return x, y
}

func TestPacketsEcho(t *testing.T) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 70000)
		for {
			n, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			srv.WriteToUDP(buf[:n], from)
		}
	}()
	// The worker's side: two connected sockets facing each other.
	wl, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	wl.Close()
	al, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	al.Close()
	worker, err := net.DialUDP("udp", wl.LocalAddr().(*net.UDPAddr), al.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	a, err := net.DialUDP("udp", al.LocalAddr().(*net.UDPAddr), wl.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 1)
	go func() { done <- Packets(context.Background(), a, b, 200*time.Millisecond) }()

	sizes := []int{1, 1400, 60000}
	buf := make([]byte, 70000)
	for _, n := range sizes {
		msg := bytes.Repeat([]byte{byte(n)}, n)
		if _, err := worker.Write(msg); err != nil {
			t.Fatal(err)
		}
		worker.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, err := worker.Read(buf)
		if err != nil || got != n {
			t.Fatalf("datagram of %d: got %d, %v (datagrams must not be split or truncated)", n, got, err)
		}
	}
	r := wait(t, done)
	if !errors.Is(r.Err, ErrIdle) {
		t.Fatalf("result %+v; want idle end", r)
	}
	want := int64(1 + 1400 + 60000)
	if r.ToUpstream != want || r.ToWorker != want {
		t.Fatalf("counts %d/%d, want %d each way", r.ToUpstream, r.ToWorker, want)
	}
}

func TestPacketsRefusedIsTransient(t *testing.T) {
	// b points at a closed port: the host reports ECONNREFUSED on the
	// next operation, which must not end the relay.
	closed, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	b, err := net.DialUDP("udp", nil, closed.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	x, worker := udpPair(t)
	x.Close()
	a, err := net.DialUDP("udp", x.LocalAddr().(*net.UDPAddr), worker.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 1)
	go func() { done <- Packets(context.Background(), a, b, 200*time.Millisecond) }()
	for i := 0; i < 3; i++ {
		worker.Write([]byte("ping"))
		time.Sleep(20 * time.Millisecond)
	}
	r := wait(t, done)
	if !errors.Is(r.Err, ErrIdle) || r.ToUpstream != 12 {
		t.Fatalf("result %+v; want idle end after 12 bytes relayed", r)
	}
}

func BenchmarkCopy(b *testing.B) { benchCopy(b, Options{Idle: time.Minute}) }

// benchCopy writes 64 KiB at a time from the worker's side of a relay
// with opts to an upstream that discards it.
func benchCopy(b *testing.B, opts Options) {
	worker, a := tcpPair(b)
	c, upstream := tcpPair(b)
	go CopyWith(context.Background(), a, c, opts)
	go io.Copy(io.Discard, upstream)
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := worker.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCopyWithGate(t *testing.T) {
	errRefused := errors.New("refused by gate")
	cases := []struct {
		name           string
		why            string
		verdict        error
		wantToUpstream int64
		wantAtUp       string
		wantErr        error
		workerEOF      bool
	}{
		{
			name:           "allow",
			why:            "an accepting gate's held bytes reach upstream first, then the rest flows and is counted",
			wantToUpstream: int64(len("hello world")),
			wantAtUp:       "hello world",
		},
		{
			name:    "deny",
			why:     "a refusing gate ends the relay with its error and upstream gets none of the held bytes",
			verdict: errRefused,
			wantErr: errRefused,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			worker, a := tcpPair(t)
			b, upstream := tcpPair(t)
			// A server-first protocol: the server speaks before the
			// worker; its bytes must pass while the gate waits.
			if _, err := upstream.Write([]byte("banner\n")); err != nil {
				t.Fatal(err)
			}
			gateSaw := make(chan string, 1)
			gate := func(c net.Conn) ([]byte, Filter, error) {
				if err := WaitReadable(c, time.Time{}); err != nil {
					return nil, nil, err
				}
				buf := make([]byte, 5)
				n, err := io.ReadFull(c, buf)
				gateSaw <- string(buf[:n])
				if err != nil {
					return nil, nil, err
				}
				return buf[:n], nil, tc.verdict
			}
			done := make(chan Result, 1)
			go func() { done <- CopyWith(context.Background(), a, b, Options{Idle: time.Minute, Gate: gate}) }()
			banner := make([]byte, 7)
			worker.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(worker, banner); err != nil || string(banner) != "banner\n" {
				t.Fatalf("%s: worker read %q, %v while the gate held its side", tc.why, banner, err)
			}
			worker.Write([]byte("hello"))
			if got := <-gateSaw; got != "hello" {
				t.Fatalf("gate saw %q, want hello", got)
			}
			if tc.verdict == nil {
				worker.Write([]byte(" world"))
			}
			worker.CloseWrite()
			upstream.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, _ := io.ReadAll(upstream)
			if string(got) != tc.wantAtUp {
				t.Fatalf("%s: upstream got %q, want %q", tc.why, got, tc.wantAtUp)
			}
			upstream.Close()
			r := wait(t, done)
			if r.ToUpstream != tc.wantToUpstream || !errors.Is(r.Err, tc.wantErr) && (tc.wantErr != nil || r.Err != nil) {
				t.Fatalf("%s: result %+v, want ToUpstream %d err %v", tc.why, r, tc.wantToUpstream, tc.wantErr)
			}
			if r.ToWorker != int64(len("banner\n")) {
				t.Fatalf("%s: ToWorker %d, want the banner's 7 bytes", tc.why, r.ToWorker)
			}
		})
	}
}

func TestWaitReadable(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		// An idle connection: WaitReadable ends at the deadline as a
		// timeout, which the relay treats like a Read timeout.
		c, _ := tcpPair(t)
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if err := WaitReadable(c, time.Time{}); !isTimeout(err) {
			t.Fatalf("idle connection: %v, want a timeout", err)
		}
	})
	t.Run("data-not-consumed", func(t *testing.T) {
		// Data waiting: WaitReadable returns without reading it.
		c, s := tcpPair(t)
		s.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := WaitReadable(c, time.Time{}); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2)
		if n, err := c.Read(b); n != 1 || b[0] != 'x' || err != nil {
			t.Fatalf("read after WaitReadable: %d %q %v, want the byte still there", n, b[:n], err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		// A reset is consumed by the peek; WaitReadable must report it,
		// or the Read after it would see a clean EOF.
		c, s := tcpPair(t)
		s.SetLinger(0)
		s.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		err := WaitReadable(c, time.Time{})
		if err == nil || isTimeout(err) || !strings.Contains(err.Error(), "reset") {
			t.Fatalf("reset connection: %v, want the reset", err)
		}
	})
	t.Run("eof", func(t *testing.T) {
		// The peer's FIN with nothing left to read is io.EOF, so a
		// relay at its end takes no buffer.
		c, s := tcpPair(t)
		s.CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := WaitReadable(c, time.Time{}); err != io.EOF {
			t.Fatalf("finished peer: %v, want io.EOF", err)
		}
	})
	t.Run("pipe", func(t *testing.T) {
		// No poller to ask: WaitReadable returns at once.
		a, _ := net.Pipe()
		if err := WaitReadable(a, time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
}

// notifyConn is a TCP connection that is a ReadableNotifier (as the
// gateway's worker side is), counting how worker → upstream was
// started.
type notifyConn struct {
	*net.TCPConn
	notified, stopped atomic.Int32
}

func (c *notifyConn) NotifyReadable(f func()) func() bool {
	var state atomic.Int32 // 0 waiting, 1 fired, 2 stopped
	cancel := make(chan struct{})
	go func() {
		for {
			select {
			case <-cancel:
				return
			default:
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			err := WaitReadable(c.TCPConn, time.Time{})
			c.SetReadDeadline(time.Time{})
			if isTimeout(err) {
				continue
			}
			if state.CompareAndSwap(0, 1) {
				c.notified.Add(1)
				f()
			}
			return
		}
	}()
	return func() bool {
		if state.CompareAndSwap(0, 2) {
			close(cancel)
			c.stopped.Add(1)
			return true
		}
		return false
	}
}

func TestCopyReadableNotifier(t *testing.T) {
	t.Run("worker-first", func(t *testing.T) {
		// The worker speaks: the notification starts worker → upstream.
		worker, a := tcpPair(t)
		b, upstream := tcpPair(t)
		na := &notifyConn{TCPConn: a}
		done := make(chan Result, 1)
		go func() { done <- Copy(context.Background(), na, b, time.Minute) }()
		worker.Write([]byte("ping"))
		worker.CloseWrite()
		upstream.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(upstream); string(got) != "ping" {
			t.Fatalf("upstream got %q, want ping", got)
		}
		upstream.Write([]byte("pong"))
		upstream.Close()
		worker.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(worker); string(got) != "pong" {
			t.Fatalf("worker got %q, want pong", got)
		}
		r := wait(t, done)
		if r.Err != nil || r.ToUpstream != 4 || r.ToWorker != 4 || na.notified.Load() != 1 {
			t.Fatalf("result %+v notified %d; want a clean 4/4 relay started by the notification", r, na.notified.Load())
		}
	})
	t.Run("server-finishes-first", func(t *testing.T) {
		// The server answers and finishes before the worker says
		// anything: the caller's goroutine takes over worker → upstream, and the
		// worker's late bytes still arrive.
		worker, a := tcpPair(t)
		b, upstream := tcpPair(t)
		na := &notifyConn{TCPConn: a}
		done := make(chan Result, 1)
		go func() { done <- Copy(context.Background(), na, b, time.Minute) }()
		upstream.Write([]byte("bye"))
		upstream.CloseWrite()
		worker.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(worker); string(got) != "bye" {
			t.Fatalf("worker got %q, want bye", got)
		}
		deadline := time.Now().Add(5 * time.Second)
		for na.stopped.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if na.stopped.Load() != 1 {
			t.Fatal("the notification was not stopped after upstream → worker ended")
		}
		worker.Write([]byte("late"))
		worker.CloseWrite()
		upstream.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(upstream); string(got) != "late" {
			t.Fatalf("upstream got %q, want the worker's late bytes", got)
		}
		r := wait(t, done)
		if r.Err != nil || r.ToUpstream != 4 || r.ToWorker != 3 {
			t.Fatalf("result %+v; want a clean 4/3 relay", r)
		}
	})
}

func TestCopyWithGoMovesCopyingOnceDataFlows(t *testing.T) {
	// Options.Go takes over upstream → worker copying only when upstream
	// has data: a relay that never moves a byte never asks for a
	// goroutine.
	cases := []struct {
		name    string
		why     string
		serve   bool
		wantGos int32
	}{
		{"data", "upstream answers: the copying moves once", true, 1},
		{"silent", "upstream says nothing until the relay idles out: no move", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			worker, a := tcpPair(t)
			b, upstream := tcpPair(t)
			var gos atomic.Int32
			spawn := func(f func()) { gos.Add(1); go f() }
			done := make(chan Result, 1)
			go func() {
				done <- CopyWith(context.Background(), a, b, Options{Idle: 200 * time.Millisecond, Go: spawn})
			}()
			if tc.serve {
				upstream.Write([]byte("answer"))
				upstream.CloseWrite()
				worker.SetReadDeadline(time.Now().Add(5 * time.Second))
				if got, _ := io.ReadAll(worker); string(got) != "answer" {
					t.Fatalf("%s: worker got %q", tc.why, got)
				}
				worker.Close()
			}
			r := wait(t, done)
			if gos.Load() != tc.wantGos {
				t.Fatalf("%s: Go called %d times, want %d (result %+v)", tc.why, gos.Load(), tc.wantGos, r)
			}
			if tc.serve && r.ToWorker != 6 {
				t.Fatalf("%s: ToWorker %d, want 6", tc.why, r.ToWorker)
			}
			if !tc.serve && !errors.Is(r.Err, ErrIdle) {
				t.Fatalf("%s: err %v, want the idle end", tc.why, r.Err)
			}
		})
	}
}

func TestIdleDirectionTakesNoBuffer(t *testing.T) {
	// A direction takes its buffer only once its source has data: a
	// relay where nothing moves takes none, one where only upstream speaks
	// takes one (upstream → worker's), one where both speak takes two.
	cases := []struct {
		name         string
		why          string
		workerSends  bool
		upstreamSend bool
		want         int64
	}{
		{"silent", "nothing moves: no buffer at all", false, false, 0},
		{"upstream-only", "only upstream → worker moves: its buffer only", false, true, 1},
		{"both", "both directions move: a buffer each", true, true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			worker, a := tcpPair(t)
			b, upstream := tcpPair(t)
			var taken atomic.Int64
			opts := Options{Idle: 150 * time.Millisecond, bufferTaken: func() { taken.Add(1) }}
			done := make(chan Result, 1)
			go func() { done <- CopyWith(context.Background(), a, b, opts) }()
			if tc.upstreamSend {
				upstream.Write([]byte("x"))
			}
			if tc.workerSends {
				worker.Write([]byte("y"))
			}
			r := wait(t, done)
			if !errors.Is(r.Err, ErrIdle) {
				t.Fatalf("%s: result %+v, want the idle end", tc.why, r)
			}
			if got := taken.Load(); got != tc.want {
				t.Fatalf("%s: %d buffers taken, want %d", tc.why, got, tc.want)
			}
		})
	}
}

// lineFilter forwards complete lines, keeps a partial one, refuses a line
// "bad" and, at the end, a partial line.
type lineFilter struct{ ended chan string }

func (f *lineFilter) Next(b []byte) (int, error) {
	n := 0
	for {
		k := bytes.IndexByte(b[n:], '\n')
		if k < 0 {
			return n, nil
		}
		if string(b[n:n+k]) == "bad" {
			return 0, errLineRefused
		}
		n += k + 1
	}
}

func (f *lineFilter) End(kept []byte) error {
	f.ended <- string(kept)
	return errLineRefused
}

var errLineRefused = errors.New("line refused")

func TestCopyWithFilter(t *testing.T) {
	cases := []struct {
		name, why string
		writes    []string
		wantUp    string
		wantEnd   string // what End was given, "" if not called
	}{
		{"lines", "complete lines pass as they come; a partial one waits for its end",
			[]string{"a\nb", "c\n", "d\n"}, "a\nbc\nd\n", ""},
		{"refused", "a refused line and what follows it in the read never reach upstream",
			[]string{"a\n", "b\nbad\nc\n"}, "a\n", ""},
		{"cut short", "a partial line at the worker's end goes to End, not upstream",
			[]string{"a\n", "par"}, "a\n", "par"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			worker, a := tcpPair(t)
			b, upstream := tcpPair(t)
			f := &lineFilter{ended: make(chan string, 1)}
			gate := func(c net.Conn) ([]byte, Filter, error) {
				if err := WaitReadable(c, time.Time{}); err != nil {
					return nil, nil, err
				}
				buf := make([]byte, 1)
				n, err := c.Read(buf)
				return buf[:n], f, err
			}
			done := make(chan Result, 1)
			go func() { done <- CopyWith(context.Background(), a, b, Options{Idle: time.Minute, Gate: gate}) }()
			for _, w := range tc.writes {
				worker.Write([]byte(w))
				time.Sleep(20 * time.Millisecond)
			}
			worker.CloseWrite()
			upstream.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, _ := io.ReadAll(upstream)
			if string(got) != tc.wantUp {
				t.Fatalf("%s: upstream got %q, want %q", tc.why, got, tc.wantUp)
			}
			upstream.Close()
			r := wait(t, done)
			select {
			case e := <-f.ended:
				if e != tc.wantEnd {
					t.Fatalf("%s: End got %q, want %q", tc.why, e, tc.wantEnd)
				}
			default:
				if tc.wantEnd != "" {
					t.Fatalf("%s: End not called", tc.why)
				}
			}
			refused := tc.name != "lines"
			if refused != errors.Is(r.Err, errLineRefused) || r.ToUpstream != int64(len(tc.wantUp)) {
				t.Fatalf("%s: result %+v", tc.why, r)
			}
		})
	}
}

// A stream whose reads fill the small buffer moves to a bulk buffer while
// one is free, gives it back when the relay ends, and copies the same
// bytes either way; with every bulk buffer taken it keeps its small one.
// The worker's side is a net.Pipe, whose reads fill any buffer while the
// writer has more: the first read is a full one, whatever the scheduling.
func TestCopyBulkBuffers(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	for _, full := range []bool{false, true} {
		held := int32(0)
		if full {
			held = MaxBulkBuffers
		}
		bulkInUse.Add(held)
		worker, a := net.Pipe()
		b, upstream := tcpPair(t)
		// Small socket buffers, so that the kernel cannot take the
		// whole payload and let the relay finish before it is looked at.
		b.SetWriteBuffer(64 << 10)
		upstream.SetReadBuffer(64 << 10)
		done := make(chan Result, 1)
		go func() { done <- Copy(context.Background(), a, b, time.Minute) }()
		go func() {
			worker.Write(payload)
			worker.Close()
		}()
		// A quarter in, the relay is mid-copy: it has made its first,
		// full read and is blocked writing to the small socket buffers
		// what the pipe's writer still has, so whatever it took it holds
		// now.
		got := make([]byte, len(payload)/4, len(payload))
		if _, err := io.ReadFull(upstream, got); err != nil {
			t.Fatalf("full=%v: %v", full, err)
		}
		during := bulkInUse.Load() - held
		rest, err := io.ReadAll(upstream)
		got = append(got, rest...)
		upstream.CloseWrite()
		r := wait(t, done)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("full=%v: read %d bytes, %v, result %+v", full, len(got), err, r)
		}
		if after := bulkInUse.Load() - held; after != 0 {
			t.Errorf("full=%v: %d bulk buffers still in use after the relay ended", full, after)
		}
		if full && during != 0 {
			t.Errorf("bulk buffers all taken, yet the relay took %d more", during)
		}
		if !full && during != 1 {
			t.Errorf("a 4 MiB copy in one direction held %d bulk buffers mid-copy, want 1", during)
		}
		bulkInUse.Add(-held)
	}
}

// passFilter forwards everything at once: the cost of the filtered path
// itself (a TLS flow's TLSStream, a plain HTTP flow's HTTPStream).
type passFilter struct{}

func (passFilter) Next(b []byte) (int, error) { return len(b), nil }
func (passFilter) End([]byte) error           { return nil }

// BenchmarkCopyFiltered is BenchmarkCopy through a Filter that passes
// every byte: the worker → upstream path of every HTTP and TLS flow.
func BenchmarkCopyFiltered(b *testing.B) {
	gate := func(net.Conn) ([]byte, Filter, error) { return nil, passFilter{}, nil }
	benchCopy(b, Options{Idle: time.Minute, Gate: gate})
}
