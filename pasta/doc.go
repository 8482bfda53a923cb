// Package pasta holds the self-contained pieces of nsgate's pasta drop-in
// (`nsgate pasta ...`, or nsgate through a link named pasta; docs/podman.md),
// which rootless Podman 5 and 6 run as their network helper:
//
//   - ParseArgs: pasta's command line as Podman builds it (getopt_long
//     style, with pasta's exit status 1 and getopt's messages, so Podman's
//     retry without --map-guest-addr still works), including the -t/-u
//     port specifications (ParsePorts);
//   - Help and Version;
//   - HostIPv4 and Config.Plan: the host's address and default gateway,
//     copied into the container as pasta does, as a netplan.Plan;
//   - Background and WatchNetns: pasta forks to the background once the
//     namespace is configured and stays until the namespace is gone; Go
//     cannot fork, so nsgate starts a detached copy of itself and waits
//     for its word;
//   - Start: a Config turned into a podnet helper (the gateway, policy,
//     DNS and audit of every mode, built by podnet and session), and Main,
//     the whole command, which cmd/nsgate only lists.
//
// Reference: pasta (passt 2025) as shipped by Debian 13 and run by Podman
// 5.4; the argument sets of Podman 5.0 to 6.x are in the tests.
package pasta
