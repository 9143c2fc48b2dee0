"""Ledgers through the Python client, against a real cluster."""

from __future__ import annotations

import threading

import pytest

import quire
from quire import errors

from .proxy import Proxy


def test_a_ledger_is_written_read_closed_and_deleted(client: quire.Client) -> None:
    ledger = client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, metadata={"app": "py"})
    assert ledger.append(b"\x00first") == 0
    assert ledger.append_batch([b"b1", b"b2", b""]) == range(1, 4)
    assert ledger.lac() == 3
    assert [(e.entry_id, e.data) for e in ledger.read(0)] == [(0, b"\x00first"), (1, b"b1"), (2, b"b2"), (3, b"")]
    assert [e.entry_id for e in ledger.read(1, 2)] == [1, 2]
    assert ledger.read_entry(1) == b"b1"
    info = ledger.info()
    assert (info.state, info.write_quorum, info.metadata["app"]) == ("open", 2, "py")
    other = client.create_ledger()
    assert {ledger.ledger_id, other.ledger_id} <= set(client.ledgers(page_size=1)), "listed a page of one at a time"
    other.close()
    assert ledger.close().state == "closed"
    with pytest.raises(errors.LedgerClosed):
        ledger.append(b"late")
    assert ledger.close().last_entry_id == 3, "closing a closed ledger is a no-op"
    assert [e.data for e in ledger.follow(0)] == [b"\x00first", b"b1", b"b2", b""], "a closed ledger's follow ends"
    ledger.delete()
    with pytest.raises(errors.NoSuchLedger):
        ledger.info()


def test_bad_input_raises_the_apis_error(client: quire.Client) -> None:
    missing = client.ledger(2**62)
    for call in (missing.info, missing.lac, lambda: missing.read(0), lambda: missing.append(b"x"), missing.delete):
        with pytest.raises(errors.NotFound) as e:
            call()
        assert e.value.status == 404
    with pytest.raises(errors.BadRequest):
        client.create_ledger(ensemble=2, write_quorum=3)
    ledger = client.create_ledger()
    with pytest.raises(errors.EntryTooLarge):
        ledger.append(b"z" * ((4 << 20) + 1))
    with pytest.raises(errors.NoSuchEntry):
        ledger.read_entry(0)
    assert ledger.lac() == -1, "nothing refused was written"
    ledger.close()


def test_follow_resumes_where_it_stopped_after_a_dropped_connection(proxy: Proxy, client: quire.Client) -> None:
    ledger = client.create_ledger()
    for i in range(2):
        ledger.append(b"e%d" % i)
    got: list[quire.Entry] = []
    two, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            with quire.Client(proxy.url) as c:
                for entry in c.ledger(ledger.ledger_id).follow(0):
                    got.append(entry)
                    if len(got) == 2:
                        two.set()
        except BaseException as e:  # noqa: BLE001 - the test reports it
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=follow, daemon=True).start()
    assert two.wait(30), f"the follower read {len(got)} of 2: {failed}"
    # The stream is open, waiting for the LAC to move: cut it.
    assert proxy.cut() >= 1
    for i in range(2, 5):
        ledger.append(b"e%d" % i)
    ledger.close()
    assert done.wait(60), f"the follower read {len(got)} of 5 and did not see the close"
    assert not failed, failed
    assert [(e.entry_id, e.data) for e in got] == [(i, b"e%d" % i) for i in range(5)]
    assert proxy.connections >= 2, "the cut stream was opened again"
