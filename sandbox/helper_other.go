//go:build !linux

package sandbox

import "errors"

// OpenTAP reports that TAP devices need Linux.
func OpenTAP(TAPSpec) (int, error) { return -1, errors.ErrUnsupported }

// JoinMain is unavailable off Linux.
func JoinMain() int { return 1 }

// Confine reports that the self-sandbox needs Linux.
func Confine(Confinement) error { return errors.ErrUnsupported }

// NotDumpable reports that dumpability is a Linux setting.
func NotDumpable() error { return errors.ErrUnsupported }

// SharesMountNSWithParent is always true off Linux.
func SharesMountNSWithParent() bool { return true }

// RunInOwnMountNS reports that mount namespaces need Linux.
func RunInOwnMountNS([]int, string, *Confinement) (int, error) { return 1, errors.ErrUnsupported }

// RunInOwnMountNSOf reports that mount namespaces need Linux.
func RunInOwnMountNSOf([]int, string, string, string, *Confinement) (int, error) {
	return 1, errors.ErrUnsupported
}
