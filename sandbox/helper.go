package sandbox

// This file holds the plain-data side of the pieces that serve
// `nsgate slirp4netns` (podnet/): opening a TAP device
// inside another process's namespaces (OpenTAP, join_linux.go) and
// confining nsgate's own process (Confine, confine_linux.go).

import (
	"time"

	"github.com/nsgate/nsgate/tun/tundev"
)

// JoinArg is the hidden first argument of the short-lived child that
// OpenTAP starts inside another process's namespaces. cmd/nsgate dispatches
// it to JoinMain.
const JoinArg = "__nsgate-join"

// joinEnv carries the JSON TAPSpec to the join child. It is the child's
// only environment variable.
const joinEnv = "NSGATE_JOIN_SPEC"

// joinTimeout bounds how long OpenTAP waits for the child's answer.
const joinTimeout = 20 * time.Second

// TAPSpec says which network namespace to open a TAP device in, and how to
// configure it. It is plain data.
type TAPSpec struct {
	// NetnsPath is the target network namespace: a bind-mounted nsfs file
	// (Podman's $XDG_RUNTIME_DIR/netns/netns-<uuid>) or /proc/PID/ns/net.
	NetnsPath string
	// UsernsPath is the user namespace to join before the network
	// namespace. Empty: the user namespace that owns the network
	// namespace (ioctl NS_GET_USERNS). It is not joined when it is the
	// caller's own.
	UsernsPath string
	// Iface is the device: Iface.TAP must be set; Name, and, when
	// Configure is set, MTU, MAC, addresses and default routes.
	Iface tundev.Iface
	// Configure brings up lo and the device and applies Iface (slirp4netns
	// -c); otherwise the device is only created.
	Configure bool
}

// Confinement is what Confine does to the calling nsgate process itself
// (slirp4netns's --enable-sandbox and --enable-seccomp). It is plain data.
type Confinement struct {
	// Root replaces the file system view: the mount namespace's mounts are
	// made private, a small tmpfs holding only Files becomes the root
	// (pivot_root, with the old root detached) and is made read-only. The
	// process must be alone in its mount namespace (see
	// SharesMountNSWithParent and RunInOwnMountNS).
	Root bool
	// Files are placed in the new root, by relative path (e.g.
	// "etc/resolv.conf"), mode 0644. Only with Root.
	Files map[string][]byte
	// DropCaps empties the ambient, inheritable and bounding sets and
	// leaves only CAP_NET_BIND_SERVICE (if held) permitted and effective,
	// on every thread; it also sets no_new_privs. It needs a binary built
	// without cgo.
	DropCaps bool
	// Seccomp installs GatewayFilter on every thread (no_new_privs is set
	// first).
	Seccomp bool
}
