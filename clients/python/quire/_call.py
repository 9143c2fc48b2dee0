"""Calling the typed layer: answers turned into values or exceptions, and
the retries an idempotent request may have."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import httpx

from . import errors

T = TypeVar("T")


def invoke(operation: ModuleType, *args: Any, client: Any, ok: int, **kwargs: Any) -> Any:
    """One call of a generated operation (``quire._api.api.<tag>.<operation>``):
    its request as the typed layer builds it, and its answer parsed by the
    typed layer when the status is ``ok``. Any other status is the error it
    is, raised from the status and the body as they came: an error page
    that is not the API's JSON (a proxy's 503) keeps its status and stays
    retryable. The connection failing is :class:`errors.Unavailable`.

    (The typed layer's own ``sync_detailed`` parses every documented
    status as the API's JSON first, and would fail on such a page.)
    """
    request = operation._get_kwargs(*args, **kwargs)
    try:
        response = client.get_httpx_client().request(**request)
    except httpx.TransportError as e:
        raise errors.Unavailable(f"no answer from the gateway: {type(e).__name__}: {e}") from e
    except httpx.HTTPError as e:
        # Not the connection: an answer httpx could not take (a body it
        # could not decode, redirects without end).
        raise errors.ServerError(f"an answer that could not be read: {type(e).__name__}: {e}") from e
    if response.status_code != ok:
        if 200 <= response.status_code < 300:
            raise errors.ServerError(
                f"answered {response.status_code}, where the API answers {ok}", status=response.status_code
            )
        raise errors.error_from(response.status_code, response.content)
    try:
        return operation._build_response(client=client, response=response).parsed
    except (ValueError, KeyError, TypeError) as e:
        # A success whose body is not what the document says.
        raise errors.ServerError(
            f"a {response.status_code} answer that is not the API's: {type(e).__name__}: {e}",
            status=response.status_code,
        ) from e


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
