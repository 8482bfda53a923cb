package attack

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/nsgate/nsgate/lab/internet"
)

// The attacker's side of the containment attempts (containment.go). They
// run in the worker; the only thing any of them sends off the worker is
// the fill attempt's DNS queries and connections, through the gateway.

// fsRefusal reports whether err is a refusal by the file system view
// (rather than a broken attacker), and names its errno.
func fsRefusal(err error) (string, bool) {
	en := errnoOf(err)
	switch en {
	case unix.EACCES, unix.EPERM, unix.EROFS, unix.ENOENT, unix.ENOTDIR, unix.EBUSY, unix.EXDEV:
		return unix.ErrnoName(en), true
	}
	return "", false
}

// refusals collects what each step of an attempt met.
type refusals []string

func (r *refusals) add(what string, err error) bool {
	name, ok := fsRefusal(err)
	if !ok {
		return false
	}
	*r = append(*r, what+": "+name)
	return true
}

func (r refusals) String() string { return strings.Join(r, "; ") }

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dev, root, point string
}

// readMounts parses /proc/self/mountinfo (nil if it cannot be read).
func readMounts() []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 5 {
			continue
		}
		out = append(out, mountEntry{dev: fl[2], root: unescapeMount(fl[3]), point: unescapeMount(fl[4])})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// under reports whether p is d or lies below it.
func under(p, d string) bool {
	return p == d || d == "/" || strings.HasPrefix(p, d+"/")
}

// aliases returns p and every other path at which a mount of the worker's
// view shows the same file of the same file system: the file system path
// p has under each mount on its way, looked up under every other mount of
// that file system. A view that hides a path but leaves another mount of
// its file system in place would show it there.
func aliases(p string) []string {
	ms := readMounts()
	type fsPath struct{ dev, rel string }
	var rels []fsPath
	for _, m := range ms {
		// A mount at p itself is what covers it (the view's hiding
		// mount): what lies beneath is what the mounts above p show.
		if under(p, m.point) && m.point != p {
			rel := path.Join(m.root, strings.TrimPrefix(p, strings.TrimSuffix(m.point, "/")))
			rels = append(rels, fsPath{m.dev, rel})
		}
	}
	out := []string{p}
	seen := map[string]bool{p: true}
	for _, m := range ms {
		for _, r := range rels {
			if r.dev != m.dev || !under(r.rel, m.root) {
				continue
			}
			c := path.Join(m.point, strings.TrimPrefix(r.rel, strings.TrimSuffix(m.root, "/")))
			if !seen[c] && len(out) < 16 {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// readHidden tries to read each of paths, at every alias; reading any byte
// is the attack getting through.
func readHidden(what string, paths ...string) result {
	var met refusals
	for _, p := range paths {
		if p == "" {
			return erroredf("the lab did not say where %s is", what)
		}
		for _, c := range aliases(p) {
			b, err := readUpTo(c, 1<<20)
			switch {
			case err == nil && len(b) > 0:
				sum := sha256.Sum256(b)
				return allowedf("read %d bytes of %s at %s (sha256 %s)", len(b), p, c, hex.EncodeToString(sum[:6]))
			case err == nil:
				met = append(met, c+": empty")
			case !met.add(c, err):
				return erroredf("read %s: %v", c, err)
			}
		}
	}
	return blockedf("%s: %s", what, met)
}

func readUpTo(p string, n int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

func fsReadPolicy(ctx context.Context, a *attacker) result {
	return readHidden("the policy", a.cfg.PolicyFile)
}

// fsReadPolicyReplaced waits until the lab has replaced the policy file
// on the host (it asks with a progress report and the lab answers on the
// worker's standard input), then reads it.
func fsReadPolicyReplaced(ctx context.Context, a *attacker) result {
	if a.cfg.PolicyFile == "" {
		return erroredf("the lab did not say where the policy is")
	}
	a.progress("waiting for the lab to replace " + a.cfg.PolicyFile + " on the host")
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if s != PolicyReplacedWord {
			return erroredf("precondition: the lab did not replace the policy (stdin said %q)", s)
		}
	case <-time.After(10 * time.Second):
		return erroredf("precondition: the lab did not replace the policy within 10 s")
	case <-ctx.Done():
		return erroredf("interrupted while waiting for the lab")
	}
	r := readHidden("the replaced policy", a.cfg.PolicyFile)
	if r.out == Allowed {
		r.detail = "after the host replaced the policy file: " + r.detail
	}
	return r
}

// fsWritableExecMount looks for a mount the worker can write a program to
// and execute it from.
func fsWritableExecMount(ctx context.Context, a *attacker) result {
	ms := readMounts()
	if len(ms) == 0 {
		return erroredf("cannot read /proc/self/mountinfo")
	}
	var writable, refused []string
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.point] {
			continue
		}
		seen[m.point] = true
		var st unix.Statfs_t
		if err := unix.Statfs(m.point, &st); err != nil || st.Flags&unix.ST_RDONLY != 0 {
			continue
		}
		if st.Flags&unix.ST_NOEXEC != 0 {
			writable = append(writable, m.point)
			continue
		}
		fi, err := os.Stat(m.point)
		if err != nil || !fi.IsDir() {
			refused = append(refused, m.point+": not a directory")
			continue
		}
		dst := filepath.Join(m.point, "nsgate-lab-wx-"+a.cfg.Token)
		if err := copyFile("/proc/self/exe", dst, 0); err != nil {
			if name, ok := fsRefusal(err); ok {
				refused = append(refused, m.point+": create "+name)
				continue
			}
			refused = append(refused, m.point+": create "+err.Error())
			continue
		}
		defer os.Remove(dst)
		cmd := exec.CommandContext(ctx, dst, append(append([]string(nil), a.cfg.HelperArgs...), "proof", "", a.marker)...)
		r := a.runMarked(ctx, cmd, "exec "+dst)
		if r.out == Allowed {
			return allowedf("%s is writable without noexec: %s", m.point, r.detail)
		}
		return allowedf("%s is writable without noexec: the worker created %s there (its exec: %s)", m.point, dst, r.detail)
	}
	return blockedf("writable mounts, all noexec: %s; writable without noexec, but the worker cannot create a file there: %s",
		strings.Join(writable, ", "), orNone(refused))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

func fsReadHomeKey(ctx context.Context, a *attacker) result {
	home, err := envDir("HOME")
	if err != nil {
		return erroredf("%v", err)
	}
	return readHidden("the caller's SSH key", filepath.Join(home, ".ssh", "id_ed25519"))
}

func fsReadAuditLog(ctx context.Context, a *attacker) result {
	if a.cfg.AuditFile == "" {
		return erroredf("the lab did not say where the audit log is")
	}
	return readHidden("the audit log", a.cfg.AuditFile, a.cfg.AuditFile+".head")
}

func fsReadAuditKey(ctx context.Context, a *attacker) result {
	return readHidden("the audit key", a.cfg.AuditKey)
}

// auditTargets are the audit log and its head file, at every alias.
func (a *attacker) auditTargets() ([]string, error) {
	if a.cfg.AuditFile == "" {
		return nil, errors.New("the lab did not say where the audit log is")
	}
	return append(aliases(a.cfg.AuditFile), aliases(a.cfg.AuditFile+".head")...), nil
}

func fsDeleteAuditLog(ctx context.Context, a *attacker) result {
	targets, err := a.auditTargets()
	if err != nil {
		return erroredf("%v", err)
	}
	var met refusals
	for _, p := range targets {
		err := os.Remove(p)
		if err == nil {
			return allowedf("unlinked %s", p)
		}
		if !met.add("unlink "+p, err) {
			return erroredf("unlink %s: %v", p, err)
		}
	}
	return blockedf("%s", met)
}

func fsTruncateAuditLog(ctx context.Context, a *attacker) result {
	targets, err := a.auditTargets()
	if err != nil {
		return erroredf("%v", err)
	}
	var met refusals
	for _, p := range targets {
		if err := os.Truncate(p, 0); err == nil {
			return allowedf("truncated %s to 0 bytes", p)
		} else if !met.add("truncate "+p, err) {
			return erroredf("truncate %s: %v", p, err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			f.Close()
			return allowedf("opened %s with O_TRUNC", p)
		}
		if !met.add("open O_TRUNC "+p, err) {
			return erroredf("open %s: %v", p, err)
		}
	}
	return blockedf("%s", met)
}

// forgedLog is what the replace attempt would put in the log's place.
const forgedLog = `{"seq":1,"time":"2026-01-01T00:00:00Z","event":"start","prev":"0000000000000000000000000000000000000000000000000000000000000000"}` + "\n"

func fsReplaceAuditLog(ctx context.Context, a *attacker) result {
	if a.cfg.AuditFile == "" {
		return erroredf("the lab did not say where the audit log is")
	}
	log, head := a.cfg.AuditFile, a.cfg.AuditFile+".head"
	var met refusals
	// A forged log next to the real one, renamed over it and its head.
	forged := filepath.Join(filepath.Dir(log), "."+fsName("fs-replace-audit-log", a.cfg.Token))
	if err := writeNew(forged, forgedLog); err == nil {
		for _, dst := range []string{log, head} {
			if err := os.Rename(forged, dst); err == nil {
				return allowedf("renamed a forged log over %s", dst)
			} else if !met.add("rename over "+dst, err) {
				return erroredf("rename %s: %v", dst, err)
			}
		}
		return allowedf("created %s next to the audit log", forged)
	} else if !met.add("create "+forged, err) {
		return erroredf("create %s: %v", forged, err)
	}
	// One from the worker's own /tmp.
	tmp := filepath.Join(os.TempDir(), fsName("fs-replace-audit-log", a.cfg.Token))
	if err := writeNew(tmp, forgedLog); err != nil {
		return erroredf("precondition: write %s: %v", tmp, err)
	}
	defer os.Remove(tmp)
	for _, dst := range append(aliases(log), aliases(head)...) {
		if err := os.Rename(tmp, dst); err == nil {
			return allowedf("renamed %s over %s", tmp, dst)
		} else if !met.add("rename /tmp copy over "+dst, err) {
			return erroredf("rename over %s: %v", dst, err)
		}
	}
	// Move the real one away (a rotation that nsgate would not notice).
	if err := os.Rename(log, log+".old"); err == nil {
		return allowedf("moved %s away", log)
	} else if !met.add("move "+log+" away", err) {
		return erroredf("move %s: %v", log, err)
	}
	return blockedf("%s", met)
}

// writeNew creates p (it must not exist) holding content.
func writeNew(p, content string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fsTypeName names the file system at p (tmpfs or not).
func fsTypeName(p string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "unknown"
	}
	if st.Type == unix.TMPFS_MAGIC {
		return "tmpfs"
	}
	return fmt.Sprintf("file system type %#x", st.Type)
}

func fsWriteHome(ctx context.Context, a *attacker) result {
	home, err := envDir("HOME")
	if err != nil {
		return erroredf("%v", err)
	}
	// Is the caller's real home in view, here or under another mount? The
	// lab left a canary there.
	for _, c := range aliases(home) {
		if _, err := os.Stat(filepath.Join(c, HomeCanary)); err != nil {
			continue
		}
		if err := writeNew(filepath.Join(c, ".bashrc"), "echo "+a.marker+"\n"); err != nil {
			if name, ok := fsRefusal(err); ok {
				return blockedf("the caller's home is in view at %s, but writing .bashrc there: %s", c, name)
			}
			return erroredf("write %s/.bashrc: %v", c, err)
		}
		return allowedf("wrote .bashrc into the caller's home at %s (its canary is there)", c)
	}
	p := filepath.Join(home, ".bashrc")
	if err := writeNew(p, "echo "+a.marker+"\n"); err != nil {
		if name, ok := fsRefusal(err); ok {
			return blockedf("write %s: %s", p, name)
		}
		return erroredf("write %s: %v", p, err)
	}
	return blockedf("wrote %s, but $HOME is the worker's own %s: the caller's home and its canary are not in view, at %s or under any other mount", p, fsTypeName(home), home)
}

// writeOutside creates a file in dir, outside the writable set.
func (a *attacker) writeOutside(dir, id string) result {
	if dir == "" {
		return erroredf("the lab did not say which directory to try")
	}
	var met refusals
	for _, c := range aliases(dir) {
		p := filepath.Join(c, fsName(id, a.cfg.Token))
		err := writeNew(p, a.marker)
		if err == nil {
			return allowedf("created %s", p)
		}
		if !met.add("create "+p, err) {
			return erroredf("create %s: %v", p, err)
		}
	}
	return blockedf("%s", met)
}

func fsWriteWork(ctx context.Context, a *attacker) result {
	return a.writeOutside(a.cfg.WorkDir, "fs-write-work")
}

func fsWriteEtc(ctx context.Context, a *attacker) result {
	return a.writeOutside("/etc", "fs-write-etc")
}

// copyFile copies src to dst (created, mode 0755) and returns dst.
func copyFile(src, dst string, limit int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	var r io.Reader = in
	if limit > 0 {
		r = io.LimitReader(in, limit)
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// fsExec copies the attacker's own binary into the directory dir returns
// and executes the copy as a helper that would write a proof file into
// the --rw directory.
func fsExec(id string, dir func(*attacker) (string, error)) func(context.Context, *attacker) result {
	return func(ctx context.Context, a *attacker) result {
		d, err := dir(a)
		if err != nil {
			return erroredf("%v", err)
		}
		dst := filepath.Join(d, "nsgate-lab-exec-"+a.cfg.Token+"-"+randHex(3))
		if err := copyFile("/proc/self/exe", dst, 0); err != nil {
			return erroredf("precondition: copy /proc/self/exe to %s: %v", d, err)
		}
		defer os.Remove(dst)
		proof := ""
		if a.cfg.RWDir != "" {
			proof = filepath.Join(a.cfg.RWDir, proofName(id, a.cfg.Token))
		}
		cmd := exec.CommandContext(ctx, dst, append(append([]string(nil), a.cfg.HelperArgs...), "proof", proof, a.marker)...)
		return a.runMarked(ctx, cmd, "exec "+dst)
	}
}

// place is a directory the worker may write.
type place struct{ name, dir string }

// writablePlaces are the places the worker may write: the scratch
// directories, $HOME and the --rw directory.
func (a *attacker) writablePlaces() ([]place, error) {
	home, err := envDir("HOME")
	if err != nil {
		return nil, err
	}
	rw, err := a.rwDir()
	if err != nil {
		return nil, err
	}
	return []place{{"/tmp", "/tmp"}, {"/var/tmp", "/var/tmp"}, {"/dev/shm", "/dev/shm"}, {"$HOME", home}, {"--rw", rw}}, nil
}

// sharedLib finds the C library the dynamic program dyn loads (its
// first DT_NEEDED libc), for copying.
func sharedLib(dyn string) (string, error) {
	f, err := elf.Open(dyn)
	if err != nil {
		return "", err
	}
	libs, err := f.ImportedLibraries()
	f.Close()
	if err != nil {
		return "", err
	}
	interp, _ := elfInterp(dyn)
	dirs := []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	if interp != "" {
		if r, err := filepath.EvalSymlinks(interp); err == nil {
			dirs = append([]string{filepath.Dir(r)}, dirs...)
		}
	}
	for _, l := range libs {
		if !strings.HasPrefix(l, "libc.") {
			continue
		}
		for _, d := range dirs {
			p := filepath.Join(d, l)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no libc found for %s (needs %v)", dyn, libs)
}

func fsMmapExec(ctx context.Context, a *attacker) result {
	places, err := a.writablePlaces()
	if err != nil {
		return erroredf("%v", err)
	}
	src := "/proc/self/exe"
	if dyn, _, ok := DynamicProgram(); ok {
		if lib, err := sharedLib(dyn); err == nil {
			src = lib
		}
	}
	var met refusals
	for _, pl := range places {
		dst := filepath.Join(pl.dir, "nsgate-lab-mmap-"+a.cfg.Token)
		if err := copyFile(src, dst, 1<<16); err != nil {
			return erroredf("precondition: copy %s to %s: %v", src, pl.name, err)
		}
		r := mmapExec(dst)
		os.Remove(dst)
		if r.out != Blocked {
			return r
		}
		met = append(met, pl.name+": "+r.detail)
	}
	return blockedf("copies of %s: %s", src, met)
}

// mmapExec maps the file at p executable, directly and by mprotect.
func mmapExec(p string) result {
	f, err := os.Open(p)
	if err != nil {
		return erroredf("open %s: %v", p, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	m, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	if err == nil {
		unix.Munmap(m)
		return allowedf("mmap PROT_EXEC of %s succeeded", p)
	}
	e1 := errnoOf(err)
	m, err = unix.Mmap(fd, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return erroredf("mmap PROT_READ of %s: %v", p, err)
	}
	defer unix.Munmap(m)
	err = unix.Mprotect(m, unix.PROT_READ|unix.PROT_EXEC)
	if err == nil {
		return allowedf("mprotect PROT_EXEC of a mapping of %s succeeded", p)
	}
	e2 := errnoOf(err)
	if (e1 != unix.EPERM && e1 != unix.EACCES) || (e2 != unix.EPERM && e2 != unix.EACCES) {
		return erroredf("mmap PROT_EXEC: %v; mprotect: %v", e1, e2)
	}
	return blockedf("mmap %s, mprotect %s", unix.ErrnoName(e1), unix.ErrnoName(e2))
}

func fsLdPreload(ctx context.Context, a *attacker) result {
	dyn, _, ok := DynamicProgram()
	if !ok {
		return erroredf("no dynamically linked /bin/true to run")
	}
	lib, err := sharedLib(dyn)
	if err != nil {
		return erroredf("%v", err)
	}
	places, err := a.writablePlaces()
	if err != nil {
		return erroredf("%v", err)
	}
	var copies []string
	defer func() {
		for _, c := range copies {
			os.Remove(c)
		}
	}()
	for _, pl := range places {
		dst := filepath.Join(pl.dir, "nsgate-lab-preload-"+a.cfg.Token+".so")
		if err := copyFile(lib, dst, 0); err != nil {
			return erroredf("precondition: copy %s to %s: %v", lib, pl.name, err)
		}
		copies = append(copies, dst)
	}
	cmd := exec.CommandContext(ctx, dyn)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+strings.Join(copies, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return erroredf("precondition: run %s: %v %q", dyn, err, shorten(string(out), 200))
	}
	text := string(out)
	var refused []string
	for _, c := range copies {
		i := strings.Index(text, "'"+c+"'")
		if i < 0 || !strings.Contains(text[i:], "cannot be preloaded") {
			return allowedf("%s ran with LD_PRELOAD=%s and the loader did not refuse it: it was preloaded (loader said %q)", dyn, c, shorten(text, 200))
		}
		refused = append(refused, filepath.Dir(c))
	}
	reason := "cannot be preloaded"
	if m := strings.Index(text, "cannot be preloaded ("); m >= 0 {
		if e := strings.Index(text[m:], ")"); e > 0 {
			reason = text[m : m+e+1]
		}
	}
	return blockedf("%s ran; the loader refused every copy of %s (%s): %s", dyn, lib, reason, strings.Join(refused, ", "))
}

func ctlScratch(ctx context.Context, a *attacker) result {
	var done []string
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		if r := a.writeBack(filepath.Join(d, fsName("control-fs-scratch", a.cfg.Token))); r.out != Allowed {
			return r
		}
		done = append(done, d)
	}
	return allowedf("wrote and read back a file in %s (%s)", strings.Join(done, ", "), fsTypeName("/tmp"))
}

func ctlHome(ctx context.Context, a *attacker) result {
	home, err := envDir("HOME")
	if err != nil {
		return erroredf("%v", err)
	}
	r := a.writeBack(filepath.Join(home, fsName("control-fs-home", a.cfg.Token)))
	if r.out == Allowed {
		r.detail += " ($HOME is a " + fsTypeName(home) + ")"
	}
	return r
}

func ctlRW(ctx context.Context, a *attacker) result {
	rw, err := a.rwDir()
	if err != nil {
		return erroredf("%v", err)
	}
	return a.writeBack(filepath.Join(rw, fsName("control-fs-rw", a.cfg.Token)))
}

// writeBack writes the token to p and reads it back.
func (a *attacker) writeBack(p string) result {
	if err := writeNew(p, a.cfg.Token); err != nil {
		return blockedf("write %s: %v", p, err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != a.cfg.Token {
		return blockedf("read back %s: %q, %v", p, b, err)
	}
	return allowedf("wrote and read back %s", p)
}

// auditFill fills the audit volume (the run's log lies on a small tmpfs)
// with records of refused names, connecting to the unapproved server all
// along; once the resolver answers REFUSED (the log failed), it opens a
// new flow to the approved app and to the unapproved server. nsgate ends
// the worker as soon as the log fails, so the attempt reports its progress
// as it goes (Partial observations): the last one stands.
func auditFill(ctx context.Context, a *attacker) result {
	res := &net.Resolver{PreferGo: true}
	ips, err := res.LookupNetIP(ctx, "ip4", internet.AppName)
	if err != nil || len(ips) == 0 {
		return erroredf("precondition: resolve %s: %v", internet.AppName, err)
	}
	appAddr := netip.AddrPortFrom(ips[0], 8080).String()
	if f := a.fetch(ctx, "http://"+appAddr+"/", fetchOpts{host: internet.AppName}); f.err != nil || f.target != "app" {
		return erroredf("precondition: the approved app did not answer before the flood: %v %s", f.err, f.describe())
	}

	// The unapproved server, all along.
	var tried, answered atomic.Int64
	stop := make(chan struct{})
	proberDone := make(chan struct{})
	go func() {
		defer close(proberDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			tried.Add(1)
			if b, err := quickGET(hostPort(internet.OtherV4, 8080), internet.OtherV4, 300*time.Millisecond); err == nil && b != "" {
				answered.Add(1)
			}
		}
	}()
	defer func() { close(stop); <-proberDone }()

	short := *a
	short.cfg.Timeout = 500 * time.Millisecond
	var sent, nx, timeouts int
	status := func() string {
		return fmt.Sprintf("flooded %d refused names below %s (%d NXDOMAIN, %d unanswered); the unapproved server: %d connections tried, %d answered",
			sent, FloodZone, nx, timeouts, tried.Load(), answered.Load())
	}
	deadline := time.Now().Add(20 * time.Second)
	refused := false
	for i := 0; !refused && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		name := fmt.Sprintf("%d-%s.%s", i, a.secret, FloodZone)
		ans, err := short.dnsExchange(ctx, short.cfg.DNSServer, "udp", name, dnsmessage.TypeA)
		sent++
		switch {
		case err != nil:
			timeouts++
		case ans.rcode == dnsmessage.RCodeRefused:
			refused = true
		case ans.rcode == dnsmessage.RCodeNameError:
			nx++
		case len(ans.answers) > 0:
			return allowedf("%s resolved: %s", name, ans)
		}
		if answered.Load() > 0 {
			return allowedf("the unapproved server answered: %s", status())
		}
		if i%20 == 0 {
			a.progress(status())
		}
	}
	if !refused {
		return erroredf("the audit volume never filled (no REFUSED in 20 s): %s", status())
	}
	a.progress("the resolver answered REFUSED (the log failed): " + status())
	// The log has failed: a new flow, approved or not, must be refused.
	appErr := "refused"
	if b, err := quickGET(appAddr, internet.AppName, time.Second); err == nil && b != "" {
		return allowedf("after the resolver answered REFUSED, a new flow to %s (%s) got an answer: %q", internet.AppName, appAddr, shorten(b, 60))
	} else if err != nil {
		appErr = oneLine(err.Error())
	}
	otherErr := "refused"
	if b, err := quickGET(hostPort(internet.OtherV4, 8080), internet.OtherV4, time.Second); err == nil && b != "" {
		return allowedf("after the resolver answered REFUSED, the unapproved server answered: %q", shorten(b, 60))
	} else if err != nil {
		otherErr = oneLine(err.Error())
	}
	if answered.Load() > 0 {
		return allowedf("the unapproved server answered: %s", status())
	}
	return blockedf("the resolver answered REFUSED (the log failed): %s; then a new flow to %s: %s; to %s: %s", status(), internet.AppName, appErr, internet.OtherV4, otherErr)
}

// quickGET sends a GET for host to addr and returns the response's first
// line ("" with no answer).
func quickGET(addr, host string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: "+host+"\r\n\r\n"); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if n > 0 {
		return strings.SplitN(string(buf[:n]), "\r\n", 2)[0], nil
	}
	return "", err
}

// fsWriteSysctl writes global kernel settings through the worker's /proc:
// a root caller's worker is uid 0, and /proc/sys checks only the uid, so
// kernel.core_pattern would run a program of the worker's choice as root
// on the host at the next crash.
func fsWriteSysctl(ctx context.Context, a *attacker) result {
	var met refusals
	for _, w := range []struct{ path, value string }{
		{"/proc/sys/kernel/core_pattern", "|/bin/false " + fsName("fs-write-sysctl", a.cfg.Token)},
		{"/proc/sysrq-trigger", "h"},
	} {
		f, err := os.OpenFile(w.path, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(w.value)
			f.Close()
			if err == nil {
				return allowedf("wrote %s", w.path)
			}
		}
		if !met.add("write "+w.path, err) {
			return erroredf("write %s: %v", w.path, err)
		}
	}
	return blockedf("%s", met)
}

// fsSetID leaves a setuid and a setgid copy of a program in the --rw
// directory: the worker's mount is nosuid, but the host's is not, so
// anyone on the host who ran it afterwards would get the worker's uid.
func fsSetID(ctx context.Context, a *attacker) result {
	dir, err := a.rwDir()
	if err != nil {
		return erroredf("%v", err)
	}
	p := filepath.Join(dir, fsName("fs-setid-rw", a.cfg.Token))
	if err := copyFile("/proc/self/exe", p, 4096); err != nil {
		return erroredf("copy a program to %s: %v", p, err)
	}
	var met refusals
	for _, mode := range []uint32{0o4755, 0o2755} {
		err := unix.Chmod(p, mode)
		if err == nil {
			return allowedf("chmod %o %s", mode, p)
		}
		if !met.add(fmt.Sprintf("chmod %o", mode), err) {
			return erroredf("chmod %o %s: %v", mode, p, err)
		}
	}
	q := p + ".open"
	fd, err := unix.Open(q, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
	if err == nil {
		unix.Close(fd)
		var st unix.Stat_t
		if unix.Stat(q, &st) == nil && st.Mode&unix.S_ISUID != 0 {
			return allowedf("created %s setuid", q)
		}
	} else if !met.add("create setuid", err) {
		return erroredf("create %s: %v", q, err)
	}
	return blockedf("%s", met)
}

// fsOtherTerminals opens every terminal in /dev/pts: the host's devpts
// would hold the caller's other sessions (the lab opens one before the
// run), whose keystrokes the worker could read and whose screens it could
// write.
func fsOtherTerminals(ctx context.Context, a *attacker) result {
	ents, err := os.ReadDir("/dev/pts")
	if err != nil {
		return blockedf("no /dev/pts: %v", err)
	}
	var seen []string
	for _, e := range ents {
		if e.Name() == "ptmx" {
			continue
		}
		p := "/dev/pts/" + e.Name()
		seen = append(seen, e.Name())
		if fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
			return allowedf("opened %s, a terminal that is not the worker's", p)
		}
	}
	if len(seen) > 0 {
		return blockedf("/dev/pts lists %s, none opens", strings.Join(seen, ", "))
	}
	return blockedf("/dev/pts holds only ptmx: the worker's own devpts, none of the host's terminals")
}

// ttyOutliveWorker sets the null line discipline and exclusive mode on a
// terminal: standard input when it is one (the caller's, under nsgate
// run), else a pty of the worker's own devpts (the lab's worker reads a
// pipe). The guard's filter sees only the ioctl's number, so a refusal
// on either is the refusal on the caller's. A change it got on its own
// pty is undone before it returns.
func ttyOutliveWorker(ctx context.Context, a *attacker) result {
	fd, which := 0, "standard input (a terminal)"
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err != nil {
		m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return erroredf("standard input is no terminal and /dev/ptmx: %v", err)
		}
		defer unix.Close(m)
		if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
			return erroredf("unlock the pty: %v", err)
		}
		n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
		if err != nil {
			return erroredf("pty number: %v", err)
		}
		s, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return erroredf("open the pty's terminal end: %v", err)
		}
		defer unix.Close(s)
		fd, which = s, "a pty of the worker's own"
	}
	setd := unix.IoctlSetPointerInt(fd, unix.TIOCSETD, 27) // N_NULL
	excl := unix.IoctlSetInt(fd, unix.TIOCEXCL, 0)
	xonc := unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOOFF)
	if fd != 0 {
		unix.IoctlSetPointerInt(fd, unix.TIOCSETD, 0)
		unix.IoctlSetInt(fd, unix.TIOCNXCL, 0)
		unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOON)
	}
	switch {
	case setd == nil:
		return allowedf("set the null line discipline on %s", which)
	case excl == nil:
		return allowedf("set exclusive mode on %s (TIOCSETD: %v)", which, setd)
	case xonc == nil:
		return allowedf("stopped the output of %s (TIOCSETD: %v; TIOCEXCL: %v)", which, setd, excl)
	}
	return blockedf("on %s: TIOCSETD N_NULL: %v; TIOCEXCL: %v; TCXONC TCOOFF: %v", which, setd, excl, xonc)
}

// fsReadInit reads init's environment and memory map and follows its
// descriptors through /proc/1 (the worker runs as init's uid in init's
// user namespace). Any of them read is a leak.
func fsReadInit(ctx context.Context, a *attacker) result {
	var refused []string
	for _, f := range []string{"/proc/1/environ", "/proc/1/maps"} {
		b, err := os.ReadFile(f)
		if err == nil && len(b) > 0 {
			return allowedf("read %d bytes of %s", len(b), f)
		}
		refused = append(refused, fmt.Sprintf("%s: %v", f, err))
	}
	ents, err := os.ReadDir("/proc/1/fd")
	if err != nil {
		refused = append(refused, fmt.Sprintf("/proc/1/fd: %v", err))
	} else {
		for _, e := range ents {
			if t, err := os.Readlink("/proc/1/fd/" + e.Name()); err == nil {
				return allowedf("/proc/1/fd/%s points to %s", e.Name(), t)
			}
		}
		refused = append(refused, fmt.Sprintf("/proc/1/fd lists %d, none can be followed", len(ents)))
	}
	return blockedf("%s", strings.Join(refused, "; "))
}

// fsHoldStartSlots opens the start gate's slot files read-only and tries
// to lock each (flock needs no write access); a lock it gets would hold
// the user's later starts. Nothing is kept: the first lock is the proof.
func fsHoldStartSlots(ctx context.Context, a *attacker) result {
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		return erroredf("no XDG_RUNTIME_DIR in the worker's environment")
	}
	dir := StartGateDir(rt)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return blockedf("%s: %v", dir, err)
	}
	var seen []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "start-slot-") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		seen = append(seen, e.Name())
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		unix.Close(fd)
		if err == nil {
			return allowedf("locked %s: a worker that holds every slot stalls the user's later starts", p)
		}
	}
	if len(seen) > 0 {
		return blockedf("%s lists %s, none could be locked", dir, strings.Join(seen, ", "))
	}
	return blockedf("%s is empty: the worker does not see the start gate", dir)
}

// resPinScratchMemory measures what the worker's private directories can
// hold: allowed when they are more than one file system, or their one
// file system may grow past half of RAM (or past one inode per 4 KiB).
func resPinScratchMemory(ctx context.Context, a *attacker) result {
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil {
		return erroredf("sysinfo: %v", err)
	}
	ram := uint64(info.Totalram) * uint64(info.Unit)
	devs := map[uint64]bool{}
	var total, files uint64
	var seen []string
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm", os.Getenv("HOME")} {
		var st unix.Stat_t
		var fs unix.Statfs_t
		if d == "" || unix.Stat(d, &st) != nil || unix.Statfs(d, &fs) != nil {
			continue
		}
		seen = append(seen, d)
		if devs[st.Dev] {
			continue
		}
		devs[st.Dev] = true
		total += fs.Blocks * uint64(fs.Bsize)
		files += fs.Files
	}
	if len(seen) == 0 {
		return erroredf("none of the private directories exists")
	}
	detail := fmt.Sprintf("%s: %d file system(s), %d MiB and %d inodes together, of %d MiB of RAM", strings.Join(seen, ", "), len(devs), total>>20, files, ram>>20)
	if total > ram/2 || files > total/4096+64 {
		return allowedf("%s: the worker can pin more than half of RAM, or more inodes than one per 4 KiB", detail)
	}
	return blockedf("%s", detail)
}

// resTakeInotifyQuota opens inotify instances until refused (and closes
// them): allowed when it got more than half of the host's per-user limit,
// which its uid shares with the caller's other programs.
func resTakeInotifyQuota(ctx context.Context, a *attacker) result {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances") // the host's (the initial user namespace's)
	if err != nil {
		return erroredf("the host's inotify limit: %v", err)
	}
	host, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || host <= 0 {
		return erroredf("the host's inotify limit %q", b)
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var last error
	for len(fds) < host+1 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			last = err
			break
		}
		fds = append(fds, fd)
	}
	if len(fds) > host/2 {
		return allowedf("opened %d inotify instances of the %d the caller's uid may hold on the host", len(fds), host)
	}
	return blockedf("opened %d inotify instances, then %v; the host allows %d per user", len(fds), last, host)
}
