#!/usr/bin/env bash
# `make bench`: one run on one machine that regenerates docs/benchmarks.md.
#
#   1. the disk's limits (fio, ../shared/bench/disk-limit.sh: 1 KiB, 64 KiB and
#      1 MiB append + fdatasync, three concurrent journals) and its read
#      bandwidth (fio, sequential 1 MiB reads from a cold page cache); the
#      crypto floor (openssl speed, AES-GCM); the transport (the RPC bench's
#      bulk phase at both packet settings, next to the same TLS over TCP);
#   2. a quire cluster (`quire standalone`: 3 metadata replicas, 3 bookies,
#      auditor, worker, gateway, every one its own process) and on it:
#      - the client library (`quire bench`): the NATS cases (writers x window)
#        and an open-loop sweep of target rates, for latency against throughput;
#      - the HTTP gateway (goose, loadtest/goose): append-heavy at 1, 16 and 64 users;
#      - catch-up reads of closed ledgers with a cold page cache, 1 KiB and 64 KiB entries,
#        unstriped (E=Qw=3) and striped (E=3 Qw=2), and a reader polling 100 entries a call;
#      - re-replication of a decommissioned bookie's fragments (cargo bench rereplicate);
#   3. NATS JetStream R3 with fsync on every write, and etcd, with the
#      ../shared/bench scripts, on the same cases;
#   4. loadtest/bench/report.py: docs/benchmarks.md (ratios, tables) and
#      docs/bench/latency-throughput.svg.
#
# Env: SECS (10) seconds per measured case; OUT (target/bench-report) raw
# results; DOCS (docs) where the report goes; PEERS (1) 0 skips NATS and
# etcd; DISK (1) 0 skips fio; RATES (open-loop targets, adds/s); USERS (goose
# users per case); FILL_MB (1024) catch-up data per case (at 256 a read took a
# quarter to three quarters of a second: start-up weighed on the figure); DROP_CACHES (1);
# KEEP (0) 1 keeps the cluster's data; REREPLICATE (1) 0 skips the re-replication bench; SHARED (../shared/bench);
# PACKETS (single-host) the cluster's and client's packet setting: `single-host`
# (QUIRE_UDP_OFFLOAD=off, QUIRE_UDP_PAYLOAD_BYTES=65000: every process is on
# this machine's loopback) or `default` (offload on, 6 550 bytes: what a
# network of 1 500-byte frames gets). Run as root (fio, drop_caches, the peers'
# packages). Takes about 12 minutes. loadtest/smoke.sh runs it in seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SHARED:-$ROOT/../shared/bench}
OUT=${OUT:-$ROOT/target/bench-report}
SECS=${SECS:-10}
RATES=${RATES:-"2000 5000 10000 20000 30000 40000 50000 60000"}
USERS=${USERS:-"1 16 64"}
FILL_MB=${FILL_MB:-1024}
PACKETS=${PACKETS:-single-host}
case "$PACKETS" in default|single-host) ;; *) echo "PACKETS must be default or single-host, not $PACKETS" >&2; exit 2;; esac
DROP_CACHES=${DROP_CACHES:-1}
DOCS=${DOCS:-$ROOT/docs}
BIN=$ROOT/target/release
CLUSTER=${CLUSTER:-/tmp/quire-bench-cluster}
HTTP=127.0.0.1:18080
rm -rf "$OUT"; mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log"; }
need_apt() { dpkg -s "$@" >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; }; }

# Everything this script starts is stopped when it ends, however it ends.
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
            for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

{
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo +dirty)"
  echo "cpus=$(nproc)"
  echo "memory=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "disk=$(findmnt -n -o SOURCE,FSTYPE -T /tmp)"
  echo "secs=$SECS"
  echo "packets=$PACKETS"
  echo "fill_mb=$FILL_MB"
} > "$OUT/machine.txt"

log "building quire (release) and the goose load generator"
cargo build --release --workspace --bins -q
cargo build --release -q --manifest-path "$ROOT/loadtest/goose/Cargo.toml"
GOOSE=$ROOT/loadtest/goose/target/release/quire-loadtest

# ---- 1. the disk ------------------------------------------------------------
if [ "${DISK:-1}" = 1 ]; then
  log "disk: fio append + fdatasync (disk-limit.sh)"
  DIR=/tmp/quire-peers/fio RT=$SECS RT_BW=$SECS ONLY='^(i_1k_append|ii_|iv_3x1k_append)' \
    bash "$SHARED/disk-limit.sh" 1 > "$OUT/disk.txt" 2>&1 || log "disk-limit.sh failed (see $OUT/disk.txt)"
  log "disk: fio sequential read, cold page cache"
  need_apt fio
  mkdir -p /tmp/quire-peers/fio-read
  fio --name=lay --directory=/tmp/quire-peers/fio-read --filename=r.f --rw=write --bs=1m --size=2g --end_fsync=1 \
      --output-format=json >/dev/null
  for mode in buffered direct; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    d=0; [ $mode = direct ] && d=1
    fio --name=read --directory=/tmp/quire-peers/fio-read --filename=r.f --rw=read --bs=1m --size=2g --direct=$d \
        --ioengine=psync --runtime=$SECS --time_based=0 --output-format=json --output="$OUT/fio-read-$mode.json" >/dev/null
  done
  rm -rf /tmp/quire-peers/fio-read
fi

# ---- 1b. the crypto floor and the transport ----------------------------------
if [ "${TRANSPORT:-1}" = 1 ]; then
  log "crypto: openssl speed, AES-128-GCM and AES-256-GCM at 1452 and 16384 bytes (one core)"
  for c in aes-128-gcm aes-256-gcm; do
    for b in 1452 16384; do
      openssl speed -mr -seconds 2 -bytes "$b" -evp "$c" 2>/dev/null | awk -v c="$c" -v b="$b" -F: '/^\+F:/{print "OPENSSL cipher=" c " bytes=" b " bytes_per_s=" $4}'
    done
  done > "$OUT/openssl.txt" || log "openssl speed failed"
  for setting in default single-host; do
    log "transport: RPC bench (qd1, bulk, TLS over TCP), $setting packets"
    envs=(); [ "$setting" = single-host ] && envs=(BENCH_UDP_OFFLOAD=off BENCH_UDP_PAYLOAD_BYTES=65000)
    env "${envs[@]}" BENCH_SECS="$SECS" BENCH_PHASES=qd1,bulk,tls-tcp cargo bench -q -p quire-rpc --bench rpc \
      > "$OUT/rpc-$setting.txt" 2>&1 || log "rpc bench ($setting) failed (see $OUT/rpc-$setting.txt)"
  done
fi

# ---- 2. quire ---------------------------------------------------------------
# The packet setting of every process of the cluster and of the client.
if [ "$PACKETS" = single-host ]; then
  export QUIRE_UDP_OFFLOAD=off QUIRE_UDP_PAYLOAD_BYTES=65000
fi
start_cluster() {
  rm -rf "$CLUSTER"; mkdir -p "$CLUSTER"
  "$BIN/quire" standalone --data-dir "$CLUSTER" --http "$HTTP" > "$OUT/cluster.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 120); do
    # Ready with all three bookies registered (an E=3 create needs them).
    curl -sf "http://$HTTP/readyz" 2>/dev/null | grep -q '"bookies":3' && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || { log "the cluster exited:"; tail -20 "$OUT/cluster.log"; exit 1; }
    sleep 0.5
  done
  log "the gateway did not become ready"; exit 1
}
# The cluster's data (several GB after the catch-up cases) goes with it, so
# that repeated runs do not fill the disk (bookies turn read-only when it is).
stop_cluster() { kill "${PIDS[-1]}" 2>/dev/null || true; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'
                 [ "${KEEP:-0}" = 1 ] || rm -rf "$CLUSTER"; }
META=127.0.0.1:4181,127.0.0.1:4182,127.0.0.1:4183
qbench() { "$BIN/quire" bench --metadata "$META" --certs-dir "$CLUSTER/certs" --format json "$@"; }
# CPU seconds (utime + stime, /proc) of every process of the cluster (the
# children of `quire standalone`), by name, as "name seconds" lines.
cluster_cpu() {
  local p hz; hz=$(getconf CLK_TCK)
  for p in $(pgrep -P "${PIDS[-1]}"); do
    awk -v hz="$hz" -v n="$(cat /proc/$p/comm 2>/dev/null)" '{printf "%s %.3f\n", n, ($14+$15)/hz}' /proc/$p/stat 2>/dev/null || true
  done
}
# Runs a client case ($1: its name) and writes the cluster's CPU over it
# next to its figures: client-$1.cpu (name seconds_before seconds_after).
qcase() {
  local name=$1; shift
  cluster_cpu > "$OUT/cpu0"
  qbench "$@" > "$OUT/client-$name.json" || log "$name failed"
  cluster_cpu > "$OUT/cpu1"
  paste -d' ' "$OUT/cpu0" "$OUT/cpu1" | awk '{print $1, $2, $4}' > "$OUT/client-$name.cpu"
}
# Resident memory of each bookie: now (VmRSS) and at its peak (VmHWM), KiB.
bookie_rss() {
  local p
  for p in $(pgrep -P "${PIDS[-1]}" quire-bookie); do
    echo "$(awk '/^VmRSS/{print $2}' /proc/$p/status) $(awk '/^VmHWM/{print $2}' /proc/$p/status)"
  done
}

