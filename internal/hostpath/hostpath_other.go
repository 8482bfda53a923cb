//go:build !linux

package hostpath

import (
	"errors"

	"golang.org/x/sys/unix"
)

const pathFlag = unix.O_RDONLY

// readLink reads the link comp in dir and checks it is still the one
// looked at (st).
func readLink(_, dir int, comp string, st *unix.Stat_t) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dir, comp, buf)
	if err != nil {
		return "", err
	}
	var again unix.Stat_t
	if err := unix.Fstatat(dir, comp, &again, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", err
	}
	if idOf(&again) != idOf(st) {
		return "", errors.New("the link changed while it was read")
	}
	return string(buf[:n]), nil
}

func openBeneath(dir int, name string, flag int, mode uint32) (int, error) {
	return unix.Openat(dir, name, flag|unix.O_NOFOLLOW, mode)
}
