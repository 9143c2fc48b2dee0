"""Logs through the Python client, against a real cluster."""

from __future__ import annotations

import threading

import pytest

import quire
from quire import errors

from .proxy import Proxy


def test_a_log_is_created_appended_read_and_listed(client: quire.Client, name: str) -> None:
    log = client.create_log(name, rollover={"max_entries": 3})
    payloads = [b"", b"\x00\xffbinary\n", "ünïcode".encode(), b"x" * 5000]
    offsets = [log.append(p) for p in payloads]
    assert offsets == [0, 1, 2, 3]
    assert log.append_batch([b"b0", b"b1", b"b2"]) == [4, 5, 6]
    page = log.read(0)
    assert [r.data for r in page.records] == payloads + [b"b0", b"b1", b"b2"]
    assert [r.offset for r in page.records] == list(range(7))
    assert page.next_offset == 7
    # Every record carries the handle's producer and its own sequence.
    assert {r.producer_id for r in page.records} == {log.producer_id}
    assert [r.sequence for r in page.records] == list(range(7))
    assert all(a.time_ms <= b.time_ms for a, b in zip(page.records, page.records[1:]))
    assert log.read(5, limit=1).records[0].data == b"b1"
    info = log.info()
    assert info.name == name and len(info.ledgers) >= 2, "rolled over after 3 records"
    client.create_log(name + "-b")
    assert {name, name + "-b"} <= set(client.logs(page_size=1)), "listed a page of one at a time"
    assert log.exists()


def test_an_append_whose_answer_is_lost_is_retried_and_written_once(quire_url: str, proxy: Proxy, name: str) -> None:
    quire.Client(quire_url).create_log(name)
    with quire.Client(proxy.url, retry=quire.RetryPolicy(deadline_s=20)) as c:
        log = c.log(name)
        proxy.lose_next_answers(1)
        assert log.append(b"once") == 0
        assert proxy.connections >= 2, "the first answer was lost, so the append was sent again"
        before = proxy.connections
        proxy.lose_next_answers(1)
        assert log.append_batch([b"two", b"three"]) == [1, 2]
        assert proxy.connections > before, "the batch's first answer was lost too"
        assert log.append(b"four") == 3
        records = log.read(0).records
    assert [r.data for r in records] == [b"once", b"two", b"three", b"four"], "each written once"


def test_an_append_that_failed_unknown_spends_its_sequence(quire_url: str, proxy: Proxy, name: str) -> None:
    """An append whose outcome is unknown when its retries run out may have
    been written: the next append must not reuse its sequence (it would be
    answered as that one's duplicate, and not written)."""
    quire.Client(quire_url).create_log(name)
    with quire.Client(proxy.url, retry=quire.RetryPolicy(deadline_s=0)) as c:
        log = c.log(name)
        proxy.lose_next_answers(1)
        with pytest.raises(errors.Unavailable):
            log.append(b"unknown")
        assert log.append(b"next") == 1
        assert [r.data for r in log.read(0).records] == [b"unknown", b"next"]


def test_an_idempotent_batch_is_at_most_the_producer_window(client: quire.Client, name: str) -> None:
    """The gateway recognises a retry by its first record's sequence while
    the producer's window (16 sequences) holds it: a longer batch, once
    written, would be refused as too old on a retry. Refused before it is
    sent; without a producer it may be as long as the gateway takes."""
    log = client.create_log(name)
    with pytest.raises(errors.BadRequest) as e:
        log.append_batch([b"r"] * (quire.log.PRODUCER_WINDOW + 1))
    assert "idempotent=False" in e.value.message
    assert log.next_sequence == 0, "nothing was sent, nothing spent"
    assert len(log.append_batch([b"r"] * quire.log.PRODUCER_WINDOW)) == 16
    assert len(log.append_batch([b"s"] * 100, idempotent=False)) == 100


def test_an_append_without_a_producer_is_not_retried(quire_url: str, proxy: Proxy, name: str) -> None:
    quire.Client(quire_url).create_log(name)
    with quire.Client(proxy.url) as c:
        proxy.lose_next_answers(1)
        with pytest.raises(errors.Unavailable):
            c.log(name).append(b"maybe", idempotent=False)
        # It was written: sending it again would have written it twice.
        assert [r.data for r in c.log(name).read(0).records] == [b"maybe"]


def test_a_producer_kept_across_handles_is_deduplicated(client: quire.Client, name: str) -> None:
    client.create_log(name)
    first = client.log(name).with_producer("orders-service-1", next_sequence=10)
    assert first.append(b"a") == 0
    # A restarted application with the same producer and sequence: the
    # gateway answers the first offset and writes nothing.
    again = client.log(name).with_producer("orders-service-1", next_sequence=10)
    assert again.append(b"a") == 0
    assert again.next_sequence == 11
    assert len(client.log(name).read(0).records) == 1
    # Older than the producer's window: refused, not written.
    old = client.log(name).with_producer("orders-service-1", next_sequence=0)
    for i in range(20):
        again.append(b"n%d" % i)
    with pytest.raises(errors.SequenceTooOld) as e:
        old.append(b"late")
    assert e.value.status == 409