log "quire: starting the cluster under $CLUSTER"
start_cluster
for c in 1:1 16:1 1:100 4:100; do
  l=${c%%:*}; w=${c##*:}
  log "quire client: $l x $w (closed loop)"
  qcase "${l}x${w}" --ledgers "$l" --window "$w" --duration-secs "$SECS"
done
# The bookies' memory after the heaviest closed-loop case (4 x 100), against
# what they are configured to hold (the standalone defaults).
bookie_rss > "$OUT/bookie-rss.txt"
for r in $RATES; do
  log "quire client: open loop at $r adds/s over 4 ledgers"
  qcase "rate-$r" --ledgers 4 --rate "$r" --duration-secs "$SECS"
done
for u in $USERS; do
  log "quire HTTP: goose append-heavy, $u users"
  QUIRE_REPORT_JSON="$OUT/goose-append-$u.json" "$GOOSE" --host "http://$HTTP" --scenarios appendheavy \
    --users "$u" --increase-rate "$u" --run-time "${SECS}s" --quiet --no-print-metrics > "$OUT/goose-append-$u.txt" 2>&1 \
    || log "goose at $u users failed (see $OUT/goose-append-$u.txt)"
done
# Catch-up: one scan per ledger (batch reads, a few ahead), every entry's
# digest checked; unstriped (E=Qw=3) and striped (E=3 Qw=2: each bookie
# holds two thirds of each ledger and the reader merges the stripes).
for qw in 3 2; do
  for b in 1024 65536; do
    log "quire catch-up read: $b B entries, E=3 Qw=$qw, $FILL_MB MB over 4 ledgers"
    drop=(); [ "$DROP_CACHES" = 1 ] && drop=(--drop-caches)
    qbench --mode catch-up --ledgers 4 --fill-mb "$FILL_MB" --entry-bytes "$b" --write-quorum "$qw" --ack-quorum 2 \
      --window 100 "${drop[@]}" > "$OUT/catchup-$b-qw$qw.json" || log "catch-up at $b B, Qw=$qw failed"
  done
done
# A consumer polling 100 entries a call (reads of ranges, not one scan).
log "quire catch-up read: 1024 B entries, E=Qw=3, 100 entries per call"
qbench --mode catch-up --ledgers 4 --fill-mb "$FILL_MB" --entry-bytes 1024 --write-quorum 3 --ack-quorum 2 \
  --window 100 --read-range 100 "${drop[@]}" > "$OUT/catchup-1024-qw3-range100.json" || log "catch-up by ranges failed"
stop_cluster

# Re-replication: a decommissioned bookie's fragments copied to a fourth
# bookie (the replication worker's core), sources read cold.
if [ "${REREPLICATE:-1}" = 1 ]; then
  log "quire re-replication: 2 ledgers x 6000 x 16 KiB (cargo bench rereplicate)"
  BENCH_ENTRIES=6000 BENCH_DROP_CACHES="$DROP_CACHES" cargo bench -q -p quire-replication-worker --bench rereplicate \
    > "$OUT/rereplicate.txt" 2>&1 || log "re-replication bench failed (see $OUT/rereplicate.txt)"
fi

# ---- 3. the peers -------------------------------------------------------------
if [ "${PEERS:-1}" = 1 ]; then
  log "NATS JetStream R3, sync_interval: always"
  DUR=${SECS}s CASES="1:1 16:1 1:100 4:100" bash "$SHARED/nats-jetstream.sh" pypi-always 1 > "$OUT/nats.txt" 2>&1 \
    || log "nats-jetstream.sh failed (see $OUT/nats.txt)"
  log "etcd, 3 nodes"
  DUR=${SECS}s CHECKPERF=0 CASES="1:1:leader 16:4:leader 100:10:leader 1000:100:leader" bash "$SHARED/etcd.sh" 1 > "$OUT/etcd.txt" 2>&1 \
    || log "etcd.sh failed (see $OUT/etcd.txt)"
fi

# ---- 4. the report ------------------------------------------------------------
log "writing $DOCS/benchmarks.md and $DOCS/bench/latency-throughput.svg"
python3 "$ROOT/loadtest/bench/report.py" "$OUT" "$DOCS"
log "done: $OUT"
