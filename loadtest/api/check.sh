#!/usr/bin/env bash
# Part of `make test`: schemathesis (PyPI, pinned) against the gateway's
# /openapi.json on a real local cluster (`quire standalone`), every check on
# (`-c all`: server errors, status codes and bodies against the schema,
# schema-valid requests accepted and invalid ones refused, methods a path
# does not serve, the stateful phase over the links it infers), zero
# failures. The document is generated from the route table (openapi.rs), so
# a route and its schema cannot drift; this finds where the schema and the
# server disagree. Overrides, each with its reason: schemathesis.toml.
#
# Env: SEED (fixed, so a run is repeatable; SEED=random for a new search),
# EXAMPLES (50 per operation), VENV (target/schemathesis-venv).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VERSION=4.32.5
VENV=${VENV:-$ROOT/target/schemathesis-venv}
EXAMPLES=${EXAMPLES:-50}
SEED=${SEED:-20261207}
WORK=$(mktemp -d /tmp/quire-api-check.XXXXXX)
HTTP=127.0.0.1:18480
fail() { echo "api check: $*" >&2; exit 1; }
. "$ROOT/loadtest/standalone.sh"

. "$ROOT/deploy/local/venv.sh"
ensure_venv "$VENV" "schemathesis==$VERSION" || fail "no schemathesis $VERSION (above)"

start_standalone "$WORK/cluster" "$HTTP" 400

seed=(--seed "$SEED"); [ "$SEED" = random ] && seed=()
# From the scratch folder: schemathesis keeps a cache (.schemathesis/) where it runs.
# One worker: with two, hypothesis describes its filters with ast.parse from
# two threads at once, and CPython 3.11's parser then fails now and then with
# "SystemError: AST constructor recursion depth mismatch" (a schemathesis
# Runtime Error that fails the run; seen twice in six runs here).
cd "$WORK"
# Two runs. A log's records routes go alone, without the check that
# schema-valid data is accepted: a conditional append (expected_offset)
# whose offset is not the log's next is 412 PreconditionFailed, a state of
# the log that generated offsets meet at random, and the pinned version
# reports its default list of accepted statuses for that check whatever
# schemathesis.toml says (per operation, per phase, globally: tried). The
# 412 and its body are tested in services/gateway/tests/http.rs. Every
# other route, and every other check on these two, runs as before.
RECORDS='^/v1/logs/\{name\}/records(:batch)?$'
# hooks.py adds a check of quire's own to every phase: no error answer
# names an internal address (issue #49).
run_st() {
  PYTHONPATH="$ROOT/loadtest/api" SCHEMATHESIS_HOOKS=hooks "$VENV/bin/schemathesis" --no-color --config-file "$ROOT/loadtest/api/schemathesis.toml" \
    run "http://$HTTP/openapi.json" --checks all --workers 1 --max-examples "$EXAMPLES" "${seed[@]}" "$@" \
    >> "$WORK/schemathesis.txt" 2>&1
}
if ! run_st --exclude-path-regex "$RECORDS" || ! run_st --include-path-regex "$RECORDS" --exclude-checks positive_data_acceptance; then
  cat "$WORK/schemathesis.txt"
  fail "schemathesis found failures (above; the cluster's log is in $WORK)"
fi
grep -E "^Test cases:|generated" "$WORK/schemathesis.txt" | tail -4
echo "api check: ok"
stop_standalone
rm -rf "$WORK"
