//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/lab/attack"
)

// The worker's file system view: the host read-only but for --rw, private
// scratch directories and home, every writable place noexec, and nsgate's
// own files hidden. Each test checks what the worker saw and what the host
// holds afterwards.

// mkdirFor makes dir/name owned by the mode's user.
func mkdirFor(t *testing.T, m mode, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if m.uid >= 0 {
		if err := os.Chown(p, m.uid, m.gid); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// hostDir makes a directory that the mode's user may write by its
// permissions, outside the directories the worker's view replaces (a path
// below /tmp would land in the worker's private /tmp).
func hostDir(t *testing.T, m mode) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/lib", "nsgate-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	if m.uid >= 0 {
		if err := os.Chown(d, m.uid, m.gid); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// runWithHome runs nsgate with $HOME set to home.
func runWithHome(t *testing.T, m mode, home string, args ...string) result {
	t.Helper()
	cmd := nsgateCmd(m, args...)
	cmd.Env = append(cmd.Env, "HOME="+home)
	r := runBounded(t, cmd, 60*time.Second, "nsgate "+strings.Join(args, " "), nil)
	t.Logf("HOME=%s nsgate %s -> %d\nstdout: %s\nstderr: %s", home, strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func TestViewWritable(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		rw := mkdirFor(t, m, dir, "rw")
		home := mkdirFor(t, m, dir, "home")
		writeFile(t, home, ".host-profile", "the caller's own file\n")
		outside := filepath.Join(hostDir(t, m), "outside")
		script := strings.Join([]string{
			// the --rw directory is writable, and what is written there lands on the host
			`echo data > ` + rw + `/out.txt && echo rw-ok`,
			// the home is private and starts empty
			`for f in "$HOME"/* "$HOME"/.[!.]*; do [ -e "$f" ] && echo "home-has $f"; done`,
			`echo 'echo planted' > "$HOME"/.bashrc && echo home-write-ok`,
			// the rest of the host is read-only
			`(echo x > ` + outside + `) 2>/dev/null || echo outside-refused`,
			`(echo x > /etc/nsgate-view-test) 2>/dev/null || echo etc-refused`,
			`(: > ` + home + `/.host-profile) 2>/dev/null || echo home-path-refused`,
		}, "\n")
		r := runWithHome(t, m, home, "run", "--rw", rw, "--", "/bin/sh", "-c", script)
		if r.code != 0 {
			t.Fatalf("exit %d", r.code)
		}
		for _, want := range []string{"rw-ok", "home-write-ok", "outside-refused", "etc-refused"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("worker output lacks %q", want)
			}
		}
		if strings.Contains(r.stdout, "home-has") {
			t.Errorf("the worker's home was not empty: %q", r.stdout)
		}
		if b, err := os.ReadFile(filepath.Join(rw, "out.txt")); err != nil || string(b) != "data\n" {
			t.Errorf("--rw file on the host: %q, %v; want \"data\\n\"", b, err)
		}
		if _, err := os.Stat(filepath.Join(home, ".bashrc")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the worker's .bashrc reached the caller's real home (stat: %v)", err)
		}
		if b, _ := os.ReadFile(filepath.Join(home, ".host-profile")); string(b) != "the caller's own file\n" {
			t.Errorf("the caller's file in its home changed: %q", b)
		}
		if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a file outside --rw was created on the host (stat: %v)", err)
		}
		if _, err := os.Stat("/etc/nsgate-view-test"); !errors.Is(err, os.ErrNotExist) {
			os.Remove("/etc/nsgate-view-test")
			t.Errorf("a file was created in the host's /etc")
		}
	})
}

// TestViewHomeDir: --home gives a persistent, writable home.
func TestViewHomeDir(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		home := mkdirFor(t, m, dir, "home")
		keep := mkdirFor(t, m, dir, "keep")
		r := runWithHome(t, m, home, "run", "--home", keep, "--", "/bin/sh", "-c", `echo kept > "$HOME"/note && echo ok`)
		if r.code != 0 || !strings.Contains(r.stdout, "ok") {
			t.Fatalf("exit %d stdout %q", r.code, r.stdout)
		}
		if b, err := os.ReadFile(filepath.Join(keep, "note")); err != nil || string(b) != "kept\n" {
			t.Errorf("--home file on the host: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(home, "note")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the note reached $HOME's own path on the host (stat: %v)", err)
		}
	})
}

