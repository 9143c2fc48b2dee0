#!/usr/bin/env bash
# The compose stack end to end, bounded in time (E2E_TIMEOUT_SECS, 600):
# builds the images here, brings the stack up (the quire services only: the
# third-party observability images cannot be pulled on a machine without a
# registry), scales the bookies to 5, writes a ledger through the gateway,
# `docker kill`s a bookie of its ensemble, waits until autorecovery has
# moved the dead bookie's copies (no ensemble names it, nothing is marked
# under-replicated), reads every entry back, and ends with `down -v`.
# On the way it checks the key layout (docs/security.md): no container runs
# as root, none holds the CA key, each holds only its own role's keys, and
# the operator's `admin` service reaches the cluster with the admin key.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${E2E_INNER:-}" ]]; then
  E2E_INNER=1 exec timeout --kill-after=30 "${E2E_TIMEOUT_SECS:-600}" "$0" "$@"
fi

compose() {
  if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export QUIRE_HTTP_PORT=$port QUIRE_RESTART=no QUIRE_BOOKIE_LEASE_MS=2000 \
  QUIRE_LOST_BOOKIE_GRACE_MS=3000 QUIRE_AUDIT_INTERVAL_MS=1000 QUIRE_OPEN_LEDGER_GRACE_MS=5000
project="quire-e2e-$$"
P=(-p "$project" -f deploy/compose.yaml)
api="http://127.0.0.1:$port"
log=target/compose-e2e.log
mkdir -p target

cleanup() {
  compose "${P[@]}" logs --no-color >"$log" 2>&1 || true
  compose "${P[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
}
trap cleanup EXIT
fail() { echo "compose e2e: $*" >&2; echo "(service logs: $log)" >&2; exit 1; }

# Polls `cond` (a shell command) every second until it succeeds or `secs` pass.
await() {
  local secs=$1 what=$2; shift 2
  for _ in $(seq "$secs"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  fail "timed out after ${secs}s waiting for $what"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "== images"; deploy/docker/build-images.sh
echo "== up ($project)"
compose "${P[@]}" up -d --scale bookie=5
registered() { [[ $(curl -sf "$api/v1/bookies" | json "len(d['bookies'])") == 5 ]]; }
await 120 "the gateway and 5 registered bookies" registered

echo "== key layout: non-root, own role's keys only, no CA key"
# The role whose keys a compose service may hold.
role_of() { case $1 in metadata-*) echo metadata ;; *) echo "$1" ;; esac; }
checked=0
for c in $(compose "${P[@]}" ps -q); do
  svc=$(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}' "$c")
  [[ $(docker inspect -f '{{.State.Running}}' "$c") == true ]] || continue
  user=$(docker inspect -f '{{.Config.User}}' "$c")
  [[ -n "$user" && "${user%%:*}" != 0 && "${user%%:*}" != root ]] || fail "$svc runs as root (user '$user')"
  uids=$(docker top "$c" -eo pid,uid | awk 'NR > 1 {print $2}' | sort -u | tr '\n' ' ')
  [[ "$uids" == "10001 " ]] || fail "$svc's processes run as uids $uids, not 10001 alone"
  role=$(role_of "$svc")
  # Data volumes hold no keys by construction and can be large: the
  # certificate volumes are listed file by file; the CA's must not be there.
  for m in $(docker inspect -f '{{range .Mounts}}{{.Name}}={{.Destination}} {{end}}' "$c"); do
    name=${m%%=*} dest=${m#*=}
    [[ "$name" != *_certs-ca ]] || fail "$svc mounts the CA's volume ($name at $dest)"
    [[ "$name" == *_certs-* ]] || continue
    for f in $(docker cp "$c:$dest" - | tar -t | grep '\.key$' || true); do
      file=${f##*/}
      [[ "$file" != ca.key ]] || fail "$svc holds the CA key ($dest/$file)"
      [[ "$file" == "$role"-* ]] || fail "$svc holds another role's key ($dest/$file)"
      checked=$((checked + 1))
    done
  done
done
[[ $checked -gt 0 ]] || fail "no service holds a key at all: the layout check looked in the wrong place"
echo "ok: $checked keys, each in its own role's containers; no CA key mounted; every process uid 10001"
compose "${P[@]}" run --rm admin bookies --at-least 5 >/dev/null || fail "the admin service cannot list the bookies"
echo "ok: the operator's admin service reaches the metadata service"

echo "== write through the gateway"
ledger=$(curl -sf -X POST "$api/v1/ledgers" -H 'content-type: application/json' \
  -d '{"ensemble": 3, "write_quorum": 3, "ack_quorum": 2}' | json "d['ledger_id']")
for i in $(seq 0 49); do
  curl -sf --data-binary "entry $i of ledger $ledger" "$api/v1/ledgers/$ledger/entries" >/dev/null || fail "append $i"
done
curl -sf -X POST "$api/v1/ledgers/$ledger/close" >/dev/null || fail "close"
read_all() {
  for i in $(seq 0 49); do
    [[ $(curl -sf "$api/v1/ledgers/$ledger/entries/$i") == "entry $i of ledger $ledger" ]] || return 1
  done
}
read_all || fail "read back"

echo "== docker kill a bookie of the ensemble"
victim=$(curl -sf "$api/v1/ledgers/$ledger" | json "d['ensembles'][0]['bookies'][0]")
addr=$(curl -sf "$api/v1/bookies" | json "[b['address'] for b in d['bookies'] if b['id'] == '$victim'][0]")
ip=${addr%:*}
container=""
for c in $(compose "${P[@]}" ps -q bookie); do
  if docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$c" | grep -qw "$ip"; then container=$c; fi
done
[[ -n "$container" ]] || fail "no container has bookie $victim's address $ip"
docker kill "$container" >/dev/null
echo "killed bookie $victim ($ip, container ${container:0:12})"

recovered() {
  curl -sf "$api/v1/ledgers/$ledger" | json "'$victim' in [b for s in d['ensembles'] for b in s['bookies']]" | grep -qx False &&
    [[ $(curl -sf "$api/v1/cluster" | json "d['under_replicated_ledgers']") == 0 ]]
}
await 180 "autorecovery to move bookie $victim's copies" recovered
read_all || fail "read back after autorecovery"
echo "== ok: ledger $ledger re-replicated off bookie $victim, every entry reads back"
