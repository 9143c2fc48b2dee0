"""Ledgers: entries striped over bookies, read up to the LastAddConfirmed."""

from __future__ import annotations

import base64
import io
import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from . import errors
from ._api.api.ledgers import (
    append_entries,
    append_entry,
    close_ledger,
    delete_ledger,
    get_lac,
    get_ledger,
    read_entries,
    read_entry,
    recover_ledger,
)
from ._api.models import AppendEntriesBody, Recovered
from ._api.models import Ledger as LedgerInfo
from ._api.types import File
from ._call import invoke

if TYPE_CHECKING:
    from .client import Client


@dataclass(frozen=True)
class Entry:
    """One entry of a ledger."""

    entry_id: int
    data: bytes


class Ledger:
    """A ledger, by id. Get one from :meth:`Client.create_ledger` or :meth:`Client.ledger`.

    Only the gateway that created a ledger holds its writer: appends go
    there. A ledger append has no producer id, so one whose answer was lost
    is not retried (it may have been written); a log's appends are.
    """

    def __init__(self, client: Client, ledger_id: int):
        self._client = client
        self.ledger_id = ledger_id

    def _retried(self, operation: Any, *args: Any, ok: int = 200, api: Any = None, **kwargs: Any) -> Any:
        api = api or self._client.api
        return self._client.retry.run(lambda: invoke(operation, self.ledger_id, *args, client=api, ok=ok, **kwargs))

    def info(self) -> LedgerInfo:
        """The ledger's metadata: state, quorums, ensembles, last entry."""
        return self._retried(get_ledger)

    # -- writing --------------------------------------------------------

    def append(self, data: bytes) -> int:
        """Appends one entry; answers its id once Qa bookies have it durably."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"an entry is bytes, not {type(data).__name__}")
        body = File(payload=io.BytesIO(bytes(data)), mime_type="application/octet-stream")
        return invoke(append_entry, self.ledger_id, client=self._client.api, ok=200, body=body).entry_id

    def append_batch(self, entries: Iterable[bytes]) -> range:
        """Appends several entries in order; answers their ids."""
        encoded = [base64.b64encode(bytes(e)).decode("ascii") for e in entries]
        if not encoded:
            return range(0)
        body = AppendEntriesBody(entries=encoded)
        got = invoke(append_entries, self.ledger_id, client=self._client.api, ok=200, body=body)
        return range(got.first_entry_id, got.last_entry_id + 1)

    def close(self) -> LedgerInfo:
        """Closes the ledger (only its writer's gateway may); closing a closed ledger is a no-op."""
        return self._retried(close_ledger)

    def recover(self) -> Recovered:
        """Fences the ledger, recovers it to its true tail and closes it:
        what a reader does when the writer is gone."""
        return self._retried(recover_ledger)

    def delete(self) -> None:
        """Deletes the ledger. A log's ledger is refused
        (:class:`~quire.errors.LedgerInLog`): trim or delete the log."""
        invoke(delete_ledger, self.ledger_id, client=self._client.api, ok=204)

    # -- reading --------------------------------------------------------

    def lac(self) -> int:
        """The LastAddConfirmed: entries up to it may be read (-1: none)."""
        return self._retried(get_lac).lac

    def wait_lac(self, after: int, *, timeout_ms: int = 30_000) -> int:
        """The LAC once it is past ``after``, or as it is after ``timeout_ms``."""
        return self._retried(get_lac, api=self._client.poll_api, after=after, timeout_ms=timeout_ms).lac

    def read(self, from_entry: int = 0, to_entry: int | None = None) -> list[Entry]:
        """Entries ``from_entry..=to_entry`` (default: to the LAC)."""
        kwargs: dict[str, Any] = {"from_": from_entry}
        if to_entry is not None:
            kwargs["to"] = to_entry
        got = self._retried(read_entries, **kwargs)
        return [Entry(e.entry_id, base64.b64decode(e.data)) for e in got.entries]

    def read_entry(self, entry_id: int) -> bytes:
        """One entry's bytes."""
        return self._retried(read_entry, entry_id).payload.read()

    def follow(self, from_entry: int = 0, *, to_entry: int | None = None) -> Iterator[Entry]:
        """Every entry from ``from_entry`` as the LAC passes it, until the
        ledger closes (or ``to_entry`` is reached): then the iteration ends.

        One stream (NDJSON) from the gateway. A dropped stream, a restarted
        gateway or a busy cluster is resumed from the entry after the last
        one yielded, so none is skipped or yielded twice. Reopening backs
        off as the client's :class:`~quire.RetryPolicy` says; when neither
        an entry nor a heartbeat has come for the policy's deadline (the
        stream cannot be opened, or each one opened fails), the last
        failure is raised.
        """
        policy = self._client.retry
        http = self._client.poll_api.get_httpx_client()
        next_entry = from_entry
        backoff = policy.first_backoff_s
        alive_at = time.monotonic()
        while to_entry is None or next_entry <= to_entry:
            params: dict[str, Any] = {"from": next_entry, "follow": "true"}
            if to_entry is not None:
                params["to"] = to_entry

            def open_stream(params: dict[str, Any] = params) -> httpx.Response:
                request = http.build_request(
                    "GET",
                    f"/v1/ledgers/{self.ledger_id}/entries",
                    params=params,
                    headers={"Accept": "application/x-ndjson"},
                )
                try:
                    response = http.send(request, stream=True)
                except httpx.TransportError as e:
                    raise errors.Unavailable(f"no answer from the gateway: {type(e).__name__}: {e}") from e
                if response.status_code != 200:
                    try:
                        content = response.read()
                    except httpx.TransportError as e:
                        raise errors.Unavailable(f"the answer was cut: {type(e).__name__}: {e}") from e
                    finally:
                        response.close()
                    raise errors.error_from(response.status_code, content)
                return response

            response = policy.run(open_stream)
            failure: errors.QuireError = errors.Unavailable("the follow stream ended before the ledger closed")
            try:
                for line in response.iter_lines():
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if "entry_id" in msg:
                        entry = Entry(int(msg["entry_id"]), base64.b64decode(msg["data"]))
                        if entry.entry_id < next_entry:
                            continue
                        next_entry = entry.entry_id + 1
                        backoff, alive_at = policy.first_backoff_s, time.monotonic()
                        yield entry
                    elif msg.get("closed") or msg.get("end"):
                        return
                    elif "error" in msg:
                        # The follow failed at the gateway: the error line is
                        # the API's error body.
                        failure = errors.error_from(0, line.encode())
                        if not failure.retryable:
                            raise failure
                        break
                    else:
                        # A heartbeat: the stream is alive.
                        backoff, alive_at = policy.first_backoff_s, time.monotonic()
            except (httpx.TransportError, ValueError) as e:
                # Cut mid-stream (a partial last line, too): open it again
                # from the next entry.
                failure = errors.Unavailable(f"the follow stream was cut: {type(e).__name__}: {e}")
            finally:
                response.close()
            if time.monotonic() - alive_at + backoff > policy.deadline_s:
                raise failure
            time.sleep(backoff * (0.5 + random.random() / 2))
            backoff = min(backoff * 2, policy.max_backoff_s)

    def __repr__(self) -> str:
        return f"Ledger({self.ledger_id})"
