#!/usr/bin/env bash
# The fault suite's negative control (issue #45): the same harness with every
# metadata replica and bookie under Debian's eatmydata (fsync, fdatasync and
# sync_file_range made no-ops) and a power cut of every storage node. What
# was acknowledged then lived only in page caches that the cut drops, so the
# run must fail its checks (an acknowledged entry, record or ledger lost); a pass means the power-loss nemesis cannot see a
# loss, and the suite's passes would prove nothing. Exit 0 when the run
# failed as it must (status 1, a report with failures), 1 otherwise.
set -uo pipefail
BIN=${BIN:-target/release/quire-jepsen}
SEED=${SEED:-98}
SECS=${SECS:-24}
DIR=$(mktemp -d /tmp/quire-jepsen-negative-XXXXXX)
"$BIN" --seed "$SEED" --duration-secs "$SECS" --finale-secs 30 --eatmydata --dir "$DIR" > "$DIR/stdout.txt" 2>&1
status=$?
if [ "$status" -eq 1 ] && [ -f "$DIR/report.txt" ] && grep -qE "VIOLATION (LostAck|ChangedAck|Unrecoverable|LostRecord)|never recovered and read back" "$DIR/report.txt"; then
  echo "negative control: the run under eatmydata failed as it must:"
  grep -E "power loss all|VIOLATION|RUN FAILED" "$DIR/report.txt" | head -8
  rm -rf "$DIR"
  exit 0
fi
echo "negative control: the run under eatmydata did not fail its checks (status $status); kept in $DIR"
tail -30 "$DIR/stdout.txt"
exit 1
