# Sourced by clients/python's scripts: a virtualenv with the pinned tools
# (PyPI): the generator and its formatter, pytest, and what the client
# itself needs to install and run (pyproject.toml: setuptools to build it,
# httpx and attrs). Installed once, again when a pin changes.
PYCLIENT_PINS=(openapi-python-client==0.29.1 ruff==0.17.5 pytest==9.2.0 httpx==0.28.1 attrs==26.1.0 setuptools==84.2.1)
. "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/venv.sh"
ensure_tools() {
  ensure_venv "$1" "${PYCLIENT_PINS[@]}"
}
