package attack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nsgate/nsgate/audit"
)

// The containment category: the worker's file system view (sandbox/view.go)
// and the audit log's own defences. The attacker tries to read nsgate's own
// files (the policy, also after the operator replaced it on the host; the
// audit log; its key) and the caller's SSH key, to delete, truncate or
// replace the audit log, to write into the caller's home and outside the
// writable set, to find a writable mount without noexec, to run or map as
// code a program it copied into each place it may write, and to fill the
// audit volume so that its next connection goes unrecorded.
//
// Most of these are refused by the kernel inside the worker (EACCES,
// EROFS, ENOENT, EPERM): nothing reaches nsgate, so by design there is no
// audit record. Each such attempt names what the lab checks on the host
// after the run instead (HostCheck): the file is unchanged, absent, or the
// audit log is the one nsgate opened and verifies against its head file.
// The exec attempts are also refused by the exec audit, which records them.
// The fill attempt runs in an `nsgate run` of its own, whose log lies on a
// small tmpfs (PhaseAuditFill).

// FloodZone is where the fill attempt's refused names live (not approved,
// never sent upstream).
const FloodZone = "flood.test"

// PhaseAuditFill is the phase of the attempt that fills the audit volume.
const PhaseAuditFill = "audit-fill"

// PolicyReplacedWord is what the lab writes to the worker's standard
// input once it has replaced the policy file (fs-read-policy-replaced).
const PolicyReplacedWord = "replaced"

// HomeCanary is the file the lab puts in the caller's home (the HOME it
// starts `nsgate run` with) before the run: a worker that sees it sees the
// caller's real home.
const HomeCanary = ".nsgate-lab-canary"

// fsName is the name the attacker gives the file of attempt id: unique to
// the run (token), so that the lab's host check finds exactly it.
func fsName(id, token string) string { return "nsgate-lab-" + id + "-" + token }

// proofName is the file a program the worker managed to execute would
// write into the --rw directory.
func proofName(id, token string) string { return "proof-" + id + "-" + token }

// noRecordFS is why a file system refusal has no audit record.
const noRecordFS = "the kernel refuses the call inside the worker (the view's mounts and Landlock); nothing reaches nsgate, so no audit record exists by design: the evidence is the worker's error and the host check"

// fsControls are the file system controls: what the view must still let
// the worker do.
func fsControls() []Attempt {
	return []Attempt{
		{
			ID: "control-fs-scratch", Category: "control", Layer: LayerControl, Expect: Allowed, Audit: AuditNone,
			Description: "write and read back a file in /tmp, /var/tmp and /dev/shm (private tmpfs mounts)",
			HostCheck:   "none of the three files exists on the host",
			NoRecord:    "file writes are not audited",
			run:         ctlScratch,
			CheckHost: func(h *HostEnv, at Attempt) HostResult {
				return h.absent("/tmp/"+fsName(at.ID, h.Token), "/var/tmp/"+fsName(at.ID, h.Token), "/dev/shm/"+fsName(at.ID, h.Token))
			},
		},
		{
			ID: "control-fs-home", Category: "control", Layer: LayerControl, Expect: Allowed, Audit: AuditNone,
			Description: "write and read back a file in $HOME (a private tmpfs at the caller's home path)",
			HostCheck:   "the file does not exist in the caller's home on the host",
			NoRecord:    "file writes are not audited",
			run:         ctlHome,
			CheckHost: func(h *HostEnv, at Attempt) HostResult {
				return h.absent(filepath.Join(h.Home, fsName(at.ID, h.Token)))
			},
		},
		{
			ID: "control-fs-rw", Category: "control", Layer: LayerControl, Expect: Allowed, Audit: AuditNone,
			Description: "write a file in the --rw directory the lab gives the worker",
			HostCheck:   "the file is on the host, holding what the worker wrote",
			NoRecord:    "file writes are not audited",
			run:         ctlRW,
			CheckHost: func(h *HostEnv, at Attempt) HostResult {
				return h.present(filepath.Join(h.RW, fsName(at.ID, h.Token)), h.Token)
			},
		},
	}
}

