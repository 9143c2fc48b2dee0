#!/usr/bin/env bash
# Part of `make test`: the load tooling against a real local cluster, briefly.
#   1. every goose scenario (tailread, catchup, mixed; appendheavy runs in
#      step 2) for a few seconds: it must move entries, and no reply may
#      contradict what was written;
#   2. `make bench`'s pipeline (loadtest/bench/run.sh) at toy scale, without
#      fio or the peers, into a scratch folder: openssl speed and the RPC bench
#      (both packet settings), quire bench (closed loop, open loop, catch-up,
#      by scan and by ranges), goose append-heavy, then report.py; the report
#      must hold its tables and the plot, and the RPC bench's packets must
#      reach their setting with no black hole.
# Takes about two minutes once goose is built.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-$(mktemp -d /tmp/quire-loadtest-smoke.XXXXXX)}
GOOSE=$ROOT/loadtest/goose/target/release/quire-loadtest
HTTP=127.0.0.1:18380
fail() { echo "loadtest smoke: $*" >&2; exit 1; }
. "$ROOT/loadtest/standalone.sh"

# 1. the scenarios, on a cluster of their own (ports offset from the defaults).
start_standalone "$WORK/cluster" "$HTTP" 300
for sc in tailread catchup mixed logs; do
  QUIRE_REPORT_JSON="$WORK/$sc.json" QUIRE_CATCHUP_ENTRIES=300 QUIRE_LEDGER_ENTRIES=50 \
    "$GOOSE" --host "http://$HTTP" --scenarios "$sc" --users 4 --increase-rate 4 --run-time 3s --quiet --no-print-metrics \
    > "$WORK/$sc.txt" 2>&1 || { cat "$WORK/$sc.txt"; fail "goose $sc exited non-zero"; }
  python3 - "$WORK/$sc.json" "$sc" <<'PY' || { cat "$WORK/$sc.txt"; fail "goose $sc"; }
import json, sys
s = json.load(open(sys.argv[1])); t = s["totals"]; sc = sys.argv[2]
assert t["wrong_replies"] == 0, t
assert t["failures"] == 0, t["first_failures"]
assert t["appended_entries"] > 0, t
assert t["read_entries"] > 0, t
ops = s["operations"]
want = {"tailread": ["GET follow"], "catchup": ["GET read_range"], "mixed": ["POST append", "GET read_one"],
        "logs": ["POST log_append", "GET log_read"]}[sc]
for op in want:
    assert ops.get(op, {}).get("requests", 0) > 0 and ops[op]["p99_ms"] > 0, (op, ops)
if sc == "mixed":
    # 50 entries per ledger: ledgers were closed and the old ones deleted.
    assert ops.get("POST close", {}).get("requests", 0) > 0, ops
    assert ops.get("DELETE delete", {}).get("requests", 0) > 0, ops
print(f"goose {sc}: {t['appended_entries']} appended, {t['read_entries']} read and checked")
PY
done
stop_standalone

# 2. make bench's pipeline, at toy scale.
OUT="$WORK/report" DOCS="$WORK/docs" CLUSTER="$WORK/bench-cluster" SECS=2 PEERS=0 DISK=0 RATES="500 1000" \
  USERS="1 4" FILL_MB=2 DROP_CACHES=0 REREPLICATE=0 bash "$ROOT/loadtest/bench/run.sh" > "$WORK/bench.txt" 2>&1 \
  || { cat "$WORK/bench.txt"; fail "loadtest/bench/run.sh failed"; }
md="$WORK/docs/benchmarks.md"
for want in "## Pipelined and queue-depth-1 writes" "| 4x100 |" "## Latency against throughput" "| 1 000 |" \
            "## Through the HTTP gateway (goose)" "## Catch-up reads" "| 65536 |" "bench/latency-throughput.svg" \
            "cluster CPU µs/add" "Bookie memory after the 4 x 100 case" \
            "## The transport against the crypto floor and TLS over TCP" "| single-host (the cluster below) |" \
            "| aes-128-gcm |" "| 1024 | 3 / 3 | 100 per call |"; do
  grep -qF -- "$want" "$md" || { cat "$WORK/bench.txt"; cat "$md"; fail "the report lacks '$want'"; }
done
grep -q '<polyline' "$WORK/docs/bench/latency-throughput.svg" || fail "the plot has no curve"
if grep -q 'failed' "$WORK/report/run.log"; then cat "$WORK/report/run.log"; fail "a bench case failed"; fi
# A packet size the path or the kernel refused (black holes, or discovery
# short of the setting on loopback): the silent drop of issue #48.
if grep -h 'PATH CHECK FAILED' "$WORK"/report/rpc-*.txt; then fail "the RPC bench's packets fell short"; fi
echo "loadtest smoke: ok ($WORK)"
rm -rf "$WORK"
exit 0
