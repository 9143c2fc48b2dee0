# Sourced by make test's shell checks (loadtest/smoke.sh, loadtest/api/check.sh):
# a `quire standalone` cluster of their own, started, waited for, stopped.
#   start_standalone DIR HTTP OFFSET   (needs ROOT and a fail function)
#   stop_standalone                    (also on EXIT, however the script ends)
# Ready means the metadata service answers and all three bookies registered
# (before that, creating an E=3 ledger is refused).
STANDALONE_PID=
stop_standalone() {
  if [ -n "$STANDALONE_PID" ]; then
    kill "$STANDALONE_PID" 2>/dev/null || true
    wait "$STANDALONE_PID" 2>/dev/null || true
  fi
  STANDALONE_PID=
  return 0
}
trap stop_standalone EXIT

start_standalone() {
  local dir=$1 http=$2 offset=$3
  "$ROOT/target/release/quire" standalone --data-dir "$dir" --http "$http" --port-offset "$offset" \
    > "$dir.log" 2>&1 &
  STANDALONE_PID=$!
  local ready=0
  for _ in $(seq 1 120); do
    if curl -sf "http://$http/readyz" 2>/dev/null | grep -q '"bookies":3'; then ready=1; break; fi
    kill -0 "$STANDALONE_PID" 2>/dev/null || { tail -20 "$dir.log"; fail "the cluster exited"; }
    sleep 0.5
  done
  [ "$ready" = 1 ] || fail "the gateway did not become ready with three bookies"
}