// containmentAttempts are the attacks of the containment category.
func containmentAttempts() []Attempt {
	view := func(id, desc, check string, run func(context.Context, *attacker) result, host func(*HostEnv, Attempt) HostResult) Attempt {
		return Attempt{
			ID: id, Category: "containment", Layer: LayerView, Description: desc,
			Expect: Blocked, Audit: AuditNone, HostCheck: check, NoRecord: noRecordFS,
			run: run, CheckHost: host,
		}
	}
	exec := func(id, where string, dir func(*attacker) (string, error)) Attempt {
		return Attempt{
			ID: id, Category: "containment", Layer: LayerExecGuard,
			Description: "copy the attacker's own static binary (/proc/self/exe) to " + where + " and exec the copy",
			Expect:      Blocked, Audit: AuditDeny,
			HostCheck: "the proof file the copy would write into the --rw directory does not exist",
			run:       fsExec(id, dir),
			CheckHost: func(h *HostEnv, at Attempt) HostResult {
				return h.absent(filepath.Join(h.RW, proofName(at.ID, h.Token)))
			},
		}
	}
	intact := func(h *HostEnv, at Attempt) HostResult { return h.auditIntact(at) }
	return []Attempt{
		view("fs-read-policy", "read the policy file at its host path (and any other mount of the same file system that shows it)",
			"the policy file is unchanged, and the worker got none of its bytes",
			fsReadPolicy, func(h *HostEnv, at Attempt) HostResult { return h.readCheck(at, h.Policy) }),
		view("fs-read-policy-replaced", "the operator replaces the policy file on the host during the run (a new file renamed over it, as editors and sed -i do) and reloads it with SIGHUP; then read the policy again",
			"the policy file is the lab's replacement, unchanged since, and the worker got none of its bytes",
			fsReadPolicyReplaced, func(h *HostEnv, at Attempt) HostResult {
				if !h.Replaced {
					return HostResult{Detail: "the lab did not replace the policy file"}
				}
				return h.readCheck(at, h.Policy)
			}),
		view("fs-read-audit-log", "read the audit log and its head file (and any other mount that shows them)",
			"the audit log is the file nsgate opened and verifies; the worker got none of its bytes",
			fsReadAuditLog, intact),
		view("fs-read-audit-key", "read the audit HMAC key (--audit-key, in a folder of its own inside the work directory, which the worker is shown)",
			"the key file is unchanged, and the worker got none of its bytes",
			fsReadAuditKey, func(h *HostEnv, at Attempt) HostResult { return h.readCheck(at, h.AuditKey) }),
		view("fs-delete-audit-log", "unlink the audit log and its head file",
			"the audit log is the file nsgate opened (same inode) and verifies against its head file",
			fsDeleteAuditLog, intact),
		view("fs-truncate-audit-log", "truncate the audit log to 0 bytes (truncate, and open with O_TRUNC)",
			"the audit log still holds every record written before the attempt, from seq 1, and verifies against its head file",
			fsTruncateAuditLog, intact),
		view("fs-replace-audit-log", "write a forged log next to the audit log and rename it over the log and its head file; rename one from /tmp over them; move the log away",
			"the audit log is the file nsgate opened (same inode) and verifies against its head file; no forged file is left next to it",
			fsReplaceAuditLog, func(h *HostEnv, at Attempt) HostResult {
				r := h.auditIntact(at)
				if !r.OK {
					return r
				}
				a := h.absent(filepath.Join(filepath.Dir(h.AuditLog), "."+fsName(at.ID, h.Token)))
				if !a.OK {
					return a
				}
				return HostResult{OK: true, Detail: r.Detail + "; " + a.Detail}
			}),
		view("fs-read-home-ssh-key", "read the caller's SSH private key, $HOME/.ssh/id_ed25519 (a fake one the lab put in the caller's home), and the same file under any other mount",
			"the key file is unchanged, and the worker got none of its bytes",
			fsReadHomeKey, func(h *HostEnv, at Attempt) HostResult { return h.readCheck(at, h.sshKey()) }),
		view("fs-write-home", "write $HOME/.bashrc (persistence in the caller's home), and look for the caller's home under any other mount",
			"the caller's home on the host has no .bashrc, and its canary is unchanged",
			fsWriteHome, func(h *HostEnv, at Attempt) HostResult {
				a := h.absent(filepath.Join(h.Home, ".bashrc"))
				u := h.unchanged(filepath.Join(h.Home, HomeCanary))
				return both(a, u)
			}),
		view("fs-write-work", "create a file in the lab's work directory (shown read-only with --ro)",
			"the file does not exist in the work directory on the host",
			fsWriteWork, func(h *HostEnv, at Attempt) HostResult {
				return h.absent(filepath.Join(h.Work, fsName(at.ID, h.Token)))
			}),
		view("fs-write-etc", "create a file in /etc (the host, read-only in the view)",
			"the file does not exist in /etc on the host",
			fsWriteEtc, func(h *HostEnv, at Attempt) HostResult {
				return h.absent(filepath.Join("/etc", fsName(at.ID, h.Token)))
			}),
		view("fs-write-sysctl", "write kernel.core_pattern and /proc/sysrq-trigger through the worker's /proc (a root caller's worker is uid 0, which is all /proc/sys checks: a core pattern runs a program as root on the host)",
			"the host's kernel.core_pattern does not name the attempt",
			fsWriteSysctl, func(h *HostEnv, at Attempt) HostResult {
				b, err := os.ReadFile("/proc/sys/kernel/core_pattern")
				if err != nil {
					return HostResult{Detail: "read core_pattern: " + err.Error()}
				}
				if strings.Contains(string(b), fsName(at.ID, h.Token)) {
					os.WriteFile("/proc/sys/kernel/core_pattern", []byte("core\n"), 0o644)
					return HostResult{Detail: "core_pattern was set by the worker: " + strings.TrimSpace(string(b))}
				}
				return HostResult{OK: true, Detail: "core_pattern is " + strings.TrimSpace(string(b))}
			}),
		view("fs-setid-rw", "leave a setuid and a setgid copy of a program in the --rw directory (chmod 4755, 2755; open O_CREAT with mode 4755): nosuid inside the sandbox, but not on the host",
			"no file the attempt left in the --rw directory has a set-id bit",
			fsSetID, func(h *HostEnv, at Attempt) HostResult {
				p := filepath.Join(h.RW, fsName(at.ID, h.Token))
				for _, f := range []string{p, p + ".open"} {
					if st, err := os.Stat(f); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
						return HostResult{Detail: f + " is " + st.Mode().String()}
					}
				}
				return HostResult{OK: true, Detail: "no set-id bit on " + p}
			}),
		{
			ID: "fs-other-terminals", Category: "containment", Layer: LayerView,
			Description: "open the caller's other terminals in /dev/pts (the lab holds one open on the host during the run) to read their keystrokes and write to their screens",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host: the worker's /dev/pts, its own devpts with none of the host's terminals, is the evidence",
			NoRecord:  noRecordFS,
			run:       fsOtherTerminals,
		},
		{
			ID: "tty-outlive-worker", Category: "containment", Layer: LayerExecGuard,
			Description: "set the null line discipline (TIOCSETD N_NULL, which any user may set), exclusive mode (TIOCEXCL) and stopped output (TCXONC TCOOFF) on a terminal: all three belong to the terminal, so on the caller's terminal, which nsgate run hands the worker, they outlive it and leave the caller's shell a terminal it can neither read nor write, or hang its next write (standard input when it is a terminal, else a pty of the worker's own devpts: the guard cannot tell them apart)",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host: the guard's refusal of the three ioctls is the evidence (TestWorkerCannotBreakCallerTerminal checks the caller's terminal after a run)",
			NoRecord:  "seccomp refuses the ioctl inside the worker; nothing reaches nsgate, so no audit record exists by design",
			run:       ttyOutliveWorker,
		},
		{
			ID: "fs-hold-start-slots", Category: "containment", Layer: LayerView,
			Description: "open and flock (no write access needed) the start gate's slot files, $XDG_RUNTIME_DIR/nsgate/start-slot-N, with XDG_RUNTIME_DIR outside /run/user/UID: a worker holding every slot makes each later start of the user wait up to five minutes",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "the start gate's folder on the host holds the slot file nsgate run took (so there was a gate to find)",
			NoRecord:  noRecordFS,
			run:       fsHoldStartSlots,
			CheckHost: func(h *HostEnv, at Attempt) HostResult { return h.gateMade() },
		},
		{
			ID: "res-pin-scratch-memory", Category: "containment", Layer: LayerQuota,
			Description: "measure what the private /tmp, /var/tmp, /dev/shm and $HOME can hold together: each was a tmpfs of the kernel's default size (half of RAM, one inode per page), so a worker could pin twice the machine's memory in files no process is charged for, which the OOM killer cannot free by killing the worker",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host: the sizes the worker's statfs reports (one file system, at most half of RAM) are the evidence; TestScratchSpaceBounded fills them",
			NoRecord:  "nothing reaches nsgate: the kernel refuses a write past the tmpfs's size with ENOSPC inside the worker",
			run:       resPinScratchMemory,
		},
		{
			ID: "res-take-inotify-quota", Category: "containment", Layer: LayerQuota,
			Description: "open inotify instances until the kernel refuses one: they count against the caller's uid on the host (128 by default, for all of its programs), so a worker that took them all left the caller's editors, file managers and systemd --user without inotify while it ran",
			Expect:      Blocked, Audit: AuditNone, Needs: "namespace-quota",
			HostCheck: "nothing to check on the host: the count the worker got, at most half of the host's per-user limit (/proc/sys/fs/inotify/max_user_instances), is the evidence",
			NoRecord:  "nothing reaches nsgate: the kernel refuses the instance past the worker's user namespace's limit with EMFILE",
			run:       resTakeInotifyQuota,
		},
		{
			ID: "fs-read-init", Category: "containment", Layer: LayerView,
			Description: "read what the sandbox's init holds through /proc/1: its environment (which used to carry the sandbox spec: the paths of the policy, audit log and key, and the hide list), its memory map and where its descriptors point",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host: the kernel's refusal of each read (init is not dumpable) is the evidence",
			NoRecord:  noRecordFS,
			run:       fsReadInit,
		},
		{
			ID: "fs-writable-exec-mount", Category: "containment", Layer: LayerView,
			Description: "look through every mount of the view (/proc/self/mountinfo) for one that is writable without noexec, create a program there and exec it",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host: the list of writable mounts, each noexec, or the refusal to create a file on the others, is the evidence",
			NoRecord:  noRecordFS,
			run:       fsWritableExecMount,
		},
		exec("fs-exec-tmp", "/tmp", func(*attacker) (string, error) { return "/tmp", nil }),
		exec("fs-exec-var-tmp", "/var/tmp", func(*attacker) (string, error) { return "/var/tmp", nil }),
		exec("fs-exec-shm", "/dev/shm", func(*attacker) (string, error) { return "/dev/shm", nil }),
		exec("fs-exec-home", "$HOME", func(*attacker) (string, error) { return envDir("HOME") }),
		exec("fs-exec-rw", "the --rw directory", func(a *attacker) (string, error) { return a.rwDir() }),
		{
			ID: "fs-mmap-exec", Category: "containment", Layer: LayerView,
			Description: "copy a shared library to /tmp, /var/tmp, /dev/shm, $HOME and the --rw directory, and map each copy executable (mmap PROT_EXEC; mmap, then mprotect PROT_EXEC), as dlopen would",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host (a mapping lives in the worker's memory): the kernel's refusal for each place is the evidence",
			NoRecord:  "mmap is not audited (it is no exec): the noexec mounts refuse it",
			run:       fsMmapExec,
		},
		{
			ID: "fs-ld-preload", Category: "containment", Layer: LayerView,
			Description: "run the allowed dynamic /bin/true with LD_PRELOAD naming a copy of libc in /tmp, /var/tmp, /dev/shm, $HOME and the --rw directory",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "nothing to check on the host: the loader's refusal of every copy (\"cannot be preloaded\") is the evidence",
			NoRecord:  "the exec of /bin/true is allowed and recorded; the loader's mmap of the library is not audited: the noexec mounts refuse it",
			run:       fsLdPreload,
		},
		{
			ID: "fs-race-init-mem", Category: "containment", Layer: LayerView, Phase: PhaseInitRace,
			Description: fmt.Sprintf("as the very first program of a sandbox (%d runs of their own), from its first instruction, open the sandbox init's memory (/proc/1/mem) read-write, %d times: init shares the worker's uid, and with its memory the worker rewrites PID 1 (clears its parent-death signal and outlives nsgate, reports any exit status)", InitRaceRuns, InitRaceTries),
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "every run's worker exited with the status that says each open was refused",
			NoRecord:  "the kernel refuses the open inside the worker (init is not dumpable); nothing reaches nsgate, so no audit record exists by design: the worker's exit status in each run is the evidence",
			run: func(context.Context, *attacker) result {
				return erroredf("the lab runs this attempt's program as the command of runs of its own (PhaseInitRace)")
			},
		},
		{
			ID: "audit-fill-volume", Category: "containment", Layer: LayerAudit, Phase: PhaseAuditFill,
			Description: "in a run of its own whose audit log lies on a 64 KiB tmpfs: flood the gateway's resolver with new refused names until the volume is full, while connecting to the unapproved server, then open a new flow to app.test and to the unapproved server",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "the unapproved server saw no connection and app.test none the log does not hold; nsgate exited 125 with one line naming the audit failure; the records it wrote verify (key, head file)",
			run:       auditFill,
		},
	}
}

