package netstack

import (
	"io"
	"net/netip"
	"testing"
)

// TestHostAlias: a flow to the plan's host alias (pasta's --map-guest-addr)
// is a flow to the host's loopback address: the policy decides it as
// 127.0.0.1, so the special-range guard refuses it unless a cidr rule
// opens that address, and only then is 127.0.0.1 dialled. The record keeps
// what the worker connected to.
func TestHostAlias(t *testing.T) {
	const alias = "169.254.1.2"
	withAlias := func(c *Config) { c.Network.HostAlias4 = netip.MustParseAddr(alias) }

	t.Run("refused", func(t *testing.T) {
		h := newHarness(t, withAlias) // testPolicy opens 0.0.0.0/0 on 9999, which never opens loopback
		for _, dst := range []string{alias + ":9999", alias + ":80"} {
			if c, err := h.dialTCP(dst); err == nil {
				c.Close()
				t.Fatalf("worker connected to the host alias %s", dst)
			}
			f, _ := h.sink.flow(t, dst)
			if f.Action != "deny" || f.Rule != "builtin:special-range" {
				t.Errorf("%s: record %+v, want a special-range denial (host loopback), not metadata", dst, f)
			}
		}
		if d := h.dialer.list(); len(d) != 0 {
			t.Fatalf("refused host-alias flows were dialed: %v", d)
		}
	})

	t.Run("allowed", func(t *testing.T) {
		h := newHarness(t, withAlias, withPolicy(t, "version: 1\nallow:\n  - cidr: 127.0.0.1/32\n    ports: [8080]\n"))
		h.dialer.route("tcp", "127.0.0.1:8080", tcpServer(t, "hello from the host\n"))
		c, err := h.dialTCP(alias + ":8080")
		if err != nil {
			t.Fatalf("dial the host alias: %v", err)
		}
		b := make([]byte, 20)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hello from the host\n" {
			t.Fatalf("greeting %q, %v", b, err)
		}
		c.Close()
		f, _ := h.sink.flow(t, alias+":8080")
		if f.Action != "allow" || f.Upstream != "127.0.0.1:8080" || f.Rule != "allow[0]" {
			t.Errorf("record %+v, want allow[0] with upstream 127.0.0.1:8080", f)
		}
	})
}
