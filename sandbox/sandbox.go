// Package sandbox starts the worker in fresh user, network, mount, PID, IPC
// and UTS namespaces, and brings its TUN descriptor back to the nsgate
// parent.
//
// The namespace work happens in the "init" child, PID 1 of the worker's PID
// namespace: the small program nsgate-init (cmd/nsgate-init) installed
// beside nsgate from the same build, or else nsgate re-executed. It
// configures the network,
// opens the TUN device, sends the descriptor to the parent over SCM_RIGHTS,
// waits for the parent's go-ahead, then mounts, drops every capability, sets
// no_new_privs, applies the exec guard, sends the parent the exec
// notifier's listener (if the guard made one) and starts the worker, whose
// exit status it reports as its own. The parent never changes namespace.
package sandbox

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nsgate/nsgate/tun/tundev"
)

// InitArg is the hidden first argument that makes nsgate (or nsgate-init)
// act as the sandbox's init. cmd/nsgate dispatches it to InitMain before
// flag parsing.
const InitArg = "__nsgate-sandbox-init"

// InitProgram is the name of init's own program, looked for beside nsgate
// (and in ../libexec/nsgate from nsgate's directory).
const InitProgram = "nsgate-init"

// buildStamp names the build nsgate and nsgate-init came from; the linker
// sets it in both (-X, see the Makefile: a hash of the sources). Init
// refuses a spec from another build: a spec field an older init does not
// know would otherwise be dropped in silence, and what it carries (a path
// to hide, a guard rule) would not be enforced. An nsgate without a stamp
// (a plain go build) never uses nsgate-init; it re-executes itself.
var buildStamp string

// initCandidates are the paths, in order, where nsgate with executable
// self looks for nsgate-init (only with a build stamp: initProgram).
func initCandidates(self string) []string {
	dir := filepath.Dir(self)
	return []string{filepath.Join(dir, InitProgram), filepath.Join(dir, "..", "libexec", "nsgate", InitProgram)}
}

// Programs returns the programs nsgate (the running executable) may
// start outside the sandbox: itself (init when no nsgate-init is found,
// and its other helpers) and each place it looks for nsgate-init,
// whether a file is there or not, and also in a build without a stamp,
// which does not look there (a file planted now would run once a stamped
// nsgate is installed in its place). Whoever may write one of them, or
// create it, decides what the caller's next start runs before any of the
// sandbox exists; ViewConfig.Programs keeps them out of the worker's
// writable paths.
func Programs() ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return append([]string{self}, initCandidates(self)...), nil
}

// specFD is init's descriptor of the sealed memory file that carries the
// JSON Spec from the parent (specMemfd); init reads and closes it first.
const specFD = 4

// ApplyGuard is called by init with Spec.GuardSpec after capabilities are
// dropped and just before the worker starts. It must restrict every thread
// of the process (the worker is forked from one of them). A nil ApplyGuard
// applies nothing.
type ApplyGuard func(spec []byte, argv []string) (GuardResult, error)

// GuardResult is what an ApplyGuard put in force.
type GuardResult struct {
	// Path is the program to execute for argv (resolved through PATH).
	Path string
	// Degraded names the layers that could not be applied.
	Degraded []string
	// ExecListener, when not nil, is the listener of a seccomp exec
	// notifier the guard installed. Init sends it to the parent
	// (Child.ExecListener) and closes its own copy before it starts the
	// worker, whose exec then waits for the parent's answer.
	ExecListener *os.File
}

// Spec describes the worker and its namespaces. It is serialised to the
// init child, so it holds only plain data.
type Spec struct {
	// Argv is the worker's command line; Argv[0] is resolved through PATH by
	// init (inside the worker's mount namespace).
	Argv []string
	// Env is the worker's environment (nil: nsgate's own).
	Env []string
	// InitEnvDrop names variables of nsgate's environment that init's
	// own environment leaves out too (the credentials' sources: init's
	// /proc/1/environ is not the worker's to read, but holds no secret
	// either). Not sent to init.
	InitEnvDrop []string `json:"-"`
	// Root maps the caller to uid and gid 0 inside; otherwise the caller's
	// own ids are mapped to themselves.
	Root bool
	// Iface is the worker's network interface.
	Iface tundev.Iface
	// View is the worker's file system (see View and PlanView).
	View View
	// Hostname is set in the worker's UTS namespace when non-empty.
	Hostname string
	// GuardSpec is opaque data for the guard that cmd installs with
	// SetGuardFactory; sandbox only carries it.
	GuardSpec []byte
	// Quota bounds what the worker may take of the caller's per-user
	// kernel quotas (see Quota).
	Quota Quota
	// Build is the parent's buildStamp; init refuses a spec whose Build
	// is not its own.
	Build string
}

