#!/usr/bin/env bash
# Before/after figures for a change, interleaved so the machine's drift hits
# both alike: ROUNDS times, a fresh `quire standalone` cluster from each
# binary folder in turn, the same `quire bench` cases on each. Prints, per
# case and side, adds/s, p50 and p99, and the CPU the cluster's processes
# spent per 1000 adds (utime + stime from /proc: steadier than throughput on
# a shared machine).
#
# Usage: loadtest/bench/ab.sh BEFORE_BIN_DIR AFTER_BIN_DIR
#   env: ROUNDS (3), SECS (10), CASES ("4:100 1:100 16:1": ledgers:window),
#   MODE (write: ledgers; log: named logs, `quire bench --mode`), or
#   MODE_A and MODE_B per side (one build, ledgers against logs:
#   MODE_A=write MODE_B=log ab.sh DIR DIR), ARGS_A and ARGS_B: more
#   `quire bench` flags per side (ARGS_A=--visible-acks: ledgers answered
#   once visible, a log's rule), ENV_A and ENV_B: environment for each
#   side's cluster and client (ENV_B="QUIRE_UDP_OFFLOAD=off
#   QUIRE_UDP_PAYLOAD_BYTES=65000": the single-host packet setting)
# Each folder holds quire, quire-bookie, quire-metadata, quire-gateway,
# quire-auditor and quire-replication-worker (cp target/release/quire* DIR).
set -euo pipefail
A=$1; B=$2
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-10}; CASES=${CASES:-"4:100 1:100 16:1"}; MODE=${MODE:-write}
MODE_A=${MODE_A:-$MODE}; MODE_B=${MODE_B:-$MODE}; ARGS_A=${ARGS_A:-}; ARGS_B=${ARGS_B:-}
ENV_A=${ENV_A:-}; ENV_B=${ENV_B:-}
WORK=${WORK:-/tmp/quire-ab}; HTTP=127.0.0.1:18280
META=127.0.0.1:4381,127.0.0.1:4382,127.0.0.1:4383
PID=
cleanup() { [ -n "$PID" ] && { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }; PID=; rm -rf "$WORK"; }
trap cleanup EXIT
cluster_cpu() { # jiffies of every process under the standalone supervisor
  local s=0 p
  for p in $(pgrep -P "$PID"); do s=$((s + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo "$s"
}
printf "%-6s %-8s %-6s %10s %9s %9s %14s\n" round case side adds/s p50_ms p99_ms cpu_ms/1k_adds
for r in $(seq 1 "$ROUNDS"); do
  for side in before after; do
    dir=$A; mode=$MODE_A; args=$ARGS_A; envs=$ENV_A
    [ $side = after ] && { dir=$B; mode=$MODE_B; args=$ARGS_B; envs=$ENV_B; }
    rm -rf "$WORK"; mkdir -p "$WORK"
    # shellcheck disable=SC2086 # envs: NAME=value words
    env $envs "$dir/quire" standalone --data-dir "$WORK" --http "$HTTP" --port-offset 200 > "$WORK.log" 2>&1 &
    PID=$!
    for _ in $(seq 1 120); do curl -sf "http://$HTTP/readyz" 2>/dev/null | grep -q '"bookies":3' && break; sleep 0.5; done
    for c in $CASES; do
      l=${c%%:*}; w=${c##*:}
      c0=$(cluster_cpu)
      # shellcheck disable=SC2086
      out=$(env $envs "$dir/quire" bench --metadata "$META" --certs-dir "$WORK/certs" --mode "$mode" --ledgers "$l" --window "$w" \
              --duration-secs "$SECS" --format json $args 2>/dev/null)
      c1=$(cluster_cpu)
      python3 - "$out" "$r" "$c" "$side" "$c0" "$c1" <<'PY'
import json, os, sys
j = json.loads(sys.argv[1]); r, c, side = sys.argv[2:5]; c0, c1 = int(sys.argv[5]), int(sys.argv[6])
hz = os.sysconf("SC_CLK_TCK")
cpu_ms = (c1 - c0) * 1000 / hz
print("%-6s %-8s %-6s %10.0f %9.2f %9.2f %14.1f" % (r, c, side, j["adds_per_s"], j["latency_ms"]["p50"], j["latency_ms"]["p99"], cpu_ms / max(1, j["adds"]) * 1000))
PY
    done
    cleanup
  done
done
