"""Calling the typed layer: answers turned into values or exceptions, and
the retries an idempotent request may have."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from . import errors
from ._api.types import Response

T = TypeVar("T")


def expect(response: Response[Any], *statuses: int) -> Any:
    """The parsed body of an answer with one of `statuses`; else the error
    it is, raised."""
    if int(response.status_code) in statuses:
        return response.parsed
    raise errors.error_from(int(response.status_code), response.content)


@dataclass(frozen=True)
class RetryPolicy:
    """How long a request that may be sent again is retried.

    A request is retried when no answer came (the connection failed or was
    cut) or the answer says the cluster was unavailable, overloaded or slow
    (503, 504, 408): reads always, appends only when they carry a producer
    id and sequence (the gateway answers a retry of one it wrote with the
    first offset). Backoff doubles from `first_backoff_s` to
    `max_backoff_s`, with jitter, until `deadline_s` has passed.
    """

    deadline_s: float = 30.0
    first_backoff_s: float = 0.05
    max_backoff_s: float = 2.0

    def run(self, attempt: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep) -> T:
        """`attempt()` until it returns, raises what is not retryable, or the
        deadline passes (then the last error rises)."""
        start = time.monotonic()
        backoff = self.first_backoff_s
        while True:
            try:
                return attempt()
            except errors.QuireError as e:
                if not e.retryable or time.monotonic() - start + backoff > self.deadline_s:
                    raise
            sleep(backoff * (0.5 + random.random() / 2))
            backoff = min(backoff * 2, self.max_backoff_s)


def transport(call: Callable[[], T]) -> T:
    """`call()`, with a failed or cut connection raised as
    :class:`errors.Unavailable` (retryable: the request may or may not have
    been carried out)."""
    try:
        return call()
    except httpx.TransportError as e:
        raise errors.Unavailable(f"no answer from the gateway: {type(e).__name__}: {e}") from e
    except (ValueError, KeyError) as e:
        # The typed layer could not read the answer as the API's JSON (a
        # proxy's error page, say).
        raise errors.ServerError(f"an answer that is not the API's: {type(e).__name__}: {e}") from e
