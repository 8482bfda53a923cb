// Package tun turns the worker's TUN (or TAP) device's file descriptor
// into a gVisor link endpoint on the gateway side.
//
// The device is opened and configured in the sandboxed child (package
// tundev, which holds nothing of gVisor); the descriptor then travels to
// the nsgate parent over SCM_RIGHTS, where NewEndpoint wraps it.
package tun
