//go:build linux

package relay

import (
	"bytes"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"
)

// TestSendSmallWaitsWhileFull: sendSmall's writes (RawSyscall) to a socket
// whose peer is not reading fill it, wait in the poller, and go on when
// the peer reads: every byte arrives, in order.
func TestSendSmallWaitsWhileFull(t *testing.T) {
	c, s := tcpPair(t)
	c.SetWriteBuffer(32 << 10)
	s.SetReadBuffer(32 << 10)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(want); off += rawIOMax {
			n, err := sendSmall(rc, c, want[off:off+rawIOMax])
			if err == nil && n != rawIOMax {
				err = errors.New("short write")
			}
			if err != nil {
				errc <- err
				return
			}
		}
		errc <- c.CloseWrite()
	}()
	time.Sleep(100 * time.Millisecond) // the socket fills meanwhile
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, not the %d written in order", len(got), len(want))
	}
}

// TestSendSmallPeerGone: a write to a connection its peer reset fails with
// the error Write would return (the process gets no SIGPIPE).
func TestSendSmallPeerGone(t *testing.T) {
	c, s := tcpPair(t)
	s.SetLinger(0)
	s.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := sendSmall(rc, c, []byte("after the reset"))
		if err != nil {
			if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("error %v, want EPIPE or ECONNRESET", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a reset connection kept succeeding")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRecvIntoEOF: recvInto returns what was sent, then io.EOF, as Read.
func TestRecvIntoEOF(t *testing.T) {
	c, s := tcpPair(t)
	rc, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond) // recvInto waits in the poller first
		c.Write([]byte("hello"))
		c.CloseWrite()
	}()
	buf := make([]byte, 64)
	var got []byte
	for {
		n, err := recvInto(s, rc, buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "hello" {
		t.Fatalf("got %q", got)
	}
}
