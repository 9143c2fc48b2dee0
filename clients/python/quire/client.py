"""The entry point: a connection to a quire gateway."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any, Self

import httpx

from ._api import AuthenticatedClient
from ._api import Client as _PlainClient
from ._api.api.bookies import list_bookies
from ._api.api.cluster import get_cluster
from ._api.api.ledgers import create_ledger, list_ledgers
from ._api.api.logs import create_log, list_logs
from ._api.api.service import get_readiness
from ._api.models import (
    BookieList,
    Cluster,
    CreateLedgerBody,
    CreateLedgerBodyMetadataType0,
    CreateLogBody,
    CreateLogBodyRetentionType0,
    CreateLogBodyRolloverType0,
    Status,
)
from ._api.types import Unset
from ._call import RetryPolicy, invoke
from .ledger import Ledger
from .log import Log

#: The longest a gateway holds a long poll (wait_ms, timeout_ms: 60 s).
LONGEST_WAIT_S = 60.0


class Client:
    """A quire cluster, through one of its HTTP gateways.

    ``Client("http://127.0.0.1:8080")``, or with ``token=`` when the gateway
    wants a bearer token. Thread-safe: two connection pools (one for calls,
    one for long polls and follow streams), shared by the :class:`Log` and
    :class:`Ledger` objects it hands out. Use it as a context manager, or
    call :meth:`close`.

    Args:
        url: the gateway's base URL.
        token: a bearer token, when the gateway is configured with tokens.
        timeout_s: how long one request may wait for an answer (a long poll
            adds its own wait to this).
        retry: how long requests that may be sent again are retried.
        verify: TLS verification for an HTTPS gateway: ``True``, ``False``,
            or a CA bundle's path.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        verify: bool | str = True,
    ):
        def typed(timeout_s: float) -> AuthenticatedClient | _PlainClient:
            timeout = httpx.Timeout(timeout_s)
            if token is not None:
                return AuthenticatedClient(base_url=url, token=token, timeout=timeout, verify_ssl=verify)
            return _PlainClient(base_url=url, timeout=timeout, verify_ssl=verify)

        #: The typed layer (quire._api), for what this layer does not cover.
        self.api = typed(timeout_s)
        # Long polls and follow streams wait at the gateway up to a minute
        # (its longest wait): a pool of their own, with that on top.
        self.poll_api = typed(timeout_s + LONGEST_WAIT_S)
        # Made now, not on first use: two threads' first calls would each
        # make one (the typed layer makes them lazily, without a lock).
        self.api.get_httpx_client()
        self.poll_api.get_httpx_client()
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()

    # -- logs ------------------------------------------------------------

    def create_log(
        self,
        name: str,
        *,
        ensemble: int | None = None,
        write_quorum: int | None = None,
        ack_quorum: int | None = None,
        rollover: Mapping[str, int] | None = None,
        retention: Mapping[str, int] | None = None,
    ) -> Log:
        """Creates a log; this gateway writes it. Raises :class:`~quire.errors.LogExists`
        if the name is taken. ``rollover`` takes ``max_entries``,
        ``max_bytes`` and ``max_age_ms``; ``retention`` takes
        ``max_age_ms`` and ``max_bytes`` (0: no limit)."""
        body = CreateLogBody(name=name)
        if ensemble is not None:
            body.ensemble = ensemble
        if write_quorum is not None:
            body.write_quorum = write_quorum
        if ack_quorum is not None:
            body.ack_quorum = ack_quorum
        if rollover is not None:
            body.rollover = CreateLogBodyRolloverType0.from_dict(dict(rollover))
        if retention is not None:
            body.retention = CreateLogBodyRetentionType0.from_dict(dict(retention))
        # Not retried: a create whose answer was lost is LogExists on a retry.
        invoke(create_log, client=self.api, ok=201, body=body)
        return Log(self, name)

    def log(self, name: str) -> Log:
        """The log of that name (no request is made: a missing log raises
        :class:`~quire.errors.NoSuchLog` at its first use)."""
        return Log(self, name)

    def logs(self, *, page_size: int = 100) -> Iterator[str]:
        """Every log's name, in order, a page at a time."""
        for page in self._pages(list_logs, page_size):
            yield from page.logs

    # -- ledgers ---------------------------------------------------------

    def create_ledger(
        self,
        *,
        ensemble: int | None = None,
        write_quorum: int | None = None,
        ack_quorum: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Ledger:
        """Creates a ledger (default E=3, Qw=3, Qa=2); this gateway holds
        its writer."""
        body = CreateLedgerBody()
        if ensemble is not None:
            body.ensemble = ensemble
        if write_quorum is not None:
            body.write_quorum = write_quorum
        if ack_quorum is not None:
            body.ack_quorum = ack_quorum
        if metadata is not None:
            body.metadata = CreateLedgerBodyMetadataType0.from_dict(dict(metadata))
        created = invoke(create_ledger, client=self.api, ok=201, body=body)
        return Ledger(self, created.ledger_id)

    def ledger(self, ledger_id: int) -> Ledger:
        """The ledger of that id (no request is made)."""
        return Ledger(self, ledger_id)

    def ledgers(self, *, page_size: int = 100) -> Iterator[int]:
        """Every ledger's id, in order, a page at a time."""
        for page in self._pages(list_ledgers, page_size):
            yield from page.ledgers

    def _pages(self, operation: ModuleType, page_size: int) -> Iterator[Any]:
        """The pages of a list operation, each from where the last said the next starts."""
        kwargs: dict[str, Any] = {"limit": page_size}
        while True:
            got = self.retry.run(lambda kwargs=dict(kwargs): invoke(operation, client=self.api, ok=200, **kwargs))
            yield got
            if got.next_ is None or isinstance(got.next_, Unset):
                return
            kwargs["start_after"] = got.next_

    # -- the cluster -----------------------------------------------------

    def ready(self) -> Status:
        """The gateway's readiness: the metadata service answers."""
        return invoke(get_readiness, client=self.api, ok=200)

    def bookies(self) -> BookieList:
        """The bookie registry."""
        return self.retry.run(lambda: invoke(list_bookies, client=self.api, ok=200))

    def cluster(self) -> Cluster:
        """The metadata leader, the bookies, under-replication and the auditor."""
        return self.retry.run(lambda: invoke(get_cluster, client=self.api, ok=200))

    # -- lifetime --------------------------------------------------------

    def close(self) -> None:
        """Closes the connection pool."""
        self.api.get_httpx_client().close()
        self.poll_api.get_httpx_client().close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