def test_a_conditional_append_meets_another_offset(client: quire.Client, name: str) -> None:
    log = client.create_log(name)
    assert log.append(b"r0", expected_offset=0) == 0
    with pytest.raises(errors.PreconditionFailed) as e:
        log.append(b"r?", expected_offset=0)
    assert (e.value.status, e.value.next_offset) == (412, 1)
    assert log.append_batch([b"r1", b"r2"], expected_offset=1) == [1, 2]
    assert len(log.read(0).records) == 3


def test_bad_input_raises_the_apis_error(client: quire.Client, name: str) -> None:
    missing = client.log(name)
    assert not missing.exists()
    with pytest.raises(errors.NoSuchLog) as e:
        missing.read(0)
    assert (e.value.status, e.value.code) == (404, "NoSuchLog")
    with pytest.raises(errors.NoSuchLog):
        missing.append(b"x")
    with pytest.raises(errors.NoSuchLog):
        next(iter(missing.follow(0)))
    log = client.create_log(name)
    with pytest.raises(errors.LogExists):
        client.create_log(name)
    for bad in ["a/b", "..", ".", "x" * 129, ""]:
        with pytest.raises(errors.BadRequest):
            client.log(bad).info()
    with pytest.raises(errors.BadRequest):
        client.create_log(name + "-q", ensemble=2, write_quorum=3)
    # One byte past the gateway's limit (4 MiB): refused, nothing written.
    with pytest.raises(errors.EntryTooLarge) as e:
        log.append(b"z" * ((4 << 20) + 1))
    assert e.value.status == 413
    with pytest.raises(TypeError):
        log.append("text is not bytes")  # type: ignore[arg-type]
    assert log.read(0).records == []
    # A log's ledger goes with the log, not alone: 409 LedgerInLog.
    ledger_id = log.info().ledgers[0].ledger_id
    with pytest.raises(errors.LedgerInLog) as e:
        client.ledger(ledger_id).delete()
    assert e.value.status == 409 and "trim the log" in e.value.message
    log.delete()
    assert not log.exists()


def test_a_trimmed_offset_is_gone(client: quire.Client, name: str) -> None:
    log = client.create_log(name, rollover={"max_entries": 2})
    for i in range(6):
        log.append(b"r%d" % i)
    assert log.trim(4).trim_before == 4
    with pytest.raises(errors.Trimmed) as e:
        log.read(0)
    assert e.value.status == 410
    with pytest.raises(errors.Trimmed):
        next(iter(log.follow(1)))
    assert [r.offset for r in log.read(4).records] == [4, 5]


def test_follow_resumes_where_it_stopped_after_a_dropped_connection(
    quire_url: str, proxy: Proxy, client: quire.Client, name: str
) -> None:
    log = client.create_log(name)
    for i in range(3):
        log.append(b"r%d" % i)
    got: list[quire.Record] = []
    three, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []
    polls: list[int] = []

    def follow() -> None:
        try:
            with quire.Client(proxy.url) as c:
                for record in c.log(name).follow(from_offset=0, wait_ms=10_000):
                    got.append(record)
                    if len(got) == 3:
                        polls.append(proxy.requests)
                        three.set()
                    if len(got) == 6:
                        break
        except BaseException as e:  # noqa: BLE001 - the test reports it
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=follow, daemon=True).start()
    # Cut while it waits at the tail in its next long poll: once that poll
    # has passed through the proxy.
    assert three.wait(30), f"the follower read {len(got)} of 3: {failed}"
    assert proxy.wait_requests(polls[0], 10), "the follower's next poll never came"
    assert proxy.cut() >= 1
    for i in range(3, 6):
        log.append(b"r%d" % i)
    assert done.wait(60), f"the follower read {len(got)} of 6"
    assert not failed, failed
    assert [(r.offset, r.data) for r in got] == [(i, b"r%d" % i) for i in range(6)]
    assert proxy.connections >= 2, "the cut follower connected again"


def test_a_cursor_reads_acknowledges_and_seeks(client: quire.Client, name: str) -> None:
    log = client.create_log(name)
    log.append_batch([b"a", b"b", b"c", b"d"])
    cursor = log.create_cursor("billing", start="start", holds_retention=True)
    assert cursor.position == 0
    assert [r.data for r in cursor.read(limit=2).records] == [b"a", b"b"]
    assert cursor.ack(2).position == 2
    assert cursor.ack(1).position == 2, "an acknowledgement only moves forward"
    # It holds retention: a trim past it is refused.
    with pytest.raises(errors.BadRequest):
        log.trim(3)
    seen = []
    for record in cursor.follow():
        seen.append(record.data)
        cursor.ack(record.offset + 1)
        if record.offset == 3:
            break
    assert seen == [b"c", b"d"] and cursor.position == 4
    assert cursor.seek(1).position == 1
    assert log.create_cursor("tail", start="end").position == 4
    cursor.delete()
    with pytest.raises(errors.NoSuchCursor):
        cursor.info()