// TestViewNoExecWhereWritable: every place the worker can write refuses
// to run programs and to map libraries as code.
func TestViewNoExecWhereWritable(t *testing.T) {
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		libc = "/lib/aarch64-linux-gnu/libc.so.6"
	}
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		rw := mkdirFor(t, m, dir, "rw")
		home := mkdirFor(t, m, dir, "home")
		var script []string
		places := []string{"/tmp", "/var/tmp", "/dev/shm", "$HOME", rw}
		for i, p := range places {
			script = append(script,
				fmt.Sprintf(`cp /usr/bin/true %s/t%d && { %s/t%d && echo "ran-%d" || echo "refused-%d"; }`, p, i, p, i, i, i),
				fmt.Sprintf(`cp %s %s/l%d.so && LD_PRELOAD=%s/l%d.so /usr/bin/true 2>&1 | grep -q 'cannot be preloaded' && echo "preload-refused-%d"`, libc, p, i, p, i, i))
		}
		r := runWithHome(t, m, home, "run", "--rw", rw,
			"--exec-allow", "/usr/bin/cp", "--exec-allow", "/usr/bin/true", "--exec-allow", "/usr/bin/grep",
			"--", "/bin/sh", "-c", strings.Join(script, "\n"))
		for i, p := range places {
			if !strings.Contains(r.stdout, fmt.Sprintf("refused-%d", i)) || strings.Contains(r.stdout, fmt.Sprintf("ran-%d", i)) {
				t.Errorf("a program copied to %s was not refused", p)
			}
			if !strings.Contains(r.stdout, fmt.Sprintf("preload-refused-%d", i)) {
				t.Errorf("LD_PRELOAD of a library copied to %s was not refused", p)
			}
		}
	})
}

// TestViewHidesNsgateFiles: the policy, the audit log and its folder, the
// audit key, the pcap and the policy's filesystem.hide paths (also inside
// a --rw tree) cannot be read, written or removed by the worker, even when
// their folder is shown to it.
func TestViewHidesNsgateFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		// nsgate's files in folders of their own inside a folder the
		// worker is shown (--ro): the folders are hidden whole.
		own := mkdirFor(t, m, dir, "nsgate")
		logs := mkdirFor(t, m, dir, "logs")
		tree := mkdirFor(t, m, dir, "tree")
		secret := writeFile(t, tree, "secret.txt", "do not read\n")
		pol := writeFile(t, own, "policy.yaml", "version: 1\nfilesystem:\n  hide: ["+secret+"]\n")
		key := writeFile(t, own, "audit.key", "0123456789abcdef0123456789abcdef\n")
		log := filepath.Join(logs, "audit.jsonl")
		pcap := filepath.Join(own, "cap.pcap")
		for _, p := range []string{pol, key, secret} {
			os.Chmod(p, 0o600)
			if m.uid >= 0 {
				os.Chown(p, m.uid, m.gid)
			}
		}
		var script []string
		for i, p := range []string{pol, key, log, pcap, secret} {
			script = append(script,
				fmt.Sprintf(`if read -r line < %s; then echo "read-%d $line"; fi`, p, i),
				fmt.Sprintf(`(echo x >> %s) 2>/dev/null && echo "wrote-%d"`, p, i),
				fmt.Sprintf(`rm -f %s 2>/dev/null && [ ! -e %s ] && echo "removed-%d"`, p, p, i))
		}
		script = append(script,
			`for f in `+logs+`/* `+own+`/*; do [ -e "$f" ] && echo "listed $f"; done`,
			`echo made > `+tree+`/new.txt && echo tree-writable`,
			// The host replaces the policy and the key by rename while the
			// worker runs (an editor, a key rotation): a cover on the file
			// alone would be detached by the kernel, the folder's is not.
			`sleep 1`,
			`if read -r line < `+pol+`; then echo "read-replaced-policy $line"; fi`,
			`if read -r line < `+key+`; then echo "read-replaced-key $line"; fi`)
		time.AfterFunc(400*time.Millisecond, func() {
			for _, p := range []string{pol, key} {
				tmp := p + ".new"
				os.WriteFile(tmp, []byte("version: 1\n# replaced 0123456789abcdef\n"), 0o600)
				os.Rename(tmp, p)
			}
		})
		r := runNsgate(t, m, "run", "--policy", pol, "--audit", log, "--audit-key", key, "--pcap", pcap,
			"--ro", dir, "--rw", tree, "--exec-allow", "/usr/bin/rm", "--exec-allow", "/usr/bin/sleep",
			"--", "/bin/sh", "-c", strings.Join(script, "\n"))
		if r.code != 0 {
			t.Fatalf("exit %d", r.code)
		}
		for _, bad := range []string{"read-", "wrote-", "removed-", "listed "} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("the worker got at a hidden file: %q", r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "tree-writable") {
			t.Errorf("the --rw tree around the hidden file was not writable: %q", r.stdout)
		}
		if b, _ := os.ReadFile(secret); string(b) != "do not read\n" {
			t.Errorf("the hidden file changed on the host: %q", b)
		}
		verify := runNsgate(t, mode{name: "root", uid: -1, gid: -1}, "audit", "verify", "--key", writeFile(t, dir, "key.copy", "0123456789abcdef0123456789abcdef\n"), log)
		if verify.code != 0 {
			t.Errorf("the audit log does not verify after the run: %s %s", verify.stdout, verify.stderr)
		}
	})
}

