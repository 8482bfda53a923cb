// Package slirp holds the self-contained pieces of nsgate's slirp4netns
// drop-in (`nsgate slirp4netns ...`, docs/podman.md), which rootless Podman runs as
// its network helper:
//
//   - ParseArgs: slirp4netns 1.x's command line, with getopt_long semantics
//     (clustered short options, abbreviated long options, permuted
//     operands) and slirp4netns's own validation and messages;
//   - Help and Version: the --help text Podman greps for feature flags, and
//     a slirp4netns-compatible --version;
//   - ListenAPI: the JSON API socket (add_hostfwd, list_hostfwd,
//     remove_hostfwd), byte for byte as slirp4netns 1.2.0 answers;
//   - NewHandler: a Handler for that API that translates its requests into
//     rules of an inbound.Forwarder, which listens on host ports and
//     relays each connection to the guest (package inbound).
//
// Nothing here listens on host ports, touches namespaces, devices or the
// packet path; the command wiring (cmd/nsgate) opens the TAP device and
// runs the stack.
//
// Reference: slirp4netns 1.2.0 as shipped by Debian 12 (the helper Podman
// 4.3 runs there). Where this package deliberately differs from it, the
// doc comment of the function concerned says so.
package slirp
