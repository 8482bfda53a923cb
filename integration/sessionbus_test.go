//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsgate/nsgate/lab/internet"
)

// TestAllowUnixHidesSessionBus: with --allow-unix the worker may connect
// to the unix sockets it sees, but never to the caller's session bus, from
// which `systemd --user` or D-Bus activation would start any command
// outside every nsgate layer. /run/user/UID is private anyway; this is the
// bus anywhere else: in an $XDG_RUNTIME_DIR that is not /run/user/UID (the
// standard $XDG_RUNTIME_DIR/bus), and at whatever path
// DBUS_SESSION_BUS_ADDRESS names. A real dbus-daemon answers behind a
// counting relay at the bus path; the worker runs dbus-send with the
// caller's environment.
func TestAllowUnixHidesSessionBus(t *testing.T) {
	daemon, err := exec.LookPath("dbus-daemon")
	need(t, "dbus-daemon (Debian package dbus-daemon)", err)
	send, err := exec.LookPath("dbus-send")
	need(t, "dbus-send (Debian package dbus-bin)", err)
	forEachMode(t, func(t *testing.T, m mode) {
		for _, tc := range []struct {
			name   string
			xdg    bool // the bus is $XDG_RUNTIME_DIR/bus
			open   bool // the runtime directory has mode 0755, not 0700
			noAddr bool // no DBUS_SESSION_BUS_ADDRESS: clients try $XDG_RUNTIME_DIR/bus
		}{
			{name: "XDG_RUNTIME_DIR outside /run/user", xdg: true},
			{name: "DBUS_SESSION_BUS_ADDRESS alone"},
			{name: "XDG_RUNTIME_DIR of mode 0755 without DBUS_SESSION_BUS_ADDRESS", xdg: true, open: true, noAddr: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := workDir(t, m)
				startSessionBus(t, daemon, dir)
				// The bus's place: outside every directory the view
				// makes private (/tmp, /var/tmp, /dev/shm, /run/user,
				// $HOME), as a runtime directory is: owned by the
				// caller, mode 0700.
				rt, err := os.MkdirTemp("/run", "nsgate-it-rt-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(rt) })
				if m.uid >= 0 {
					if err := os.Chown(rt, m.uid, m.gid); err != nil {
						t.Fatal(err)
					}
				}
				os.Chmod(rt, 0o700)
				if tc.open {
					os.Chmod(rt, 0o755)
				}
				busPath := filepath.Join(rt, "bus")
				hits := relayUnix(t, busPath, filepath.Join(dir, "real.sock"))
				if m.uid >= 0 {
					os.Chown(busPath, m.uid, m.gid)
				}

				audit := filepath.Join(dir, "audit.jsonl")
				cmd := nsgateCmd(m, "run", "--allow-unix", "--audit", audit, "--",
					send, "--session", "--print-reply", "--dest=org.freedesktop.DBus",
					"/org/freedesktop/DBus", "org.freedesktop.DBus.GetId")
				env := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=" + busPath}
				if tc.noAddr {
					env = []string{"DBUS_SESSION_BUS_ADDRESS="}
				}
				if tc.xdg {
					env = append(env, "XDG_RUNTIME_DIR="+rt)
				} else {
					env = append(env, "XDG_RUNTIME_DIR=")
				}
				cmd.Env = append(cmd.Env, env...)
				r := runBounded(t, cmd, 60*time.Second, "nsgate run dbus-send", nil)
				t.Logf("nsgate run --allow-unix dbus-send -> %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)

				if strings.Contains(r.stdout, "sender=org.freedesktop.DBus") {
					t.Errorf("the bus answered the worker's call: it talked to the session bus")
				}
				if r.code == 0 {
					t.Errorf("dbus-send succeeded in the worker, want a refusal")
				}
				if !strings.Contains(r.stderr, "Failed to open connection") {
					t.Errorf("dbus-send did not report a refused connection")
				}
				if n := hits.Load(); n != 0 {
					t.Errorf("the session bus saw %d connections from the worker, want 0", n)
				}
				// The refusal is the kernel's (no such socket in the
				// view): no audit record names it, but the run's log is
				// whole and says the worker ran with AF_UNIX allowed.
				recs := readAudit(t, audit)
				if len(recs) == 0 || recs[0].str("event") != "start" {
					t.Fatalf("audit log has no start record: %v", recs)
				}
			})
		}
	})
}

// startSessionBus starts a dbus-daemon of the session type listening at
// dir/real.sock (anonymous authentication, so that the worker's uid, as
// the relay passes it on, does not matter) and waits until it listens.
func startSessionBus(t *testing.T, daemon, dir string) {
	t.Helper()
	conf := filepath.Join(dir, "session.conf")
	writeFile(t, dir, "session.conf", fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=%s</listen>
  <auth>ANONYMOUS</auth>
  <allow_anonymous/>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`, filepath.Join(dir, "real.sock")))
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dbus-daemon: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		io.Copy(io.Discard, out)
	}()
	var addr string
	select {
	case addr = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("dbus-daemon printed no address")
	}
	if !strings.Contains(addr, "guid=") {
		t.Fatalf("dbus-daemon printed %q, not its address", addr)
	}
}

// relayUnix listens at path and relays each connection to the socket at
// to, counting them.
func relayUnix(t *testing.T, path, to string) *atomic.Int64 {
	t.Helper()
	var hits atomic.Int64
	ln, err := internet.ListenUnixCounting(path, &hits, func(c net.Conn) {
		u, err := net.Dial("unix", to)
		if err != nil {
			return
		}
		defer u.Close()
		go io.Copy(u, c)
		io.Copy(c, u)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &hits
}

// TestAllowUnixHidesSSHAgent: the same for the caller's SSH agent, with
// which the worker would sign as the caller (log in to any server the
// caller's keys open, through whatever flow the policy allows). Its socket
// usually lies in /tmp or $XDG_RUNTIME_DIR, both private; here it lies
// where SSH_AUTH_SOCK alone names it.
func TestAllowUnixHidesSSHAgent(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir, err := os.MkdirTemp("/run", "nsgate-it-agent-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o755)
		sock := filepath.Join(dir, "agent.sock")
		hits := relayUnix(t, sock, filepath.Join(dir, "nowhere"))
		cmd := nsgateCmd(m, "run", "--allow-unix", "--", nsgateBin, "__guardprobe", "unix", sock)
		cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
		r := runBounded(t, cmd, 60*time.Second, "nsgate run __guardprobe unix", nil)
		t.Logf("nsgate run --allow-unix __guardprobe unix %s -> %d\nstdout: %s\nstderr: %s", sock, r.code, r.stdout, r.stderr)
		if got := strings.TrimSpace(r.stdout); !strings.HasPrefix(got, "connect: ") {
			t.Errorf("the worker's connect to the SSH agent: %q, want a refusal", got)
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the SSH agent's socket saw %d connections from the worker, want 0", n)
		}
	})
}
