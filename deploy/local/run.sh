#!/usr/bin/env bash
# Starts a local quire cluster from the release binaries: 3 metadata replicas,
# 3 bookies, the auditor, a replication worker and the gateway, each its own
# process on loopback with its own certificate (mTLS), all data under DATA.
# Then asks every service who it is over QUIC, and waits for Ctrl-C.
#
# Usage: deploy/local/run.sh [DATA]   (make run)
#        ONESHOT=1 deploy/local/run.sh  (start, check every service, stop: a smoke test)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="${QUIRE_BIN:-$ROOT/target/release}"
DATA=${1:-$ROOT/data}
CERTS="$DATA/certs"
mkdir -p "$DATA/run"
[ -f "$CERTS/ca.pem" ] || "$BIN/quire" certs init --dir "$CERTS" >/dev/null

PIDS=()
stop() {
  for p in "${PIDS[@]:-}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT INT TERM

# service binary, role, id, port, extra flags...
start() {
  local bin=$1 role=$2 id=$3 port=$4
  shift 4
  local ready="$DATA/run/$role-$id.ready"
  rm -f "$ready"
  "$BIN/$bin" --certs-dir "$CERTS" --id "$id" --listen "127.0.0.1:$port" \
    --ready-file "$ready" "$@" >"$DATA/run/$role-$id.log" 2>&1 &
  PIDS+=($!)
  SERVICES+=("$role $id $ready")
}

SERVICES=()
PEERS="1=127.0.0.1:4181,2=127.0.0.1:4182,3=127.0.0.1:4183"
METADATA="127.0.0.1:4181,127.0.0.1:4182,127.0.0.1:4183"
for i in 1 2 3; do
  start quire-metadata metadata $i $((4180 + i)) --peers "$PEERS" --data-dir "$DATA/metadata-$i"
done
for i in 1 2 3; do
  start quire-bookie bookie $i $((3180 + i)) --data-dir "$DATA/bookie-$i" --metadata "$METADATA" --rack "rack-$i"
done
start quire-auditor auditor 1 5181
start quire-replication-worker replication-worker 1 5281
HTTP=${QUIRE_HTTP:-127.0.0.1:8080}
start quire-gateway gateway 1 6181 --metadata "$METADATA" --http-listen "$HTTP"

for s in "${SERVICES[@]}"; do
  read -r role id ready <<<"$s"
  for _ in $(seq 1 200); do [ -s "$ready" ] && break; sleep 0.05; done
  [ -s "$ready" ] || { echo "$role-$id did not start; see $DATA/run/$role-$id.log"; exit 1; }
  addr=$(cat "$ready")
  info=$("$BIN/quire" server-info --addr "$addr" --role "$role" --certs-dir "$CERTS" --json)
  echo "$role-$id at $addr: $info"
done
echo
"$BIN/quire" bookies --metadata "$METADATA" --certs-dir "$CERTS" --at-least 3
echo
# A first ledger: E=3 Qw=3 Qa=2 over the three bookies, written, closed, read back.
ledger=$(printf 'hello\nquire\n' | "$BIN/quire" ledger --metadata "$METADATA" --certs-dir "$CERTS" write)
echo "first ledger written: $ledger"
id=$(sed -n 's/.*"ledger_id":\([0-9]*\).*/\1/p' <<<"$ledger")
echo "first ledger read back:"
"$BIN/quire" ledger --metadata "$METADATA" --certs-dir "$CERTS" read --ledger "$id"
echo
echo "HTTP API: http://$HTTP/v1/ledgers (e.g. curl -X POST http://$HTTP/v1/ledgers)"
echo "quire local cluster up (logs in $DATA/run)."
if [ -n "${ONESHOT:-}" ]; then exit 0; fi
echo "Ctrl-C to stop."
wait
