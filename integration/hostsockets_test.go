//go:build integration

package integration

import (
	"bufio"
	"fmt"
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

// TestHostDaemonSocketsHidden: the host's daemon sockets through which a
// worker would have something outside its box run a command or write into
// the host's logs are hidden from it, with --allow-unix (stream sockets:
// the container engines, whose API starts a privileged container; the
// system bus and systemd's private socket, through which systemd runs any
// command for uid 0) and without it (datagram sockets, which a
// socketpair(2) socket reaches by sendto before Landlock ABI 9:
// journald's, and systemd's notify socket).
//
// Fake listeners that count what reaches them stand at the well-known
// paths, in a mount namespace of the test's own whose /run is a fresh
// tmpfs (the host's /run is left alone), and at the paths DOCKER_HOST,
// CONTAINER_HOST, CONTAINERD_ADDRESS, BUILDKIT_HOST and
// DBUS_SYSTEM_BUS_ADDRESS name. A socket in /run that nsgate has no reason
// to hide is the control: the worker must reach it, or the test proves
// nothing.
func TestHostDaemonSocketsHidden(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	need(t, "unshare (Debian package util-linux)", err)
	setpriv, err := exec.LookPath("setpriv")
	need(t, "setpriv (Debian package util-linux)", err)
	const (
		rt  = "/run/nsgate-it-rt"  // an XDG_RUNTIME_DIR open to others: left as the host has it
		eng = "/run/nsgate-it-eng" // where the environment variables point
	)
	stream := []string{
		"/run/docker.sock",
		"/var/run/docker.sock", // the same socket, by the name clients use
		"/run/podman/podman.sock",
		"/run/containerd/containerd.sock",
		"/run/containerd/containerd.sock.ttrpc",
		"/run/buildkit/buildkitd.sock",
		"/run/crio/crio.sock",
		"/run/dbus/system_bus_socket",
		"/var/run/dbus/system_bus_socket",
		"/run/systemd/private",
		rt + "/docker.sock",
		rt + "/podman/podman.sock",
		rt + "/containerd/containerd.sock",
		rt + "/buildkit/buildkitd.sock",
		eng + "/docker-host.sock",
		eng + "/container-host.sock",
		eng + "/containerd-address.sock",
		eng + "/buildkit-host.sock",
		eng + "/system-bus.sock",
	}
	dgram := []string{
		"/run/systemd/journal/socket",
		"/run/systemd/journal/dev-log",
		"/run/systemd/notify",
	}
	const (
		controlStream = "/run/nsgate-it-other/app.sock"
		controlDgram  = "/run/nsgate-it-other/app.dgram"
	)
	env := []string{
		"XDG_RUNTIME_DIR=" + rt,
		"DOCKER_HOST=unix://" + eng + "/docker-host.sock",
		"CONTAINER_HOST=unix://" + eng + "/container-host.sock",
		"CONTAINERD_ADDRESS=" + eng + "/containerd-address.sock",
		"BUILDKIT_HOST=unix://" + eng + "/buildkit-host.sock",
		"DBUS_SYSTEM_BUS_ADDRESS=unix:path=" + eng + "/system-bus.sock",
		"DBUS_SESSION_BUS_ADDRESS=",
		"HOME=/tmp",
	}
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		hits := map[string]*atomic.Int64{}
		var script strings.Builder
		script.WriteString("set -e\nmount -t tmpfs -o mode=0755 nsgate-it-run /run\n")
		fmt.Fprintf(&script, "mkdir -p -m 0755 %s %s\n", rt, eng)
		bind := func(at, src string) {
			fmt.Fprintf(&script, "mkdir -p %s\n: > %s\nmount --bind %s %s\n", filepath.Dir(at), at, src, at)
		}
		seen := map[string]string{} // canonical place → its listener
		place := func(p string) string { return strings.Replace(p, "/var/run/", "/run/", 1) }
		for i, p := range append(append([]string{}, stream...), controlStream) {
			if src, ok := seen[place(p)]; ok {
				hits[p] = hits[src]
				continue
			}
			src := filepath.Join(dir, fmt.Sprintf("s%d.sock", i))
			hits[p] = countStream(t, src)
			seen[place(p)] = p
			bind(place(p), src)
		}
		for i, p := range append(append([]string{}, dgram...), controlDgram) {
			src := filepath.Join(dir, fmt.Sprintf("d%d.sock", i))
			hits[p] = countDgram(t, src)
			bind(p, src)
		}
		script.WriteString("exec \"$@\"\n")

		run := func(args ...string) result {
			argv := []string{"-m", "--propagation", "private", "/bin/sh", "-c", script.String(), "sh"}
			if m.uid >= 0 {
				argv = append(argv, setpriv, fmt.Sprintf("--reuid=%d", m.uid), fmt.Sprintf("--regid=%d", m.gid), "--clear-groups")
			}
			argv = append(append(argv, nsgateBin), args...)
			cmd := exec.Command(unshare, argv...)
			cmd.Env = append(os.Environ(), env...)
			r := runBounded(t, cmd, 60*time.Second, "nsgate run __guardprobe", nil)
			t.Logf("nsgate %s -> %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
			if r.code != 0 {
				t.Fatalf("the probe run failed (exit %d)", r.code)
			}
			return r
		}
		outcome := func(r result, p string) string {
			for _, l := range strings.Split(r.stdout, "\n") {
				if rest, ok := strings.CutPrefix(l, p+" "); ok {
					return rest
				}
			}
			return "(no line)"
		}

		r := run(append([]string{"run", "--allow-unix", "--", nsgateBin, "__guardprobe", "unixeach"}, append(stream, controlStream)...)...)
		if got := outcome(r, controlStream); got != "ok" || !settled(hits[controlStream]) {
			t.Fatalf("the control socket %s: %q, %d connections; want ok (the worker must reach a socket nsgate does not hide)", controlStream, got, hits[controlStream].Load())
		}
		for _, p := range stream {
			if got := outcome(r, p); got == "ok" || got == "(no line)" {
				t.Errorf("with --allow-unix the worker connected to %s: %q, want a refusal", p, got)
			}
		}

		r = run(append([]string{"run", "--", nsgateBin, "__guardprobe", "dgram"}, append(dgram, controlDgram)...)...)
		for _, p := range dgram {
			if got := outcome(r, p); got == "ok" || got == "(no line)" {
				t.Errorf("without --allow-unix the worker sent a datagram to %s: %q, want a refusal", p, got)
			}
		}
		// Before Landlock ABI 9 the control datagram passes (the residual
		// risk that hiding the well-known sockets answers); from ABI 9 it
		// is refused. Either way the listener agrees with the worker.
		if got := outcome(r, controlDgram); (got == "ok") != settled(hits[controlDgram]) {
			t.Errorf("the control datagram socket: worker says %q, listener saw %d", got, hits[controlDgram].Load())
		}

		for _, p := range append(append([]string{}, stream...), dgram...) {
			if n := hits[p].Load(); n != 0 {
				t.Errorf("%s saw %d connections or datagrams from the worker, want 0", p, n)
			}
		}
	})
}

