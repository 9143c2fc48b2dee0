"""Logs: named, ordered records at offsets, over a chain of ledgers."""

from __future__ import annotations

import base64
import io
import re
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import errors
from ._api.api.cursors import ack_cursor, delete_cursor, get_cursor, put_cursor
from ._api.api.logs import append_record, append_records, delete_log, get_log, read_records, take_over_log, trim_log
from ._api.models import AckCursorBody, AppendRecordsBody, LogRecords, PutCursorBody, PutCursorBodyFrom, TrimLogBody
from ._api.models import Cursor as CursorInfo
from ._api.models import Log as LogInfo
from ._api.types import File
from ._call import invoke

if TYPE_CHECKING:
    from .client import Client

#: A log's or a cursor's name, as the API takes it (and not "." or "..").
NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _checked_name(name: str, what: str) -> str:
    """`name`, or BadRequest before a request is made: "." and ".." would
    move the URL's path, and the gateway refuses any other bad name too."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in (".", ".."):
        raise errors.BadRequest(f"{what} {name!r} is 1 to 128 of A-Z a-z 0-9 . _ -, and not . or ..", code="BadRequest")
    return name


#: Sequences a producer's window holds at the gateway (docs/logs.md): a
#: retry is recognised by its first record's sequence while the window
#: holds it, so an idempotent batch is at most this long.
PRODUCER_WINDOW = 16

#: Longest a follower's long poll waits at the gateway (its maximum is 60 s).
FOLLOW_WAIT_MS = 20_000


@dataclass(frozen=True)
class Record:
    """One record of a log."""

    offset: int
    data: bytes
    #: When its writer took it, in ms since the Unix epoch (never less than
    #: an earlier record's).
    time_ms: int
    #: The idempotent append's producer id and sequence, when it had them.
    producer_id: str | None = None
    sequence: int | None = None


@dataclass(frozen=True)
class Page:
    """Records read, and the offset to read from next."""

    records: list[Record]
    next_offset: int


def _records(got: LogRecords) -> Page:
    out = []
    for r in got.records:
        producer = r.producer_id if isinstance(r.producer_id, str) else None
        sequence = r.sequence if isinstance(r.sequence, int) else None
        out.append(Record(r.offset, base64.b64decode(r.data), r.time_ms, producer, sequence))
    return Page(out, got.next_)


class Log:
    """A log, by name. Get one from :meth:`Client.log` or :meth:`Client.create_log`.

    Appends are idempotent by default: each carries this handle's producer
    id and the next sequence number, so a retry after a lost answer (a cut
    connection, a 503 or 504) is answered with the first write's offset and
    writes nothing again. One handle's appends are sent one at a time, in
    order (a producer's sequence numbers must arrive in order); for more in
    flight, append batches, or use several handles (each its own producer).

    To keep exactly-once across a restart of the application, give the
    producer id and the sequence to start from yourself (``producer_id=``,
    ``next_sequence=``), kept where the application keeps its own state.
    """

    def __init__(self, client: Client, name: str, *, producer_id: str | None = None, next_sequence: int = 0):
        self._client = client
        self.name = _checked_name(name, "a log's name")
        self.producer_id = producer_id or f"py-{uuid.uuid4().hex}"
        self._next_sequence = next_sequence
        self._lock = threading.Lock()

    def with_producer(self, producer_id: str, *, next_sequence: int) -> Log:
        """This log with another producer id and the sequence to start from:
        above every sequence that producer has used (a sequence at or below
        its last is answered as a duplicate, or refused as too old)."""
        return Log(self._client, self.name, producer_id=producer_id, next_sequence=next_sequence)

    @property
    def next_sequence(self) -> int:
        """The sequence number the next append carries."""
        return self._next_sequence

    # -- reading the log's state ------------------------------------------

    def info(self) -> LogInfo:
        """The log's record: its ledgers with offset ranges, owner epoch, trim point, settings."""
        api = self._client.api
        return self._client.retry.run(lambda: invoke(get_log, self.name, client=api, ok=200))

    def exists(self) -> bool:
        try:
            self.info()
            return True
        except errors.NoSuchLog:
            return False

    # -- appending ------------------------------------------------------

    def append(self, data: bytes, *, expected_offset: int | None = None, idempotent: bool = True) -> int:
        """Appends one record; answers its offset once a quorum of bookies
        has it durably.

        With ``expected_offset``, written only if the log's next offset is
        that (:class:`~quire.errors.PreconditionFailed`, with the actual
        ``next_offset``, otherwise). With ``idempotent=False`` the append
        carries no producer and is not retried (a lost answer leaves its
        outcome unknown).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"a record is bytes, not {type(data).__name__}")
        payload = bytes(data)
        api = self._client.api

        def send(kwargs: dict[str, Any]) -> int:
            body = File(payload=io.BytesIO(payload), mime_type="application/octet-stream")
            return invoke(append_record, self.name, client=api, ok=200, body=body, **kwargs).offset

        kwargs: dict[str, Any] = {}
        if expected_offset is not None:
            kwargs["expected_offset"] = expected_offset
        if not idempotent:
            return send(kwargs)
        with self._lock:
            kwargs.update(producer_id=self.producer_id, sequence=self._next_sequence)
            try:
                return self._client.retry.run(lambda: send(kwargs))
            finally:
                # Spent whatever came of it. An append that failed with its
                # outcome unknown may have been written: the next append
                # reusing its sequence would be answered as its duplicate
                # and not written. The gateway takes gaps.
                self._next_sequence += 1

    def append_batch(
        self, records: Iterable[bytes], *, expected_offset: int | None = None, idempotent: bool = True
    ) -> list[int]:
        """Appends several records atomically: all are written, at
        consecutive offsets, or none; a reader never sees part of a batch.
        Answers their offsets.

        An idempotent batch (the default) is at most
        :data:`PRODUCER_WINDOW` (16) records: the gateway recognises a
        retry of a batch by its first record's sequence, which a longer
        batch pushes out of the producer's window, so its retry would be
        refused as too old after all of it was written. A longer batch
        needs ``idempotent=False`` (not retried) or several calls.
        """
        payloads = [bytes(r) for r in records]
        if not payloads:
            return []
        if idempotent and len(payloads) > PRODUCER_WINDOW:
            raise errors.BadRequest(
                f"an idempotent batch is at most {PRODUCER_WINDOW} records (the producer's window), not "
                f"{len(payloads)}: split it, or pass idempotent=False (then it is not retried)",
                code="BadRequest",
            )
        encoded = [base64.b64encode(p).decode("ascii") for p in payloads]
        api = self._client.api

        def send(body: AppendRecordsBody) -> list[int]:
            return list(invoke(append_records, self.name, client=api, ok=200, body=body).offsets)

        body = AppendRecordsBody(records=encoded)
        if expected_offset is not None:
            body.expected_offset = expected_offset
        if not idempotent:
            return send(body)
        with self._lock:
            body.producer_id = self.producer_id
            body.sequence = self._next_sequence
            try:
                return self._client.retry.run(lambda: send(body))
            finally:
                # Record i carries sequence + i: all of them are spent (see append).
                self._next_sequence += len(payloads)

    # -- reading --------------------------------------------------------

    def read(self, from_offset: int = 0, *, limit: int = 1000) -> Page:
        """Records from ``from_offset`` up to the committed end, at most
        ``limit``. Below the trim point: :class:`~quire.errors.Trimmed`."""
        return self._read(from_=from_offset, limit=limit)

    def read_from_time(self, time_ms: int, *, limit: int = 1000) -> Page:
        """Records from the first whose ``time_ms`` is at or after ``time_ms``."""
        return self._read(from_time=time_ms, limit=limit)

    def _read(self, **kwargs: Any) -> Page:
        api = self._client.api
        return self._client.retry.run(lambda: _records(invoke(read_records, self.name, client=api, ok=200, **kwargs)))

    def follow(self, from_offset: int = 0, *, limit: int = 1000, wait_ms: int = FOLLOW_WAIT_MS) -> Iterator[Record]:
        """Every record from ``from_offset`` on, as they are committed, for
        as long as the caller iterates.

        Each step is a long poll that the gateway answers as soon as a
        record is committed. A dropped connection, a restarted gateway or a
        busy cluster is retried from the next offset not yet yielded, so no
        record is skipped or yielded twice. A record trimmed before it was
        read raises :class:`~quire.errors.Trimmed`; a deleted log,
        :class:`~quire.errors.NoSuchLog`.
        """
        # The long poll waits at the gateway: its own pool, whose timeout
        # covers the longest wait (the client's timeout for other calls).
        api = self._client.poll_api
        next_offset = from_offset
        while True:

            def poll(at: int = next_offset) -> Page:
                got = invoke(
                    read_records, self.name, client=api, ok=200, from_=at, limit=limit, follow=True, wait_ms=wait_ms
                )
                return _records(got)

            page = self._client.retry.run(poll)
            for record in page.records:
                yield record
                # Resume after this one, whatever the next poll meets.
                next_offset = record.offset + 1
            if not page.records:
                next_offset = page.next_offset

    # -- changing the log -----------------------------------------------

    def trim(self, before: int) -> LogInfo:
        """Moves the trim point: records below ``before`` may no longer be
        read, and ledgers wholly below it are deleted."""
        api = self._client.api
        body = TrimLogBody(before=before)
        return self._client.retry.run(lambda: invoke(trim_log, self.name, client=api, ok=200, body=body))

    def take_over(self) -> LogInfo:
        """This gateway writes the log from now on, fencing the earlier owner."""
        api = self._client.api
        return invoke(take_over_log, self.name, client=api, ok=200)

    def delete(self) -> None:
        """Deletes the log and its ledgers."""
        api = self._client.api
        invoke(delete_log, self.name, client=api, ok=204)

    # -- cursors --------------------------------------------------------

    def create_cursor(self, name: str, *, start: str | int = "start", holds_retention: bool = False) -> Cursor:
        """Creates a durable cursor at ``"start"`` (the first record held),
        ``"end"`` (only what comes next) or an offset. One that holds
        retention keeps the log from being trimmed past it."""
        body = PutCursorBody(holds_retention=holds_retention)
        if isinstance(start, int):
            body.position = start
        else:
            body.from_ = PutCursorBodyFrom(start)
        cursor = Cursor(self, name)
        cursor._put(body)
        return cursor

    def cursor(self, name: str) -> Cursor:
        """The cursor of that name (no request is made)."""
        return Cursor(self, name)

    def __repr__(self) -> str:
        return f"Log({self.name!r})"


class Cursor:
    """A durable cursor of a log: the position below which its consumer is
    done. Read from it, then :meth:`ack` what was handled."""

    def __init__(self, log: Log, name: str):
        self.log = log
        self.name = _checked_name(name, "a cursor's name")

    def _put(self, body: PutCursorBody) -> CursorInfo:
        api = self.log._client.api
        return self.log._client.retry.run(
            lambda: invoke(put_cursor, self.log.name, self.name, client=api, ok=200, body=body)
        )

    def info(self) -> CursorInfo:
        api = self.log._client.api
        return self.log._client.retry.run(lambda: invoke(get_cursor, self.log.name, self.name, client=api, ok=200))

    @property
    def position(self) -> int:
        """The first offset not yet acknowledged."""
        return self.info().position

    def read(self, *, limit: int = 1000) -> Page:
        """Records from the cursor's position."""
        return self.log._read(cursor=self.name, limit=limit)

    def follow(self, *, limit: int = 1000, wait_ms: int = FOLLOW_WAIT_MS) -> Iterator[Record]:
        """Every record from the cursor's position now, as they commit (see
        :meth:`Log.follow`). Acknowledge with :meth:`ack` as they are handled."""
        yield from self.log.follow(self.position, limit=limit, wait_ms=wait_ms)

    def ack(self, offset: int) -> CursorInfo:
        """Every record below ``offset`` is done. Forward only: an older
        ``offset`` changes nothing, so a retry is harmless."""
        api = self.log._client.api
        body = AckCursorBody(ack=offset)
        return self.log._client.retry.run(
            lambda: invoke(ack_cursor, self.log.name, self.name, client=api, ok=200, body=body)
        )

    def seek(self, position: int) -> CursorInfo:
        """Moves the cursor to ``position``, back or forward."""
        return self._put(PutCursorBody(position=position))

    def delete(self) -> None:
        api = self.log._client.api
        invoke(delete_cursor, self.log.name, self.name, client=api, ok=204)

    def __repr__(self) -> str:
        return f"Cursor({self.log.name!r}, {self.name!r})"
