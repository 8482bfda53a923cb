package attack

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/audit"
)

// VolumeLog is the name of the audit log on the volume the audit-volume
// helper mounts: the fill run's `nsgate run --audit DIR/VolumeLog`.
const VolumeLog = "audit.jsonl"

// auditVolumeHelper is the helper `audit-volume DIR SIZE COPY -- CMD...`:
// run in a mount namespace of its own (the lab starts it with
// CLONE_NEWNS), it makes its mounts private, mounts a tmpfs of SIZE bytes
// on DIR, runs CMD with this process's standard streams (forwarding
// SIGINT and SIGTERM), then copies DIR/VolumeLog and its head file to
// COPY and COPY.head, and exits with CMD's status.
func auditVolumeHelper(args []string, stdout, stderr io.Writer) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(stderr, "helper: usage: audit-volume DIR SIZE COPY -- CMD...")
		return 2
	}
	dir, size, copyTo, argv := args[0], args[1], args[2], args[4:]
	if _, err := strconv.Atoi(size); err != nil {
		fmt.Fprintf(stderr, "helper: size %q: %v\n", size, err)
		return 2
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(stderr, "helper: make mounts private: %v\n", err)
		return 2
	}
	if err := unix.Mount("nsgate-lab-audit", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size="+size+",mode=0700"); err != nil {
		fmt.Fprintf(stderr, "helper: mount a %s-byte tmpfs on %s: %v\n", size, dir, err)
		return 2
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "helper: %v\n", err)
		return 2
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	code := ExitCode(cmd.Wait())
	log := filepath.Join(dir, VolumeLog)
	for _, p := range [][2]string{{log, copyTo}, {audit.HeadFile(log), audit.HeadFile(copyTo)}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			fmt.Fprintf(stderr, "helper: %v\n", err)
			continue
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			fmt.Fprintf(stderr, "helper: %v\n", err)
		}
	}
	return code
}

// ExitCode turns cmd.Wait's error into an exit status (128+signal when
// killed, -1 when it did not run). The lab reports the statuses of its
// own runs and of the attacker's helpers with it.
func ExitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}
