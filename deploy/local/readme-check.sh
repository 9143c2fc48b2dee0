#!/usr/bin/env bash
# Runs README.md's "Against `make run`'s cluster" lines as written, against
# the cluster `make run` starts (deploy/local/run.sh), in a scratch
# directory that looks like the repository's root to them (target/,
# Makefile and loadtest/ linked; data/ its own). Every line must succeed,
# except the one the README says is refused (decommission with three
# bookies), which must be refused for the reason it gives. The one change
# made to a line: the load test's run is 10 s, not 60 (a later RUN_TIME=
# on make's command line wins).
#
# Usage: deploy/local/readme-check.sh   (make test runs it; needs `make build`
# and `make loadtest-build`, and the ports make run uses: 8080, 3181-3183,
# 4181-4183 free)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "$ROOT/target/readme-check.XXXXXX")
ln -s "$ROOT/target" "$WORK/target"
ln -s "$ROOT/Makefile" "$WORK/Makefile"
ln -s "$ROOT/loadtest" "$WORK/loadtest"
cd "$WORK"

# The block: from the line that introduces it to its closing fence.
awk '/^Against `make run`/ { f = 1 } f && /^```sh/ { g = 1; next } g && /^```/ { exit } g' "$ROOT/README.md" > lines.sh
if [ "$(grep -c . lines.sh)" -lt 10 ]; then
  echo "readme-check: README's block against make run's cluster not found (or shorter than 10 lines)" >&2
  exit 1
fi

bash "$ROOT/deploy/local/run.sh" "$WORK/data" > run.log 2>&1 &
RUN=$!
cleanup() {
  kill -INT "$RUN" 2>/dev/null || true
  wait "$RUN" 2>/dev/null || true
  cd "$ROOT"
  rm -rf "$WORK"
}
trap cleanup EXIT
# Liveness only: the cluster says it is up (run.sh prints it once its first
# ledger is written and read back), or the run has failed.
for _ in $(seq 120); do
  grep -q "quire standalone up" run.log && break
  if ! kill -0 "$RUN" 2>/dev/null; then
    echo "readme-check: make run's cluster exited:" >&2
    cat run.log >&2
    exit 1
  fi
  sleep 1
done
grep -q "quire standalone up" run.log || { echo "readme-check: the cluster did not come up in 120 s" >&2; cat run.log >&2; exit 1; }