// both joins two host results.
func both(a, b HostResult) HostResult {
	if !a.OK {
		return a
	}
	if !b.OK {
		return b
	}
	return HostResult{OK: true, Detail: a.Detail + "; " + b.Detail}
}

// envDir returns the directory an environment variable names.
func envDir(name string) (string, error) {
	d := os.Getenv(name)
	if d == "" {
		return "", fmt.Errorf("$%s is not set", name)
	}
	return d, nil
}

// rwDir returns the --rw directory the lab gave the attacker.
func (a *attacker) rwDir() (string, error) {
	if a.cfg.RWDir == "" {
		return "", fmt.Errorf("the lab gave no --rw directory (--rw-dir)")
	}
	return a.cfg.RWDir, nil
}

// HostResult is the outcome of an attempt's host check.
type HostResult struct {
	OK     bool
	Detail string
}

// NewToken returns a token unique to a run, which names the files the
// containment attempts write (Config.Token, HostEnv.Token).
func NewToken() string { return randHex(6) }

// fileSnap is a file as the lab saw it before the run.
type fileSnap struct {
	fi  os.FileInfo
	sum string // sha256 of the content
}

// HostEnv is what the lab set up on the host for the containment attempts,
// and what it knows after the run, for the host checks. The lab fills in
// the fields below the snapshots as the run goes; it is used by one
// goroutine at a time.
type HostEnv struct {
	Token string
	// nsgate's own files, as given to nsgate run.
	Policy, AuditLog, AuditKey string
	// Home is the HOME nsgate run was started with: the caller's home.
	Home string
	// RW is the --rw directory, Work the lab's work directory (--ro).
	RW, Work string
	// Runtime is the XDG_RUNTIME_DIR nsgate run was started with: a
	// private directory of the caller's in the work directory (not
	// /run/user/UID, which the view always makes private), where nsgate
	// keeps its start gate (fs-hold-start-slots).
	Runtime string

	before map[string]fileSnap // by Snapshot

	// Replaced says the lab replaced the policy file during the run
	// (fs-read-policy-replaced), and snapshotted the replacement.
	Replaced bool
	// After the run: the audit log's check (audit.Check with the key and
	// its head file) and records, and the attacker's observations by ID.
	AuditErr     error
	Records      []audit.Record
	Observations map[string]Observation
}

