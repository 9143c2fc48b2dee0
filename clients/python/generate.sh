#!/usr/bin/env bash
# The typed layer of the Python client (clients/python/quire/_api) is
# generated from the gateway's OpenAPI document (clients/python/openapi.json,
# which a gateway unit test keeps equal to the routes) by
# openapi-python-client, pinned here with its formatter.
#
#   generate.sh           write quire/_api anew (make python-client)
#   generate.sh --check   regenerate into a scratch folder and fail if the
#                         checked-in code differs, or the generator warned
#                         (make test)
#
# Env: VENV (target/pyclient-venv), where the pinned tools are installed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV=${VENV:-$ROOT/target/pyclient-venv}
. "$HERE/tools.sh"
ensure_tools "$VENV"

WORK=$(mktemp -d /tmp/quire-pygen.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# From the scratch folder, with the pinned ruff first on PATH.
(cd "$WORK" && RUFF_NO_CACHE=true PATH="$VENV/bin:$PATH" "$VENV/bin/openapi-python-client" generate \
  --path "$HERE/openapi.json" --meta none --config "$HERE/generator.yaml" --output-path "$WORK/_api") \
  > "$WORK/generator.txt" 2>&1 || { cat "$WORK/generator.txt" >&2; echo "generate.sh: the generator failed" >&2; exit 1; }
# Anything it says beyond the folder it generated is a warning ("some
# pieces may be missing", an unsupported schema): the document must give it
# none.
if grep -v -e "^Generating " -e '^$' "$WORK/generator.txt" | grep -q .; then
  cat "$WORK/generator.txt" >&2
  echo "generate.sh: the generator warned about openapi.json (above)" >&2
  exit 1
fi

if [ "${1:-}" = --check ]; then
  if ! diff -r -u -x __pycache__ "$HERE/quire/_api" "$WORK/_api" > "$WORK/diff.txt"; then
    head -60 "$WORK/diff.txt" >&2
    echo "generate.sh: clients/python/quire/_api is not what openapi.json generates: run make python-client" >&2
    exit 1
  fi
  echo "generate.sh: the typed layer is what openapi.json generates"
else
  rm -rf "$HERE/quire/_api"
  cp -r "$WORK/_api" "$HERE/quire/_api"
  echo "generate.sh: wrote clients/python/quire/_api"
fi
