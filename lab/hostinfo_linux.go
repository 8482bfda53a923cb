package lab

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// callerIDs returns the uid and gid of the user who started the lab, as
// that user's namespace sees them: the sealed namespace maps them to the
// lab's own ids (0 when the lab sealed itself with a user namespace), and
// /proc/self/uid_map, read from inside, names the ids outside. Without a
// user namespace of its own the maps are the identity and the lab's ids
// are the caller's.
func callerIDs() (uid, gid int) {
	uid, gid = os.Getuid(), os.Getgid()
	if u, ok := outsideID("/proc/self/uid_map", uid); ok {
		uid = u
	}
	if g, ok := outsideID("/proc/self/gid_map", gid); ok {
		gid = g
	}
	return uid, gid
}

// outsideID maps id through an id map file ("INSIDE OUTSIDE COUNT" per
// line) to the id outside the namespace.
func outsideID(file string, id int) (int, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var in, out, n int64
		if _, err := fmt.Sscan(sc.Text(), &in, &out, &n); err != nil {
			continue
		}
		if int64(id) >= in && int64(id) < in+n {
			return int(out + int64(id) - in), true
		}
	}
	return 0, false
}

// userName is uid's account name, or "".
func userName(uid int) string {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return ""
	}
	return u.Username
}

// userNamespaces reports whether the kernel allows user namespaces: the
// lab made one itself, or user.max_user_namespaces is above 0 (and the
// Debian switch kernel.unprivileged_userns_clone, where it exists, is on
// for a caller that is not root).
func userNamespaces(rootless bool, callerUID int) bool {
	if rootless {
		return true
	}
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if n, perr := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || perr != nil || n <= 0 {
		return false
	}
	if callerUID != 0 {
		if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
			return false
		}
	}
	return true
}

// ia32Emulation says whether the kernel runs i386 programs: it writes a
// tiny static i386 executable that exits 42 through int 0x80 into dir
// and runs it. "present" when it exits 42, "absent" when the kernel
// refuses the format (ENOEXEC) or kills it, "not probed on ARCH" off
// amd64, "unknown: ..." when the probe could not be made.
func ia32Emulation(dir string) string {
	if runtime.GOARCH != "amd64" {
		return "not probed on " + runtime.GOARCH
	}
	f, err := os.CreateTemp(dir, "nsgate-lab-ia32-")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(i386Exit42())
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o700)); err != nil {
		return "unknown: " + err.Error()
	}
	// Another goroutine's fork may briefly hold the file open for
	// writing (ETXTBSY); try a few times.
	for try := 0; ; try++ {
		err = exec.Command(f.Name()).Run()
		if !errors.Is(err, syscall.ETXTBSY) || try == 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "unknown: the i386 probe exited 0"
	case errors.As(err, &ee) && ee.ExitCode() == 42:
		return "present"
	case errors.Is(err, syscall.ENOEXEC), errors.As(err, &ee) && ee.ExitCode() < 0:
		return "absent"
	}
	return "unknown: " + err.Error()
}

// i386Exit42 is a static ELF32 i386 executable of one loadable segment
// whose code is: mov eax, 1 (exit); mov ebx, 42; int 0x80.
func i386Exit42() []byte {
	const (
		ehSize = 52
		phSize = 32
		base   = 0x08048000
	)
	code := []byte{0xb8, 1, 0, 0, 0, 0xbb, 42, 0, 0, 0, 0xcd, 0x80}
	le := binary.LittleEndian
	b := make([]byte, ehSize+phSize, ehSize+phSize+len(code))
	copy(b, "\x7fELF\x01\x01\x01") // 32-bit, little-endian, version 1
	le.PutUint16(b[16:], 2)        // ET_EXEC
	le.PutUint16(b[18:], 3)        // EM_386
	le.PutUint32(b[20:], 1)        // EV_CURRENT
	le.PutUint32(b[24:], base+ehSize+phSize)
	le.PutUint32(b[28:], ehSize) // program headers follow the ELF header
	le.PutUint16(b[40:], ehSize)
	le.PutUint16(b[42:], phSize)
	le.PutUint16(b[44:], 1)
	ph := b[ehSize:]
	total := uint32(ehSize + phSize + len(code))
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 0) // from the file's start
	le.PutUint32(ph[8:], base)
	le.PutUint32(ph[12:], base)
	le.PutUint32(ph[16:], total)
	le.PutUint32(ph[20:], total)
	le.PutUint32(ph[24:], 5) // PF_R|PF_X
	le.PutUint32(ph[28:], 0x1000)
	return append(b, code...)
}
