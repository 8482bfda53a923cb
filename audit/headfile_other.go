//go:build !linux

package audit

import (
	"errors"
	"github.com/nsgate/nsgate/internal/hostpath"
	"os"
	"path/filepath"
)

// openHeadFile prepares to write the head file at path (by path here).
func openHeadFile(path string) *headFile { return &headFile{path: path, name: path, dir: -1} }

// openHeadFileIn is openHeadFile here.
func openHeadFileIn(_ *hostpath.Path, path string) *headFile { return openHeadFile(path) }

func (h *headFile) close() {}

// replace writes content to a new file and renames it over the head file.
func (h *headFile) replace(content string) error {
	f, err := os.CreateTemp(filepath.Dir(h.path), filepath.Base(h.path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, h.path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// overwrite writes content over an existing head file of the same length.
func (h *headFile) overwrite(content string) error {
	f, err := os.OpenFile(h.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(content)) {
		return errors.New("not a head file of the same length")
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		return err
	}
	return f.Sync()
}