// TestViewRefusesNsgateFilesInWritable: nsgate's own files in a path the
// worker may write are refused at start, with the fix named.
func TestViewRefusesNsgateFilesInWritable(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		pol := writeFile(t, dir, "policy.yaml", "version: 1\n")
		r := runNsgate(t, m, "run", "--policy", pol, "--ro", dir, "--", "true")
		if r.code != 0 || !strings.Contains(r.stderr, "folder of their own") {
			t.Errorf("exit %d stderr %q; want 0 and a warning: the policy's folder is shown to the worker", r.code, r.stderr)
		}
		r = runNsgate(t, m, "run", "--audit", filepath.Join(dir, "audit.jsonl"), "--rw", dir, "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, "which the worker may write") {
			t.Errorf("exit %d stderr %q; want 125 naming the writable path", r.code, r.stderr)
		}
		ran := filepath.Join(dir, "bin")
		os.Mkdir(ran, 0o755)
		copyExec(t, "/usr/bin/true", filepath.Join(ran, "tool"))
		r = runNsgate(t, m, "run", "--rw", ran, "--", filepath.Join(ran, "tool"))
		if r.code != 125 || !strings.Contains(r.stderr, "could replace the program") {
			t.Errorf("exit %d stderr %q; want 125: a program the worker may run lies in --rw", r.code, r.stderr)
		}
	})
}

// TestRunPolicyNotAFile: a policy that is not a regular file fails at
// once with one line, never a hang.
func TestRunPolicyNotAFile(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := workDir(t, m)
		fifo := filepath.Join(dir, "policy.fifo")
		if err := syscall.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/dev/zero", fifo} {
			r := runNsgate(t, m, "run", "--policy", p, "--", "true")
			if r.code != 125 || !strings.Contains(r.stderr, "not a regular file") || bytes.Count([]byte(r.stderr), []byte("\n")) != 1 {
				t.Errorf("--policy %s: exit %d stderr %q; want 125 and one line saying it is not a regular file", p, r.code, r.stderr)
			}
		}
	})
}

