//go:build !linux || !(amd64 || arm64)

package guard

// nativeArch is nil where this package has no seccomp filter: the seccomp
// layer is then reported missing.
func nativeArch() *archSpec { return nil }
