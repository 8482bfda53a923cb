#!/usr/bin/env bash
# Runs two peers' own test suites against nsgate in slirp4netns's place,
# or against the real slirp4netns for comparison (docs/podman.md has the
# last numbers):
#
#   integration/peer-suites.sh slirp4netns SLIRP4NETNS_SRC [real]
#       tests/test-slirp4netns-*.sh of rootless-containers/slirp4netns
#       (tag v1.2.0), as the unprivileged test user
#   integration/peer-suites.sh podman PODMAN_SRC [real] [audit]
#       test/system/500-networking.bats of containers/podman (tag
#       v4.3.1), rootless as the test user, with Podman's
#       network_cmd_path naming nsgate (or /usr/bin/slirp4netns with
#       "real"); "audit" sets NSGATE_AUDIT_DIR
#
# For developers only: CI cannot run it, since it needs the peers' source
# trees (git clone them yourself; this repository does not carry their
# code), bats, ncat, udhcpc and the real slirp4netns (Debian: bats ncat
# udhcpc slirp4netns jq), besides what .ci/install sets up (podman, runc,
# busybox-static, the test user nsgate-test). Run it as root.
#
# Every suite runs inside a network namespace of its own holding lo and a
# veth pair whose both ends are in it, one with 192.0.2.1/24
# (slirp4netns's outbound-addr test wants a second address), and no route
# anywhere else: nothing it does can leave the machine. Tests that need the internet fail, with either
# helper. Podman's suite wants its registry test image; a stand-in with the
# same name (quay.io/libpod/testimage:20220615), built from static busybox
# like the real one's applets, is imported instead, so pulls never happen.
#
# Output: one line per test ("ok"/"FAIL"/"skip"), then a summary line
# "N passed, N failed" (", N skipped" when some were); the logs stay in
# the work directory it prints.
set -euo pipefail

usage() {
	sed -n '2,16p' "$0" >&2
	exit 2
}
[ $# -ge 2 ] || usage
suite=$1 src=$(cd "$2" && pwd)
shift 2
real=0 audit=0
for a in "$@"; do
	case $a in
	real) real=1 ;;
	audit) audit=1 ;;
	*) usage ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "peer-suites: run as root (the suites run as the test user)" >&2; exit 2; }
user=${NSGATE_TEST_USER:-nsgate-test}
id "$user" >/dev/null || { echo "peer-suites: no test user $user (.ci/install creates it)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)

work=$(mktemp -d /tmp/peer.XXXXXX)
chmod 0755 "$work"
mkdir -p "$work/bin"
if [ "$real" = 1 ]; then
	ln -s /usr/bin/slirp4netns "$work/bin/slirp4netns"
else
	(cd "$repo" && CGO_ENABLED=0 go build -o "$work/bin/nsgate" ./cmd/nsgate)
	ln -s nsgate "$work/bin/slirp4netns"
fi
echo "peer-suites: $suite with $(readlink -f "$work/bin/slirp4netns"); work directory $work" >&2

# sealed CMD...: runs CMD as the test user in a network namespace of its
# own (lo, and a veth pair with 192.0.2.1/24; no route out), and in a PID
# namespace of its own, so that whatever a failed test leaves running ends
# with the run.
sealed() {
	unshare --net --pid --fork --mount-proc -- bash -c '
		set -e
		ip link set lo up
		ip link add peer0 type veth peer name peer1
		ip addr add 192.0.2.1/24 dev peer0
		ip link set peer0 up
		ip link set peer1 up
		exec setpriv --reuid "$0" --regid "$0" --init-groups --reset-env -- "$@"
	' "$user" "$@"
}

case $suite in
slirp4netns)
	cp -r "$src/tests" "$work/tests"
	chown -R "$user:" "$work/tests"
	cat >"$work/run-slirp.sh" <<'EOF'
#!/bin/bash
# In the sealed namespace, as the test user: each test in its own directory.
cd "$1/tests"
pass=0 fail=0 skip=0
for t in test-slirp4netns-*.sh; do
	name=${t%.sh}
	mkdir -p "$1/run/$name"
	(cd "$1/run/$name" && timeout 120 bash "$1/tests/$t") >"$1/run/$name.log" 2>&1
	rc=$?
	case $rc in
	0) echo "ok   $name"; pass=$((pass + 1)) ;;
	77) echo "skip $name"; skip=$((skip + 1)) ;;
	*) echo "FAIL $name (exit $rc; $1/run/$name.log)"; fail=$((fail + 1)) ;;
	esac