// TestViewEachLayerHolds: the host is read-only to the worker twice, by
// the read-only remount and by Landlock's write rules. With either one
// switched off the other still refuses a write to the host; with both off
// the write goes through, which shows the check can fail.
func TestViewEachLayerHolds(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		target := hostDir(t, m)
		for _, tc := range []struct {
			broken string
			wrote  bool
		}{
			{"fs-readonly", false},
			{"fs-landlock", false},
			{"fs-readonly,fs-landlock", true},
		} {
			t.Run(tc.broken, func(t *testing.T) {
				file := filepath.Join(target, strings.ReplaceAll(tc.broken, ",", "+"))
				r := runNsgate(t, m, "run", "--unsafe-break", tc.broken, "--", "/bin/sh", "-c", "echo x > "+file+" && echo wrote")
				_, statErr := os.Stat(file)
				if got := statErr == nil; got != tc.wrote || strings.Contains(r.stdout, "wrote") != tc.wrote {
					t.Errorf("with %s off: the write reached the host: %v (stdout %q); want %v", tc.broken, got, r.stdout, tc.wrote)
				}
			})
		}
	})
}

// TestInitHoldsNoCapabilities: the worker runs as init's uid and can read
// init's /proc entries (even its memory), so no thread of init may keep a
// capability the worker lacks once the worker runs. The worker itself,
// forked from init's one thread that empties its bounding set, has an
// empty bounding set too (an exec as uid 0 could regain nothing).
func TestInitHoldsNoCapabilities(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := runNsgate(t, m, "run", "--", "/bin/sh", "-c",
			`for f in /proc/1/task/*/status /proc/self/status; do while read -r k v; do case $k in CapPrm:|CapEff:|CapInh:|CapAmb:) echo "$f $k $v";; CapBnd:) [ "$f" = /proc/self/status ] && echo "$f $k $v";; esac; done < "$f"; done`)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) < 4 {
			t.Fatalf("exit %d, %d lines; want the capability sets of every init thread", r.code, len(lines))
		}
		if !strings.Contains(r.stdout, "/proc/self/status CapBnd: 0000000000000000") {
			t.Errorf("the worker's bounding set is not empty:\n%s", r.stdout)
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, " 0000000000000000") {
				t.Errorf("an init thread holds capabilities: %s", l)
			}
		}
	})
}

// TestInitEnvironment: init runs with one Go processor (GOMAXPROCS=1 in
// its environment: a cheaper start, fewer threads), and the worker gets
// nsgate's environment as it was, GOMAXPROCS included.
func TestInitEnvironment(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		cat, err := exec.LookPath("cat")
		if err != nil {
			t.Fatal(err)
		}
		// The worker reports what it sees, then waits for a line on its
		// standard input while the host reads init's environment.
		cmd := nsgateCmd(m, "run", "--exec-allow", cat, "--", "/bin/sh", "-c",
			`echo "worker GOMAXPROCS=${GOMAXPROCS-unset}"; if cat /proc/1/environ >/dev/null 2>&1; then echo "init environ readable"; else echo "init environ refused"; fi; echo ready; read -r line`)
		cmd.Env = append(cmd.Env, "GOMAXPROCS=3")
		h := startHeld(t, cmd)
		// nsgate's one child is init.
		initEnv, err := childEnviron(cmd.Process.Pid)
		h.release()
		said := h.said
		t.Logf("worker said %q; stderr: %s", said, h.stderr.String())
		if err != nil {
			t.Fatalf("init's environment from the host: %v", err)
		}
		if !slices.Contains(said, "worker GOMAXPROCS=3") {
			t.Errorf("worker said %q; want it to see GOMAXPROCS=3 as nsgate had it", said)
		}
		if !slices.Contains(said, "init environ refused") {
			t.Errorf("worker said %q; want init's environment (the sandbox spec: paths of nsgate's files) unreadable from the worker", said)
		}
		if !slices.Contains(initEnv, "GOMAXPROCS=1") || slices.Contains(initEnv, "GOMAXPROCS=3") {
			t.Errorf("init's environment %q; want GOMAXPROCS=1 alone", initEnv)
		}
	})
}

