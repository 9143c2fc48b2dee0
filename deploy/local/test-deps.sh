#!/usr/bin/env bash
# What `make test` needs beyond the Rust toolchain, installed where it can
# be: the one list, called by `make test` (first) and by .ci/run. As root it
# installs what is missing from Debian's packages (apt-get) and loads the
# kernel modules; PyPI tools (schemathesis, the Python client's generator,
# pytest, kubernetes-validate) are pinned and installed by the scripts that
# use them, each in a virtualenv under target/. Not as root, it installs
# nothing: it names what is missing and which tests need it, and stops;
# with nothing missing it goes on, and says which stages need root.
#
# Usage: deploy/local/test-deps.sh   (quiet as root when everything is there)
set -euo pipefail

# command -> the Debian package that brings it, and what needs it.
DEPS=(
  "make make the gate itself"
  "curl curl the shell checks (smoke, API, README)"
  "python3 python3 schemathesis, the Python client, kubernetes-validate"
  "prometheus prometheus a_real_prometheus_scrapes_every_service (metrics)"
  "ip iproute2 the fault suite: a network namespace per service"
  "iptables iptables the fault suite: partitions and one-way drops"
  "faketime faketime the fault suite: clock jumps (libfaketime)"
  "fusermount3 fuse3 the power-loss tests (crashfs, FUSE)"
  "eatmydata eatmydata the fault suite's negative control"
  "xfs_io xfsprogs the ext4 power cut (the shutdown ioctl)"
  "mkfs.ext4 e2fsprogs the ext4 power cut"
  "losetup mount the ext4 power cut (loop devices)"
)

missing_cmds=()
missing_pkgs=()
for d in "${DEPS[@]}"; do
  read -r cmd pkg _ <<< "$d"
  command -v "$cmd" > /dev/null 2>&1 || { missing_cmds+=("$d"); missing_pkgs+=("$pkg"); }
done
python3 -c 'import ensurepip, venv' 2> /dev/null || { missing_cmds+=("python3-venv python3-venv the Python virtualenvs"); missing_pkgs+=(python3-venv python3-pip); }

root=0
[ "$(id -u)" = 0 ] && root=1
if [ "${#missing_pkgs[@]}" -gt 0 ]; then
  if [ "$root" = 1 ] && command -v apt-get > /dev/null 2>&1; then
    echo "test-deps: installing ${missing_pkgs[*]} (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_pkgs[@]}" > /dev/null
  else
    echo "test-deps: missing, and not installed (not root, or no apt-get):" >&2
    for d in "${missing_cmds[@]}"; do
      read -r cmd pkg why <<< "$d"
      echo "  $cmd (Debian: $pkg): needed by $why" >&2
    done
    echo "test-deps: install them (as root: deploy/local/test-deps.sh), then run make test again" >&2
    exit 1
  fi
fi

if [ "$root" = 1 ]; then
  [ -e /dev/fuse ] || modprobe fuse || { echo "test-deps: /dev/fuse is missing: the power-loss tests need FUSE" >&2; exit 1; }
  [ -e /dev/loop-control ] || modprobe loop || { echo "test-deps: no loop devices: the ext4 power cut needs them" >&2; exit 1; }
  # UDP socket buffers as deploy/README.md asks of a host that runs
  # bookies (the services ask for 16 MiB; the kernel grants at most these).
  # Best effort: where the host refuses, the services still run, with more
  # loss under bursts.
  if [ "$(cat /proc/sys/net/core/rmem_max 2> /dev/null || echo 0)" -lt 16777216 ]; then
    sysctl -w net.core.rmem_max=16777216 net.core.wmem_max=16777216 > /dev/null 2>&1 \
      || echo "test-deps: note: could not raise net.core.rmem_max/wmem_max"
  fi
else
  echo "test-deps: note: not root: the fault suite, its negative control and the ext4 power cut need root (network namespaces, mounts) and will fail" >&2
fi
