# Sourced by make test's Python tools (schemathesis, the Python client,
# kubernetes-validate): a virtualenv holding exactly the pinned packages
# (PyPI), made once and again when a pin changes.
#   ensure_venv DIR PIN...   (returns non-zero, having said why, on failure)
ensure_venv() {
  local venv=$1
  shift
  if [ "$(cat "$venv/.pins" 2> /dev/null)" != "$*" ]; then
    python3 -m venv "$venv" || { echo "python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; return 1; }
    "$venv/bin/pip" install -q "$@" || { echo "pip install $* failed" >&2; return 1; }
    echo "$*" > "$venv/.pins"
  fi
}