// TestInitMemoryRace: the worker's very first instructions try to open
// init's memory read-write (/proc/1/mem), tens of thousands of times. Init
// shares the worker's uid; while it is dumpable the kernel lets the worker
// in, and with init's memory a worker rewrites PID 1 of the sandbox (the
// attack review cleared init's parent-death signal that way and kept a
// worker running after nsgate was killed with SIGKILL). Init used to
// become not dumpable only after the worker's exec: about every second run
// won. Each of 20 runs must be refused.
func TestInitMemoryRace(t *testing.T) {
	prog, ok := attack.InitRaceProgram()
	var archErr error
	if !ok {
		archErr = errors.New("the racer is x86-64 code")
	}
	need(t, "an amd64 machine", archErr)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := hostDir(t, m)
		racer := filepath.Join(dir, "racer")
		if err := os.WriteFile(racer, prog, 0o755); err != nil {
			t.Fatal(err)
		}
		won := 0
		for i := 0; i < 20; i++ {
			r := runBounded(t, nsgateCmd(m, "run", "--quiet", "--", racer), 60*time.Second, "nsgate run racer", nil)
			switch r.code {
			case attack.InitRaceRefused:
			case attack.InitRaceWon:
				won++
			default:
				t.Fatalf("run %d: nsgate run exited %d, want %d (every open refused) or %d (won); stderr: %s", i, r.code, attack.InitRaceRefused, attack.InitRaceWon, r.stderr)
			}
		}
		if won > 0 {
			t.Errorf("the worker opened init's memory read-write in %d of 20 runs; want none (init must not be dumpable before the worker runs)", won)
		}
	})
}

// TestInitIgnoresFaultSignals: the worker may signal init (same uid), and
// a fault signal sent with kill(2) used to make init's Go runtime crash
// with a traceback of init's stacks on the shared standard error (the
// attack review), ending the sandbox. Init ignores them now. SIGSTKFLT
// (by number: dash's kill does not know its name) is one the Go runtime
// also crashes on; the first review's list missed it, and init's crash
// put its traceback on the worker's standard error and replaced the
// worker's exit status with the runtime's 2.
func TestInitIgnoresFaultSignals(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := runNsgate(t, m, "run", "--quiet", "--", "/bin/sh", "-c",
			fmt.Sprintf(`for s in SEGV BUS FPE ILL ABRT TRAP SYS %d; do kill -$s 1 || echo "kill $s failed"; done; sleep 0.3; echo alive`, int(syscall.SIGSTKFLT)))
		if r.code != 0 || strings.TrimSpace(r.stdout) != "alive" || strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "SIG") {
			t.Errorf("exit %d, stdout %q, stderr %q; want init to ignore the signals and the worker to go on", r.code, r.stdout, r.stderr)
		}
	})
}

// heldWorker is an `nsgate run` whose worker has said "ready" and now
// waits for a line on its standard input (its last command is
// `read -r line`), so the host can look while the worker runs.
type heldWorker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	said   []string // the worker's lines up to "ready"
	stderr *bytes.Buffer
}

// startHeld starts cmd and waits (60 s at most) for the worker's "ready"
// line; the test fails if it ends or hangs first.
func startHeld(t *testing.T, cmd *exec.Cmd) *heldWorker {
	t.Helper()
	h := &heldWorker{cmd: cmd, stderr: &bytes.Buffer{}}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.in = in
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the worker ended before it was ready: %q; stderr: %s", h.said, h.stderr.String())
			}
			if l == "ready" {
				return h
			}
			h.said = append(h.said, l)
		case <-time.After(60 * time.Second):
			t.Fatalf("the worker did not get ready: %q; stderr: %s", h.said, h.stderr.String())
		}
	}
}

// release lets the worker go on and waits for nsgate to exit.
func (h *heldWorker) release() error {
	h.in.Write([]byte("go\n"))
	return h.cmd.Wait()
}

// onlyChild is the process id of the one child process of nsgate's
// process pid (the sandbox's init).
func onlyChild(pid int) (string, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		return "", err
	}
	var kids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil {
			kids = append(kids, strings.Fields(string(b))...)
		}
	}
	if len(kids) != 1 {
		return "", fmt.Errorf("nsgate (pid %d) has children %v, want one", pid, kids)
	}
	return kids[0], nil
}

