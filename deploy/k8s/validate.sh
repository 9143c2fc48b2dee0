#!/usr/bin/env bash
# Part of `make test`: every manifest in deploy/k8s against Kubernetes' own
# schemas (kubernetes-validate, PyPI, pinned; strict: an unknown field is an
# error), for the oldest version the manifests need (1.28: the pod-index
# label ids come from) and the newest the tool knows. A misspelt field must
# fail it, so a broken manifest is checked to fail first.
#
# Env: VENV (target/k8s-venv).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-$ROOT/target/k8s-venv}
PIN="kubernetes-validate==1.37.0"
VERSIONS="1.28.0 1.37.0"
. "$ROOT/deploy/local/venv.sh"
ensure_venv "$VENV" "$PIN" || exit 1
WORK=$(mktemp -d /tmp/quire-k8s.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The control: a budget with a misspelt field is refused.
sed 's/maxUnavailable:/maxUnavailabel:/' "$ROOT/deploy/k8s/50-disruption.yaml" > "$WORK/misspelt.yaml"
if "$VENV/bin/kubernetes-validate" --strict --quiet "$WORK/misspelt.yaml" > "$WORK/control.txt" 2>&1; then
  echo "k8s validate: a misspelt manifest passed: the validator checks nothing" >&2
  exit 1
fi
grep -q "maxUnavailabel" "$WORK/control.txt" || { cat "$WORK/control.txt" >&2; echo "k8s validate: the misspelt manifest failed for another reason (above)" >&2; exit 1; }

for v in $VERSIONS; do
  if ! "$VENV/bin/kubernetes-validate" -k "$v" --strict --quiet "$ROOT"/deploy/k8s/*.yaml > "$WORK/out.txt" 2>&1; then
    cat "$WORK/out.txt" >&2
    echo "k8s validate: deploy/k8s fails Kubernetes $v's schemas (above)" >&2
    exit 1
  fi
  # Warnings (a deprecated field) fail it too.
  if grep -q . "$WORK/out.txt"; then
    cat "$WORK/out.txt" >&2
    echo "k8s validate: warnings against Kubernetes $v (above)" >&2
    exit 1
  fi
done
n=$(grep -c '^kind:' "$ROOT"/deploy/k8s/*.yaml | awk -F: '{ s += $2 } END { print s }')
echo "k8s validate: $n resources in deploy/k8s pass Kubernetes $VERSIONS (strict)"