n=0
while IFS= read -r line; do
  n=$((n + 1))
  # A line that only continues the comment above it.
  [[ "$line" =~ ^[[:space:]]*# ]] && continue
  [ -z "${line// /}" ] && continue
  cmd=$line
  # Before the line's comment, if it has one.
  [[ "$cmd" == make\ loadtest* ]] && cmd="${cmd%%#*} RUN_TIME=10s"
  echo "readme-check: [$SECONDS s] line $n: $cmd"
  # Each line runs in this shell, so its variables ($M, $L, ...) reach the next.
  set +eu
  eval "$cmd" > out.txt 2> err.txt < /dev/null
  rc=$?
  set -eu
  out=$(cat out.txt)
  # curl's progress meter goes to stderr; errors name themselves there too.
  { cat out.txt; grep -v -e '% Total' -e 'Dload' -e '^ *[0-9]* *[0-9]* *[0-9]* ' err.txt || true; } | sed -n '1,20s/^/    /p'
  out="$out$(cat err.txt)"
  if [[ "$line" == *"bookie "*"decommission"* ]]; then
    # The README: refused while the other bookies could not hold its ledgers.
    if [ "$rc" -eq 0 ] || [[ "$out" != *"add a bookie first"* ]]; then
      echo "readme-check: line $n should be refused (3 bookies, E=3) with the reason, but exited $rc" >&2
      exit 1
    fi
  elif [ "$rc" -ne 0 ]; then
    echo "readme-check: line $n failed (exit $rc): $line" >&2
    exit 1
  fi
  case "$line" in
    L=*) [ -n "$L" ] || { echo "readme-check: line $n gave no ledger id" >&2; exit 1; } ;;
    O=*) [ -n "$O" ] || { echo "readme-check: line $n gave no ledger id" >&2; exit 1; } ;;
    H=*) [ -n "$H" ] || { echo "readme-check: line $n gave no ledger id" >&2; exit 1; } ;;
    *"entries/0"*) [ "$(cat out.txt)" = hello ] || { echo "readme-check: line $n read back '$(cat out.txt)', not hello" >&2; exit 1; } ;;
    *"/v1/ledgers/"*"follow=true"*) [[ "$(cat out.txt)" == *'{"closed":true,"last_entry_id":4}'* ]] || { echo "readme-check: line $n did not follow ledger $L to its close" >&2; exit 1; } ;;
    # Logs: the five records at offsets 0..4 (read from 2 across the rollover),
    # an idempotent retry answered with its first offset, a follow answered.
    *" log "*" append orders"*) [ "$(tr '\n' ' ' < out.txt)" = "0 1 2 3 4 " ] || { echo "readme-check: line $n printed offsets '$(cat out.txt)', not 0..4" >&2; exit 1; } ;;
    *" log "*" read orders --from 2"*) [ "$(cut -f1 out.txt | tr '\n' ' ')" = "2 3 4 " ] || { echo "readme-check: line $n read offsets '$(cut -f1 out.txt)', not 2 3 4" >&2; exit 1; } ;;
    *"/v1/logs/events/records?producer_id"*) [ "$(cat out.txt)" = '{"offset":0}' ] || { echo "readme-check: line $n answered '$(cat out.txt)', not offset 0" >&2; exit 1; } ;;
    *"/v1/logs/events/records?from=0&follow=true"*) [[ "$(cat out.txt)" == *'"offset":0'* ]] || { echo "readme-check: line $n did not read the log's record" >&2; exit 1; } ;;
    *" tail --ledger"*) [[ "$out" == *"closed at entry 4"* ]] || { echo "readme-check: line $n did not follow ledger $L to its close" >&2; exit 1; } ;;
    *"recover --ledger"*) [[ "$out" == *'"state":"closed"'* ]] || { echo "readme-check: line $n did not close the ledger" >&2; exit 1; } ;;
  esac
done < lines.sh
echo "readme-check: [$SECONDS s] README's $(grep -c . lines.sh) lines against make run's cluster ran as written"

# The Python quickstart, as written: its install line (pip, the one of the
# Python client's virtualenv first on PATH), then its program against the
# same cluster, whose printed lines are what its comments say.
. "$ROOT/clients/python/tools.sh"
PYVENV=${PYVENV:-$ROOT/target/pyclient-venv}
ensure_tools "$PYVENV"
# A copy, not a link: pip builds in the folder it installs from.
mkdir -p "$WORK/clients/python"
(cd "$ROOT/clients/python" && cp -r pyproject.toml README.md quire "$WORK/clients/python/")
awk '/^From Python/ { f = 1 } f && /^```sh/ { g = 1; next } g && /^```/ { exit } g' "$ROOT/README.md" > py-install.sh
awk '/^From Python/ { f = 1 } f && /^```python/ { g = 1; next } g && /^```/ { exit } g' "$ROOT/README.md" > quickstart.py
[ "$(cat py-install.sh)" = "pip install ./clients/python" ] || { echo "readme-check: the Python install line is '$(cat py-install.sh)'" >&2; exit 1; }
[ "$(grep -c . quickstart.py)" -ge 10 ] || { echo "readme-check: README's Python quickstart not found" >&2; exit 1; }
echo "readme-check: [$SECONDS s] $(cat py-install.sh)"
PATH="$PYVENV/bin:$PATH" bash py-install.sh > out.txt 2>&1 || { cat out.txt >&2; echo "readme-check: the Python client did not install" >&2; exit 1; }
echo "readme-check: [$SECONDS s] the Python quickstart"
"$PYVENV/bin/python" quickstart.py > out.txt 2>&1 || { cat out.txt >&2; echo "readme-check: the Python quickstart failed" >&2; exit 1; }
sed 's/^/    /' out.txt
want=$'0\n[1, 2]\nnext offset is 3\n1 b\'second\'\n2 b\'third\'\n[b\'hello\']'
[ "$(cat out.txt)" = "$want" ] || { echo "readme-check: the Python quickstart printed the above, not what its comments say" >&2; exit 1; }
echo "readme-check: [$SECONDS s] the Python quickstart ran as written"