// childEnviron is the environment of the one child process of pid.
func childEnviron(pid int) ([]string, error) {
	kid, err := onlyChild(pid)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/" + kid + "/environ")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// TestRunWarnsOfAShellInterpreter: a command that is a #! script run by a
// shell brings that shell into the exec allowlist; nsgate says so at start
// (also with --quiet), naming the shell and the script.
func TestRunWarnsOfAShellInterpreter(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dir := hostDir(t, m)
		script := filepath.Join(dir, "wrapper")
		if err := os.WriteFile(script, []byte("#!/bin/sh\necho wrapped\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		sh, _ := filepath.EvalSymlinks("/bin/sh")
		r := runNsgate(t, m, "run", "--quiet", "--", script)
		want := "warning: " + script + " is a script run by the shell " + sh
		if r.code != 0 || !strings.Contains(r.stdout, "wrapped") || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d stdout %q stderr %q; want the script to run and %q", r.code, r.stdout, r.stderr, want)
		}
		// A shell asked for by name is no surprise: no warning.
		r = runNsgate(t, m, "run", "--quiet", "--", "/bin/sh", "-c", "echo plain")
		if strings.Contains(r.stderr, "warning:") {
			t.Errorf("sh as the command gave a warning: %q", r.stderr)
		}
	})
}

// TestViewPrivateDev: the worker's /dev holds only the usual devices,
// /dev/pts, /dev/shm and the fd links, and is read-only: no other device
// node of the host (a raw disk a root caller's worker could open) exists
// for it.
func TestViewPrivateDev(t *testing.T) {
	host, err := os.ReadDir("/dev")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true,
		"ptmx": true, "pts": true, "shm": true, "fd": true, "stdin": true, "stdout": true, "stderr": true}
	var others []string
	for _, e := range host {
		if !allowed[e.Name()] {
			others = append(others, e.Name())
		}
	}
	if len(others) == 0 {
		t.Fatal("the host's /dev has nothing beyond the private /dev's entries: the test would show nothing")
	}
	forEachMode(t, func(t *testing.T, m mode) {
		r := runNsgate(t, m, "run", "--", "/bin/sh", "-c",
			`for f in /dev/* /dev/.[!.]*; do [ -e "$f" ] || [ -L "$f" ] && echo "entry ${f#/dev/}"; done
echo x > /dev/null && echo null-writable
(: > /dev/planted) 2>/dev/null || echo dev-read-only`)
		if r.code != 0 || !strings.Contains(r.stdout, "null-writable") || !strings.Contains(r.stdout, "dev-read-only") {
			t.Fatalf("exit %d stdout %q; want /dev/null writable and /dev read-only", r.code, r.stdout)
		}
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if name, ok := strings.CutPrefix(l, "entry "); ok && !allowed[name] {
				t.Errorf("the worker's /dev has %q", name)
			}
		}
		// Its /dev/pts is its own: none of the host's terminals (the
		// caller's other sessions; here one this test opens) is there to
		// open.
		ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
			t.Fatal(err)
		}
		r = runNsgate(t, m, "run", "--", "/bin/sh", "-c", `for f in /dev/pts/*; do echo "pts ${f#/dev/pts/}"; done`)
		if strings.TrimSpace(r.stdout) != "pts ptmx" {
			t.Errorf("the worker's /dev/pts holds %q, want only ptmx", r.stdout)
		}
		t.Logf("host /dev entries the worker does not see: %d (%s ...)", len(others), others[0])
	})
}

// TestViewProcSysReadOnly: the kernel's global settings stay out of the
// worker's reach. A worker of a root caller is uid 0, and /proc/sys checks
// only the uid: without the read-only bind it could set
// kernel.core_pattern to run a program as root on the host.
func TestViewProcSysReadOnly(t *testing.T) {
	before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	forEachMode(t, func(t *testing.T, m mode) {
		r := runNsgate(t, m, "run", "--", "/bin/sh", "-c",
			`(echo '|/bin/false' > /proc/sys/kernel/core_pattern) 2>/dev/null && echo wrote-sysctl
(echo 0 > /proc/sys/kernel/randomize_va_space) 2>/dev/null && echo wrote-aslr
(echo h > /proc/sysrq-trigger) 2>/dev/null && echo wrote-sysrq
echo 100 > /proc/self/oom_score_adj && echo own-proc-writable`)
		after, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
		if string(after) != string(before) {
			os.WriteFile("/proc/sys/kernel/core_pattern", before, 0o644)
			t.Fatalf("the worker changed kernel.core_pattern to %q", after)
		}
		if strings.Contains(r.stdout, "wrote-") {
			t.Errorf("the worker wrote a global kernel setting: %q", r.stdout)
		}
		if !strings.Contains(r.stdout, "own-proc-writable") {
			t.Errorf("the worker's own /proc/self is not writable: %q", r.stdout)
		}
	})
}

