"""The cluster the client's tests run against: a real `quire standalone`
(3 metadata replicas, 3 bookies, auditor, replication worker, gateway as
processes, over QUIC with mTLS), started once for the session; or, with
QUIRE_URL set, a cluster that is already running (make run's)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import quire

from .proxy import Proxy

ROOT = Path(__file__).resolve().parents[3]
HTTP = "127.0.0.1:18580"
PORT_OFFSET = "500"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
            return json.load(r).get("bookies") == 3
    except OSError:
        return False


@pytest.fixture(scope="session")
def quire_url() -> Iterator[str]:
    if os.environ.get("QUIRE_URL"):
        yield os.environ["QUIRE_URL"].rstrip("/")
        return
    binary = Path(os.environ.get("QUIRE_BIN", ROOT / "target" / "release" / "quire"))
    if not binary.exists():
        pytest.fail(f"{binary} is missing: build it first (make build), or set QUIRE_URL to a running gateway")
    data = Path(tempfile.mkdtemp(prefix="quire-pyclient."))
    with open(data / "standalone.log", "w") as log:
        proc = subprocess.Popen(
            [
                str(binary),
                "standalone",
                "--data-dir",
                str(data / "cluster"),
                "--http",
                HTTP,
                "--port-offset",
                PORT_OFFSET,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{HTTP}"
    deadline = time.monotonic() + 60
    while not _ready(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"quire standalone did not become ready: {(data / 'standalone.log').read_text()[-3000:]}")
        time.sleep(0.2)
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def client(quire_url: str) -> Iterator[quire.Client]:
    with quire.Client(quire_url, timeout_s=15) as c:
        yield c


@pytest.fixture
def proxy(quire_url: str) -> Iterator[Proxy]:
    """A TCP proxy in front of the gateway whose connections a test cuts."""
    host, port = quire_url.removeprefix("http://").rsplit(":", 1)
    p = Proxy((host, int(port)))
    try:
        yield p
    finally:
        p.close()


_names = iter(range(1_000_000))


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A log name of this test's own."""
    base = request.node.name.replace("test_", "").replace("[", "-").replace("]", "")[:80]
    return f"py-{base}-{os.getpid()}-{next(_names)}"