// Snapshot records path's state before the run (or again after the lab
// replaced it).
func (h *HostEnv) Snapshot(path string) error {
	fi, sum, err := snap(path)
	if err != nil {
		return err
	}
	if h.before == nil {
		h.before = map[string]fileSnap{}
	}
	h.before[path] = fileSnap{fi: fi, sum: sum}
	return nil
}

func snap(path string) (os.FileInfo, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	hs := sha256.New()
	if _, err := io.Copy(hs, f); err != nil {
		return nil, "", err
	}
	return fi, hex.EncodeToString(hs.Sum(nil)), nil
}

// unchanged checks that path is the same file with the same content as
// before the run.
func (h *HostEnv) unchanged(path string) HostResult {
	b, ok := h.before[path]
	if !ok {
		return HostResult{Detail: "the lab took no snapshot of " + path + " before the run"}
	}
	fi, sum, err := snap(path)
	switch {
	case err != nil:
		return HostResult{Detail: fmt.Sprintf("%s: %v after the run", path, err)}
	case !os.SameFile(b.fi, fi):
		return HostResult{Detail: path + " was replaced (another inode) during the run"}
	case sum != b.sum:
		return HostResult{Detail: fmt.Sprintf("%s changed during the run (sha256 %s, was %s)", path, short(sum), short(b.sum))}
	}
	return HostResult{OK: true, Detail: fmt.Sprintf("%s unchanged (same inode, sha256 %s)", path, short(sum))}
}