// TestWorkerCannotSetID: a setuid or setgid file the worker left in a --rw
// tree would give its uid to anyone on the host who runs it afterwards
// (the nosuid of the worker's mount does not travel with the file).
func TestWorkerCannotSetID(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		rw := hostDir(t, m)
		r := runNsgate(t, m, "run", "--rw", rw, "--exec-allow", "/usr/bin/cp", "--exec-allow", "/usr/bin/chmod", "--", "/bin/sh", "-c",
			`cp /bin/sh `+rw+`/suid && echo copied
chmod 4755 `+rw+`/suid 2>/dev/null && echo setuid-set
chmod 2755 `+rw+`/suid 2>/dev/null && echo setgid-set
chmod 755 `+rw+`/suid && echo plain-chmod-ok`)
		if !strings.Contains(r.stdout, "copied") || !strings.Contains(r.stdout, "plain-chmod-ok") {
			t.Fatalf("exit %d stdout %q: the control did not work", r.code, r.stdout)
		}
		if strings.Contains(r.stdout, "-set") {
			t.Errorf("the worker set a set-id bit: %q", r.stdout)
		}
		st, err := os.Stat(filepath.Join(rw, "suid"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("the file on the host is %v", st.Mode())
		}
	})
}

// TestViewHidesStartGate: the start gate's slot files
// ($XDG_RUNTIME_DIR/nsgate/start-slot-N, worker/startgate.go) are
// nsgate's own. With XDG_RUNTIME_DIR outside /run/user/UID (which the view
// makes private) the worker would see them read-only, and a flock needs
// no write access: a worker that locked every slot would make each later
// start of the user wait for one, up to five minutes. The worker must not
// even see the gate's folder, and while it runs the host can take every
// slot.
func TestViewHidesStartGate(t *testing.T) {
	flock, err := exec.LookPath("flock")
	need(t, "flock (util-linux)", err)
	forEachMode(t, func(t *testing.T, m mode) {
		xdg := filepath.Join(hostDir(t, m), "xdg")
		gate := filepath.Join(xdg, "nsgate")
		var slots []string
		for _, d := range []string{xdg, gate} {
			mkdirFor(t, m, filepath.Dir(d), filepath.Base(d))
			os.Chmod(d, 0o700)
		}
		for i := range 2 {
			// Slot files that earlier starts left, as a burst does.
			p := filepath.Join(gate, fmt.Sprintf("start-slot-%d", i))
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if m.uid >= 0 {
				os.Chown(p, m.uid, m.gid)
			}
			slots = append(slots, p)
		}
		held := `if [ -e ` + slots[0] + ` ]; then echo "sees ` + slots[0] + `"; fi
( exec 3<` + slots[0] + ` 4<` + slots[1] + `
  flock -n 3 && echo held-0
  flock -n 4 && echo held-1
  echo ready
  read -r line ) 2>/dev/null || { echo ready; read -r line; }
`
		// The worker keeps its descriptors (and any lock) until the host
		// has looked: it waits for a line on its standard input.
		cmd := nsgateCmd(m, "run", "--exec-allow", flock, "--", "/bin/sh", "-c", held)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+xdg, "NSGATE_START_SLOTS=2")
		h := startHeld(t, cmd)
		said := h.said
		// The worker is still running, holding whatever it could open.
		for _, p := range slots {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Errorf("the host cannot take the start slot %s while the worker runs: %v", p, err)
			}
			f.Close()
		}
		h.release()
		t.Logf("worker said %q; stderr: %s", said, h.stderr.String())
		for _, l := range said {
			if strings.HasPrefix(l, "held-") || strings.HasPrefix(l, "sees ") {
				t.Errorf("the worker got at the start gate: %q", l)
			}
		}
	})
}