done
line="$pass passed, $fail failed"
[ $skip -gt 0 ] && line="$line, $skip skipped"
echo "$line"
EOF
	chmod 0755 "$work/run-slirp.sh"
	mkdir -p "$work/run"
	chown "$user:" "$work/run"
	sealed env PATH="$work/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$work" bash "$work/run-slirp.sh" "$work"
	;;
podman)
	cp -r "$src/test/system" "$work/system"
	# The stand-in test image: static busybox with every applet, laid
	# out as the real testimage (busybox-extras, /home/podman).
	root=$work/image
	mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/home/podman"
	cp /bin/busybox "$root/bin/busybox"
	for a in $("$root/bin/busybox" --list); do
		[ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
	done
	ln -s busybox "$root/bin/busybox-extras"
	echo 20220615 >"$root/home/podman/testimage-id"
	printf 'echo Confirmed: testimage pause invoked as $0\nwhile :; do sleep 0.1; done\n' >"$root/home/podman/pause"
	chmod 0755 "$root/home/podman/pause"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
	tar -C "$root" -cf "$work/image.tar" .
	mkdir -p "$work/home" "$work/config/containers" "$work/data" "$work/storage" "$work/runroot" "$work/run" "$work/audit"
	chmod 0700 "$work/run"
	cat >"$work/config/containers/containers.conf" <<EOF
[containers]
netns = "slirp4netns"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
network_cmd_path = "$work/bin/slirp4netns"
EOF
	cat >"$work/config/containers/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$work/storage"
runroot = "$work/runroot"
EOF
	# nsgate's policy for the suite: the containers may reach the
	# host's published ports and nothing else (there is nothing else).
	printf 'version: 1\nallow: []\n' >"$work/policy.yaml"
	chown -R "$user:" "$work/home" "$work/config" "$work/data" "$work/storage" "$work/runroot" "$work/run" "$work/audit" "$work/system" "$work/image.tar"
	env=(PATH="$work/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$work/home" XDG_RUNTIME_DIR="$work/run"
		XDG_CONFIG_HOME="$work/config" XDG_DATA_HOME="$work/data" NSGATE_POLICY="$work/policy.yaml"
		PODMAN=podman BATS_TMPDIR="$work/run")
	[ "$audit" = 1 ] && env+=(NSGATE_AUDIT_DIR="$work/audit")
	cat >"$work/run-bats.sh" <<EOF
#!/bin/bash
podman import --change WORKDIR=/home/podman --change 'CMD ["/bin/echo", "This container is intended for podman CI testing"]' \
	"$work/image.tar" quay.io/libpod/testimage:20220615 >/dev/null || exit 1
cd "$work/system"
bats --tap 500-networking.bats >"$work/run/bats.tap" 2>&1
awk '/^ok .*# skip/ {s++; print "skip " \$0; next} /^ok / {p++; print "ok   " \$0; next} /^not ok / {f++; print "FAIL " \$0; next}
	END {l = (p+0) " passed, " (f+0) " failed"; if (s > 0) l = l ", " s " skipped"; print l}' "$work/run/bats.tap"
podman rm -a -f -t 0 >/dev/null 2>&1
kill "\$(cat "$work/run/libpod/tmp/pause.pid" 2>/dev/null)" 2>/dev/null
true
EOF
	chmod 0755 "$work/run-bats.sh"
	sealed env "${env[@]}" bash "$work/run-bats.sh"
	if [ "$audit" = 1 ]; then
		for f in "$work"/audit/*.jsonl; do
			[ -e "$f" ] || continue
			if [ "$real" = 0 ]; then
				"$work/bin/nsgate" audit verify "$f" >/dev/null 2>&1 && echo "audit ok   $(basename "$f")" || echo "audit FAIL $(basename "$f")"
			fi
		done
	fi
	;;
*) usage ;;
esac