// sshKey is the fake SSH key the lab puts in the caller's home.
func (h *HostEnv) sshKey() string { return filepath.Join(h.Home, ".ssh", "id_ed25519") }

// readCheck checks that path is unchanged and that what the worker says
// it read (the sha256 prefix readHidden reports) is not the file's.
func (h *HostEnv) readCheck(at Attempt, path string) HostResult {
	u := h.unchanged(path)
	if !u.OK {
		return u
	}
	if o, ok := h.Observations[at.ID]; ok && o.Observed == Allowed {
		if _, sum, err := snap(path); err == nil && strings.Contains(o.Detail, "sha256 "+short(sum)) {
			return HostResult{Detail: "the worker read the file: the sha256 it reported is the file's (" + short(sum) + ")"}
		}
	}
	return u
}

// absent checks that none of paths exists on the host; any that does is
// removed (after being reported).
func (h *HostEnv) absent(paths ...string) HostResult {
	var there []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			there = append(there, p)
			os.RemoveAll(p)
		}
	}
	if len(there) > 0 {
		return HostResult{Detail: "on the host after the run: " + strings.Join(there, ", ") + " (removed by the lab)"}
	}
	return HostResult{OK: true, Detail: "absent on the host: " + strings.Join(paths, ", ")}
}

// StartGateDir is the start gate's folder in an XDG_RUNTIME_DIR
// (worker/startgate.go).
func StartGateDir(runtime string) string { return filepath.Join(runtime, "nsgate") }

