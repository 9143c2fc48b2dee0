# Sourced by clients/python's scripts: a virtualenv with the pinned tools
# (PyPI): the generator and its formatter, pytest, and what the client
# itself needs to install and run (pyproject.toml: setuptools to build it,
# httpx and attrs). Installed once, again when a pin changes.
PYCLIENT_PINS="openapi-python-client==0.29.1 ruff==0.17.5 pytest==9.2.0 httpx==0.28.1 attrs==26.1.0 setuptools==84.2.1"
ensure_tools() {
  local venv=$1
  if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$PYCLIENT_PINS" ]; then
    python3 -m venv "$venv" || { echo "python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; return 1; }
    # shellcheck disable=SC2086
    "$venv/bin/pip" install -q $PYCLIENT_PINS || { echo "pip install $PYCLIENT_PINS failed" >&2; return 1; }
    echo "$PYCLIENT_PINS" > "$venv/.pins"
  fi
}
