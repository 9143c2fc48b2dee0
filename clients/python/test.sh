#!/usr/bin/env bash
# Part of `make test`: the Python client (clients/python).
#  1. The typed layer is what the gateway's document generates, and the
#     generator warns about nothing (generate.sh --check; the document
#     itself is checked against the routes by a gateway unit test).
#  2. The hand-written layer passes ruff (lint and format).
#  3. `pip install ./clients/python` into a virtualenv, offline (no
#     index: the checkout and the environment's httpx, attrs and
#     setuptools are all it takes), then its pytest
#     suite from a copy of the tests outside the checkout, so what is
#     tested is what pip installed, against a real `quire standalone`
#     the suite starts (QUIRE_URL: against a running one instead).
#
# Env: VENV (target/pyclient-venv). Needs `make build` (target/release/quire).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV=${VENV:-$ROOT/target/pyclient-venv}
. "$HERE/tools.sh"
ensure_tools "$VENV"

bash "$HERE/generate.sh" --check
RUFF_NO_CACHE=true "$VENV/bin/ruff" check --quiet "$HERE/quire" "$HERE/tests"
RUFF_NO_CACHE=true "$VENV/bin/ruff" format --check --quiet "$HERE/quire" "$HERE/tests"

WORK=$(mktemp -d /tmp/quire-pyclient-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# From a copy: setuptools builds in the folder it installs from (build/,
# *.egg-info), and a stale build/ in the checkout could ship a module
# deleted since.
mkdir "$WORK/src"
(cd "$HERE" && cp -r pyproject.toml README.md quire "$WORK/src/")
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
# Offline: from the checkout alone, nothing fetched (no index, the
# build backend the environment has), as on a machine without PyPI.
"$VENV/bin/pip" install -q --no-index --no-build-isolation --force-reinstall --no-deps "$WORK/src"
"$VENV/bin/pip" check > /dev/null || { "$VENV/bin/pip" check >&2; exit 1; }
cp -r "$HERE/tests" "$WORK/tests"
cd "$WORK"
where=$("$VENV/bin/python" -c 'import quire; print(quire.__file__)')
case "$where" in
  "$VENV"/*) ;;
  *) echo "clients/python/test.sh: quire was imported from $where, not the installed package" >&2; exit 1 ;;
esac
# Every module of both layers imports with warnings as errors.
"$VENV/bin/python" -W error -c '
import importlib, pkgutil, quire
names = [m.name for m in pkgutil.walk_packages(quire.__path__, "quire.")]
for name in names:
    importlib.import_module(name)
assert len(names) > 60, names
print(f"clients/python/test.sh: {len(names)} modules import with warnings as errors")
'
QUIRE_BIN=${QUIRE_BIN:-$ROOT/target/release/quire} "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests
