//go:build !linux

package sandbox

import (
	"errors"
	"io/fs"
	"os"
)

// Child is unavailable off Linux.
type Child struct {
	TunFD        int
	ExecListener func(*os.File) error
}

// Start reports that sandboxes need Linux.
func Start(Spec, Stdio) (*Child, error) { return nil, errors.ErrUnsupported }

// InitMain is unavailable off Linux.
func InitMain(ApplyGuard) int { return 125 }

func (c *Child) Release() ([]string, error) { return nil, errors.ErrUnsupported }
func (c *Child) Signal(os.Signal) error     { return errors.ErrUnsupported }
func (c *Child) Wait() int                  { return 125 }
func (c *Child) Kill()                      {}
func (c *Child) Pid() int                   { return 0 }

// fileOwner is not known here: no runtime directory is made private.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }

func ownNprocHalf() uint64 { return 0 }