// settled reports whether n counts something, waiting a little for the
// listener to take what the kernel has queued for it already.
func settled(n *atomic.Int64) bool {
	for i := 0; i < 50 && n.Load() == 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return n.Load() > 0
}

// countStream listens on a unix stream socket at path (open to everyone)
// and counts the connections it accepts.
func countStream(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	ln, err := internet.ListenUnixCounting(path, &n, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &n
}

// countDgram binds a unix datagram socket at path (open to everyone) and
// counts the datagrams it receives.
func countDgram(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	os.Chmod(path, 0o777)
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFromUnix(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return &n
}

// TestHiddenSocketRestart: a daemon that makes its socket again while the
// worker runs (a restart: unlink, bind) must not reappear in the worker's
// view. The kernel detaches every mount on a file that is unlinked, in
// every mount namespace, so a cover over the socket alone goes with the
// old socket. Here DOCKER_HOST names a socket in a directory of its own;
// the worker tries it, the "daemon" restarts, the worker tries again.
func TestHiddenSocketRestart(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir, err := os.MkdirTemp("/run", "nsgate-it-eng-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o755)
		sock := filepath.Join(dir, "docker.sock")
		var hits atomic.Int64
		listen := func() net.Listener {
			os.Remove(sock)
			ln, err := internet.ListenUnixCounting(sock, &hits, nil)
			if err != nil {
				t.Fatal(err)
			}
			return ln
		}
		ln := listen()
		defer func() { ln.Close() }()

		cmd := nsgateCmd(m, "run", "--allow-unix", "--exec-allow", nsgateBin, "--", "/bin/sh", "-c",
			fmt.Sprintf("%s __guardprobe unix %s; read x; %s __guardprobe unix %s", nsgateBin, sock, nsgateBin, sock))
		cmd.Env = append(cmd.Env, "DOCKER_HOST=unix://"+sock)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
			}
		}()
		lines := make(chan string, 2)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		before, ok := <-lines
		if !ok {
			cmd.Wait()
			t.Fatalf("the worker printed nothing: %s", stderr.String())
		}
		// The restart.
		ln.Close()
		ln = listen()
		fmt.Fprintln(stdin, "go")
		after := <-lines
		cmd.Wait()
		t.Logf("before the restart: %q, after: %q\nstderr: %s", before, after, stderr.String())
		if before == "ok" {
			t.Errorf("the worker reached the engine socket before its restart")
		}
		if after == "ok" || after == "" {
			t.Errorf("after the engine made its socket again the worker's connect: %q, want a refusal", after)
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the engine socket saw %d connections from the worker, want 0", n)
		}
	})
}