// Quota bounds what the worker takes of the kernel's per-user quotas. The
// kernel counts a process of the worker's user namespace against its uid
// there and against the caller's uid on the host, which every other
// program of the caller (root's, for a root caller) shares: without a
// bound of its own the worker could take all of one and leave the caller
// unable to fork or to watch files while it runs.
type Quota struct {
	// Procs is the RLIMIT_NPROC (soft and hard) of init and the worker:
	// the processes and threads of the worker's uid in its user
	// namespace. 0 leaves it. The kernel does not apply it to uid 0 of the
	// host (a root caller's worker).
	Procs uint64 `json:",omitempty"`
	// Sysctl are limits of the worker's own namespaces, set by init
	// before the worker starts, by their path below /proc/sys: the
	// per-user counts of its user namespace (userNSQuotas) and the SysV
	// shared memory of its IPC namespace (kernel/shmall, kernel/shmmax).
	// Init sets no other (namespaceSysctls).
	Sysctl map[string]int64 `json:",omitempty"`
}

// namespaceSysctls are the /proc/sys paths Quota.Sysctl may set: each
// belongs to a namespace of the worker's own.
var namespaceSysctls = append(slices.Clone(userNSQuotas), "kernel/shmall", "kernel/shmmax")

// userNSQuotas are the per-user counts of /proc/sys/user that the worker
// shares with the caller and that a worker could exhaust: inotify
// instances (128 by default for all of a uid's programs) and watches, and
// fanotify groups and marks.
var userNSQuotas = []string{"user/max_inotify_instances", "user/max_inotify_watches", "user/max_fanotify_groups", "user/max_fanotify_marks"}

// hostQuotas are the same limits of the initial user namespace, the host's,
// which /proc/sys/user does not show from inside a nested one (it shows
// that namespace's own, often no limit at all: nsgate under the lab, in a
// container, in Kubernetes).
var hostQuotas = map[string]string{
	"user/max_inotify_instances": "fs/inotify/max_user_instances",
	"user/max_inotify_watches":   "fs/inotify/max_user_watches",
	"user/max_fanotify_groups":   "fs/fanotify/max_user_groups",
	"user/max_fanotify_marks":    "fs/fanotify/max_user_marks",
}

// readSysctl reads a number from /proc/sys/NAME (0 when it cannot).
func readSysctl(name string) int64 {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// DefaultMaxProcs is the default RLIMIT_NPROC of the worker: room for a
// browser or a parallel build, far from what a fork bomb needs to stop the
// caller's shell or the host.
const DefaultMaxProcs = 4096

// DefaultQuota is the worker's share of the caller's quotas: half of each
// of userNSQuotas, as nsgate's own user namespace or the host has it
// (the lower), procs processes,
// or half of nsgate's own soft RLIMIT_NPROC where that is less (0: that
// half alone), and shm bytes of SysV shared memory (0: the kernel's
// default, no limit).
func DefaultQuota(procs uint64, shm int64) Quota {
	q := Quota{Sysctl: map[string]int64{}}
	if shm > 0 {
		q.Sysctl["kernel/shmmax"] = shm
		q.Sysctl["kernel/shmall"] = max(shm/int64(os.Getpagesize()), 1)
	}
	for _, name := range userNSQuotas {
		// The least of nsgate's own namespace's limit and the host's.
		n := readSysctl(name)
		if h := readSysctl(hostQuotas[name]); h > 0 && (n <= 0 || h < n) {
			n = h
		}
		if n <= 1 {
			continue
		}
		q.Sysctl[name] = n / 2
	}
	if half := ownNprocHalf(); half > 0 && (procs == 0 || half < procs) {
		procs = half
	}
	q.Procs = procs
	return q
}

// Stdio are the worker's standard streams (nil: nsgate's own).
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}
