//go:build !linux

package sandbox

// CloseInheritedOnExec does nothing outside Linux.
func CloseInheritedOnExec() {}
