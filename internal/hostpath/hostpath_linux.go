package hostpath

import (
	"errors"

	"golang.org/x/sys/unix"
)

// pathFlag opens a walk's components without reading them.
const pathFlag = unix.O_PATH

// readLink reads the link fd (opened O_PATH|O_NOFOLLOW) names: the very
// link whose owner was checked.
func readLink(fd, _ int, _ string, _ *unix.Stat_t) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openBeneath opens name, one component, in dir, following nothing:
// openat2 with RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH, or openat with
// O_NOFOLLOW where the kernel has no openat2 (before 5.6) or refuses it
// (seccomp).
func openBeneath(dir int, name string, flag int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flag | unix.O_NOFOLLOW), Mode: uint64(mode),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH}
	if flag&unix.O_CREAT == 0 {
		how.Mode = 0
	}
	fd, err := unix.Openat2(dir, name, &how)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.E2BIG) {
		return unix.Openat(dir, name, flag|unix.O_NOFOLLOW, mode)
	}
	return fd, err
}
