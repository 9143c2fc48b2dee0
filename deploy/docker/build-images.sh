#!/usr/bin/env bash
# Builds quire's images from this machine's release build, with no registry:
# every image is FROM scratch and holds the service's binary (stripped), the
# `quire` CLI (health checks, the cert init step), and the C runtime the
# binaries link (the loader, libc, libm, libgcc_s, found by ldd). glibc 2.34+
# keeps its DNS and files resolvers inside libc, so compose service names
# resolve with /etc/resolv.conf and /etc/hosts, which Docker provides.
#
# Usage: deploy/docker/build-images.sh   (SKIP_BUILD=1: use target/release as is)
set -euo pipefail
cd "$(dirname "$0")/../.."

bins=(quire quire-bookie quire-metadata quire-gateway quire-auditor quire-replication-worker)
if [[ "${SKIP_BUILD:-}" != 1 ]]; then
  cargo build --release --bins
fi
ctx=target/docker
rm -rf "$ctx"
mkdir -p "$ctx/base/etc" "$ctx/base/tmp" "$ctx/bin"
chmod 1777 "$ctx/base/tmp"
for b in "${bins[@]}"; do
  objcopy --strip-debug "target/release/$b" "$ctx/bin/$b"
done
# The shared libraries every binary needs, at the paths the loader expects.
for lib in $(for b in "${bins[@]}"; do ldd "target/release/$b"; done |
             awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u); do
  mkdir -p "$ctx/base$(dirname "$lib")"
  cp -L "$lib" "$ctx/base$lib"
done
printf 'hosts: files dns\n' > "$ctx/base/etc/nsswitch.conf"
# Every service runs as `quire` (uid and gid 10001), not root. Mount points
# are made from `owned/` (empty, chowned by COPY --chown): Docker gives a new
# named volume the owner of the image directory it is first mounted on, so a
# volume is the service's to write without a root step.
printf 'root:x:0:0:root:/:/nonexistent\nquire:x:10001:10001:quire:/:/nonexistent\n' > "$ctx/base/etc/passwd"
printf 'root:x:0:\nquire:x:10001:\n' > "$ctx/base/etc/group"
mkdir -p "$ctx/owned"

for svc in cli bookie metadata gateway auditor replication-worker; do
  # (The legacy builder: no buildx plugin is needed, nothing is pulled.)
  DOCKER_BUILDKIT=0 docker build --quiet -f "deploy/docker/$svc.Dockerfile" -t "quire-$svc:local" "$ctx" 2>&1 >/dev/null | grep -v -e DEPRECATED -e "legacy builder" -e buildx -e "^ *$" || true
  echo "built quire-$svc:local"
done
