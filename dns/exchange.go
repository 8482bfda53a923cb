package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Exchange is the default Config.Exchange: it sends msg to server
// ("ip:port") over UDP and returns the first reply carrying msg's ID,
// retrying over TCP when that reply is truncated. It blocks until a reply,
// an error, or ctx's end (DefaultTimeout when ctx has no deadline).
// msg is not retained; the reply is the caller's.
func Exchange(ctx context.Context, server string, msg []byte) ([]byte, error) {
	if len(msg) < headerLen {
		return nil, errors.New("query shorter than a dns header")
	}
	reply, err := exchangeUDP(ctx, server, msg)
	if err != nil {
		return nil, err
	}
	if reply[2]&(flagTC>>8) != 0 {
		return exchangeTCP(ctx, server, msg)
	}
	return reply, nil
}

// withDeadline makes c's I/O end when ctx does, or after DefaultTimeout
// when ctx has no deadline. The returned stop must be called.
func withDeadline(ctx context.Context, c net.Conn) (stop func() bool) {
	if _, ok := ctx.Deadline(); !ok {
		c.SetDeadline(time.Now().Add(DefaultTimeout))
	}
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}

// ioErr prefers ctx's error, which says why a deadline fired.
func ioErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	return fmt.Errorf("%s: %w", what, err)
}

func exchangeUDP(ctx context.Context, server string, msg []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil, fmt.Errorf("dial udp: %w", err)
	}
	defer c.Close()
	defer withDeadline(ctx, c)()
	if _, err := c.Write(msg); err != nil {
		return nil, ioErr(ctx, "send udp", err)
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, ioErr(ctx, "read udp", err)
		}
		// The socket is connected, so only the server's datagrams arrive;
		// stale replies to earlier queries are skipped by ID.
		if n >= headerLen && buf[0] == msg[0] && buf[1] == msg[1] && buf[2]&(flagQR>>8) != 0 {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

func exchangeTCP(ctx context.Context, server string, msg []byte) ([]byte, error) {
	if len(msg) > 0xffff {
		return nil, errors.New("query too long for tcp")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, fmt.Errorf("dial tcp: %w", err)
	}
	defer c.Close()
	defer withDeadline(ctx, c)()
	out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(msg)), uint16(len(msg)))
	if _, err := c.Write(append(out, msg...)); err != nil {
		return nil, ioErr(ctx, "send tcp", err)
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, ioErr(ctx, "read tcp", err)
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n < headerLen {
		return nil, errors.New("read tcp: reply shorter than a dns header")
	}
	reply := make([]byte, n)
	if _, err := io.ReadFull(c, reply); err != nil {
		return nil, ioErr(ctx, "read tcp", err)
	}
	return reply, nil
}
