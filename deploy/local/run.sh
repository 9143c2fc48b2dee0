#!/usr/bin/env bash
# Starts a local quire cluster from the release binaries (`quire standalone`):
# 3 metadata replicas, 3 bookies, the auditor, a replication worker and the
# gateway, each its own process on loopback with its own certificate (mTLS),
# all data under DATA; writes and reads a first ledger; prints the HTTP API's
# URL; runs until Ctrl-C.
#
# Usage: deploy/local/run.sh [DATA]   (make run)
#        ONESHOT=1 deploy/local/run.sh  (start, check, first ledger, stop: a smoke test)
#        QUIRE_HTTP=127.0.0.1:9090 deploy/local/run.sh  (another HTTP address)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="${QUIRE_BIN:-$ROOT/target/release}"
DATA=${1:-$ROOT/data}
args=(standalone --data-dir "$DATA" --http "${QUIRE_HTTP:-127.0.0.1:8080}")
[ -n "${ONESHOT:-}" ] && args+=(--oneshot)
exec "$BIN/quire" "${args[@]}"