// gateMade checks that nsgate run made its start gate in h.Runtime and
// took a slot there.
func (h *HostEnv) gateMade() HostResult {
	if h.Runtime == "" {
		return HostResult{Detail: "the lab started nsgate run without an XDG_RUNTIME_DIR of its own"}
	}
	dir := StartGateDir(h.Runtime)
	slots, _ := filepath.Glob(filepath.Join(dir, "start-slot-*"))
	if len(slots) == 0 {
		return HostResult{Detail: "no start slot file in " + dir + ": nsgate run made no start gate there"}
	}
	return HostResult{OK: true, Detail: "the start gate holds " + strings.Join(slots, ", ")}
}

// present checks that path exists on the host and holds content.
func (h *HostEnv) present(path, content string) HostResult {
	b, err := os.ReadFile(path)
	switch {
	case err != nil:
		return HostResult{Detail: fmt.Sprintf("%s: %v", path, err)}
	case string(b) != content:
		return HostResult{Detail: fmt.Sprintf("%s holds %q, want %q", path, clip(string(b), 40), content)}
	}
	return HostResult{OK: true, Detail: path + " is on the host with the worker's content"}
}

// auditIntact checks that the audit log is the file nsgate opened, that
// it verifies (with the key, against its head file) from seq 1, and that
// the records written before the attempt are still there.
func (h *HostEnv) auditIntact(at Attempt) HostResult {
	b, ok := h.before[h.AuditLog]
	if !ok {
		return HostResult{Detail: "the lab took no snapshot of the audit log before the run"}
	}
	fi, err := os.Stat(h.AuditLog)
	switch {
	case err != nil:
		return HostResult{Detail: fmt.Sprintf("audit log: %v after the run", err)}
	case !os.SameFile(b.fi, fi):
		return HostResult{Detail: "the audit log was replaced (another inode) during the run"}
	case h.AuditErr != nil:
		return HostResult{Detail: "the audit log does not verify: " + h.AuditErr.Error()}
	case len(h.Records) == 0 || h.Records[0].Seq != 1 || h.Records[0].Name != "start":
		return HostResult{Detail: "the audit log does not start with the run's start record (seq 1)"}
	}
	o, ok := h.Observations[at.ID]
	if !ok {
		return HostResult{Detail: "no observation to date the attempt by"}
	}
	n := 0
	for _, r := range h.Records {
		if r.Time.Before(o.Start) {
			n++
		}
	}
	if n == 0 {
		return HostResult{Detail: "the audit log holds no record written before the attempt"}
	}
	return HostResult{OK: true, Detail: fmt.Sprintf("the audit log is the file nsgate opened (same inode), holds %d records from seq 1 (%d written before the attempt at %s) and verifies with the key against its head file",
		len(h.Records), n, o.Start.Format(time.TimeOnly))}
}

