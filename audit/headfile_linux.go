package audit

import (
	"encoding/hex"
	"errors"
	"github.com/nsgate/nsgate/internal/hostpath"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openHeadFile prepares to write the head file at path, holding its
// directory open (it works by path if that fails).
func openHeadFile(path string) *headFile {
	h := &headFile{path: path, name: filepath.Base(path), dir: -1}
	if fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		h.dir = fd
	} else {
		h.dir, h.name = unix.AT_FDCWD, path
	}
	return h
}

// openHeadFileIn prepares to write the head file path beside the log p
// names, through the folder descriptor p holds (the log's folder was
// decided once, by hostpath; the head's name is not looked up again).
func openHeadFileIn(p *hostpath.Path, path string) *headFile {
	fd, err := p.Dir()
	if err != nil {
		return openHeadFile(path)
	}
	return &headFile{path: path, name: p.Name + ".head", dir: fd}
}

func (h *headFile) close() {
	if h.dir >= 0 {
		unix.Close(h.dir)
		h.dir = -1
	}
}

// replace writes content to a new file and renames it over the head file.
func (h *headFile) replace(content string) error {
	var rnd [6]byte
	if _, err := unixRandom(rnd[:]); err != nil {
		return err
	}
	tmp := h.name + ".tmp" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(h.dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: h.path + ".tmp", Err: err}
	}
	err = writeAllFd(fd, content)
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(h.dir, tmp, h.dir, h.name)
	}
	if err != nil {
		unix.Unlinkat(h.dir, tmp, 0)
	}
	return err
}

// overwrite writes content over an existing head file of the same length.
func (h *headFile) overwrite(content string) error {
	fd, err := unix.Openat(h.dir, h.name, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(len(content)) {
		return errors.New("not a head file of the same length")
	}
	if n, err := unix.Pwrite(fd, []byte(content), 0); err != nil || n != len(content) {
		return errors.New("short write")
	}
	return unix.Fsync(fd)
}

func writeAllFd(fd int, s string) error {
	b := []byte(s)
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func unixRandom(b []byte) (int, error) { return unix.Getrandom(b, 0) }
