package tun

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// deviceFlags returns the TUNSETIFF flags of fd's device (TUNGETIFF); an
// error means fd is not a TUN/TAP descriptor (e.g. a test's socketpair).
func deviceFlags(fd int) (uint16, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return 0, err
	}
	return ifr.Uint16(), nil
}

// Offload sets, most capable first. USO (UDP segmentation) needs Linux
// 6.2; older kernels refuse the whole set with EINVAL and get the next.
const (
	offloadCsum = unix.TUN_F_CSUM
	offloadTSO  = offloadCsum | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	offloadUSO  = offloadTSO | unix.TUN_F_USO4 | unix.TUN_F_USO6
)

// enableOffloads sets the virtio-net header size and the device's
// offloads, and reports whether TCP segmentation offload is on. mode is
// "" (all the kernel has), "tso" (no USO), "csum" or "off".
func enableOffloads(fd int, mode string) (bool, error) {
	var sets []int
	switch mode {
	case "":
		sets = []int{offloadUSO, offloadTSO, offloadCsum}
	case "tso":
		sets = []int{offloadTSO, offloadCsum}
	case "csum":
		sets = []int{offloadCsum}
	case "off":
		sets = []int{0}
	default:
		return false, fmt.Errorf("NSGATE_TUN_OFFLOAD=%q: want off, csum or tso (or unset)", mode)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
		return false, fmt.Errorf("set virtio-net header size: %w", err)
	}
	var err error
	for _, s := range sets {
		if err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, s); err == nil {
			return s&unix.TUN_F_TSO4 != 0, nil
		}
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	// Without offloads the device still works; only slower.
	if err2 := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0); err2 != nil {
		return false, fmt.Errorf("set offloads: %w", err)
	}
	return false, nil
}
