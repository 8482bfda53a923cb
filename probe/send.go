package probe

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// probeSend writes raw client bytes in separate writes and reports how the
// connection ended: "ok N bytes" with the server's first line after a
// clean end, "reset after N bytes" (exit 1) when it failed.
func probeSend(e env, addr string, parts []string) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Fprintf(e.stdout, "refused %s: %v\n", addr, err)
		return 1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	for i, p := range parts {
		b, err := strconv.Unquote(`"` + p + `"`)
		if err != nil {
			e.errorf("probe send: part %d: %v", i, err)
			return exitUsage
		}
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if _, err := io.WriteString(c, b); err != nil {
			fmt.Fprintf(e.stdout, "reset after 0 bytes: write %d: %v\n", i, err)
			return 1
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	got, err := io.ReadAll(c)
	first, _, _ := strings.Cut(string(got), "\n")
	if err != nil {
		fmt.Fprintf(e.stdout, "reset after %d bytes: %q: %v\n", len(got), strings.TrimSpace(first), err)
		return 1
	}
	fmt.Fprintf(e.stdout, "ok %d bytes: %q; %d responses\n", len(got), strings.TrimSpace(first), strings.Count(string(got), "HTTP/1.1 "))
	return 0
}