// clip bounds s to n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// Setup creates, below h.Work, the caller's home (with its
// canary), the --rw directory and the audit key, creates the audit log
// empty (so that its inode is known before nsgate opens it), and takes
// the snapshots the host checks compare with.
func (h *HostEnv) Setup() error {
	for _, d := range []string{h.Home, h.RW, h.Runtime} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	canary := filepath.Join(h.Home, HomeCanary)
	if err := os.WriteFile(canary, []byte("canary "+h.Token+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(h.sshKey()), 0o700); err != nil {
		return err
	}
	fake := "-----BEGIN OPENSSH PRIVATE KEY-----\nnsgate-lab fake key " + h.Token + " " + randHex(24) + "\n-----END OPENSSH PRIVATE KEY-----\n"
	if err := os.WriteFile(h.sshKey(), []byte(fake), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(h.AuditKey, []byte(randHex(32)+"\n"), 0o600); err != nil {
		return fmt.Errorf("audit key: %w", err)
	}
	f, err := os.OpenFile(h.AuditLog, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	f.Close()
	for _, p := range []string{h.Policy, h.AuditKey, canary, h.sshKey(), h.AuditLog} {
		if err := h.Snapshot(p); err != nil {
			return err
		}
	}
	return nil
}

// Checks makes the host check of every attempt of cat that has one and
// ran (h.Observations), by attempt ID.
func (h *HostEnv) Checks(cat []Attempt) map[string]HostResult {
	out := make(map[string]HostResult)
	for _, at := range cat {
		if at.CheckHost == nil {
			continue
		}
		if _, ran := h.Observations[at.ID]; !ran {
			continue
		}
		out[at.ID] = at.CheckHost(h, at)
	}
	return out
}
