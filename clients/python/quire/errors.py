"""The API's errors as exceptions, one class per error code.

Every error the gateway answers is ``{"error": "<Code>", "message": "..."}``
with an HTTP status; each code is a class here, so a caller catches what it
can act on (``except quire.errors.Trimmed``) and lets the rest rise. A code this
version does not know is a plain :class:`QuireError` with its code and
status, never a crash.
"""

from __future__ import annotations

import json
from typing import Any


class QuireError(Exception):
    """An error the gateway answered (or, for :class:`Unavailable`, could not).

    Attributes:
        code: the API's stable code (``"NoSuchLog"``), or ``""`` without one.
        status: the HTTP status, or 0 when no answer came.
        message: the gateway's explanation, for people.
        body: the whole error body as JSON, when there was one.
    """

    code = ""

    def __init__(self, message: str, *, code: str = "", status: int = 0, body: dict[str, Any] | None = None):
        super().__init__(f"{code or type(self).__name__}: {message}" if (code or status) else message)
        if code:
            self.code = code
        self.status = status
        self.message = message
        self.body = body or {}

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later as it is (the cluster
        was busy, unreachable or slow); an idempotent request may be sent
        again."""
        return False


class BadRequest(QuireError):
    """400: the request is malformed or breaks a rule of the API."""

    code = "BadRequest"


class Unauthorized(QuireError):
    """401: the gateway wants a bearer token, and this one is missing or wrong."""

    code = "Unauthorized"


class Forbidden(QuireError):
    """403: the ledger or log is another principal's to change."""

    code = "Forbidden"


class NotFound(QuireError):
    """404 for something that is not a ledger, a log or a cursor."""

    code = "NotFound"


class NoSuchLedger(NotFound):
    code = "NoSuchLedger"


class NoSuchEntry(NotFound):
    code = "NoSuchEntry"


class NoSuchLog(NotFound):
    code = "NoSuchLog"


class NoSuchCursor(NotFound):
    code = "NoSuchCursor"


class NoSuchBookie(NotFound):
    code = "NoSuchBookie"


class RequestTimeout(QuireError):
    """408: the request's body did not arrive in time."""

    code = "RequestTimeout"

    @property
    def retryable(self) -> bool:
        return True


class Conflict(QuireError):
    """409: the state of the ledger or log forbids the request."""

    code = "Conflict"


class LogExists(Conflict):
    code = "LogExists"


class LogFenced(Conflict):
    """Another writer took the log over; this append was not written."""

    code = "LogFenced"


class NotOwner(Conflict):
    code = "NotOwner"


class NotWriter(Conflict):
    code = "NotWriter"


class LedgerFenced(Conflict):
    code = "LedgerFenced"


class LedgerClosed(Conflict):
    code = "LedgerClosed"


class LedgerInLog(Conflict):
    """The ledger is a log's: it goes with the log's trim or deletion."""

    code = "LedgerInLog"


class SequenceTooOld(Conflict):
    """An idempotent append's sequence is older than the producer's window:
    whether it was written is not known, so it was not written again."""

    code = "SequenceTooOld"


class BookieDecommissioned(Conflict):
    code = "BookieDecommissioned"


class Trimmed(QuireError):
    """410: the offset is below the log's trim point; its records are gone."""

    code = "Trimmed"


class PreconditionFailed(QuireError):
    """412: a conditional append met another next offset; nothing was written.

    Attributes:
        next_offset: the offset the log's next record gets.
    """

    code = "PreconditionFailed"

    @property
    def next_offset(self) -> int:
        return int(self.body.get("next_offset", -1))


class EntryTooLarge(QuireError):
    """413: the entry, record or body is larger than the gateway takes."""

    code = "EntryTooLarge"


class ServerError(QuireError):
    """5xx without a more precise class."""

    code = "Internal"


class Unavailable(ServerError):
    """503 (the cluster is busy or cannot be reached) or no answer at all
    (the connection failed): the request may succeed later."""

    code = "Unavailable"

    @property
    def retryable(self) -> bool:
        return True


class Overloaded(Unavailable):
    code = "Overloaded"


class MetadataUnavailable(Unavailable):
    code = "MetadataUnavailable"


class NotEnoughBookies(Unavailable):
    code = "NotEnoughBookies"


class RecoveryFailed(Unavailable):
    code = "RecoveryFailed"


class Timeout(Unavailable):
    """504: the request's work outlived the gateway's deadline; its outcome
    is not known (an idempotent append may be sent again)."""

    code = "Timeout"


class CorruptEntry(ServerError):
    code = "CorruptEntry"


_BY_CODE: dict[str, type[QuireError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        NoSuchLedger,
        NoSuchEntry,
        NoSuchLog,
        NoSuchCursor,
        NoSuchBookie,
        RequestTimeout,
        LogExists,
        LogFenced,
        NotOwner,
        NotWriter,
        LedgerFenced,
        LedgerClosed,
        LedgerInLog,
        SequenceTooOld,
        BookieDecommissioned,
        Trimmed,
        PreconditionFailed,
        EntryTooLarge,
        Overloaded,
        MetadataUnavailable,
        NotEnoughBookies,
        RecoveryFailed,
        Timeout,
        CorruptEntry,
    )
}

_BY_STATUS: dict[int, type[QuireError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    409: Conflict,
    410: Trimmed,
    412: PreconditionFailed,
    413: EntryTooLarge,
    503: Unavailable,
    504: Timeout,
}


def error_from(status: int, content: bytes) -> QuireError:
    """The exception for an error answer: by its code, else by its status."""
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(content) if content else {}
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass
    code = body.get("error") if isinstance(body.get("error"), str) else ""
    message = body.get("message") if isinstance(body.get("message"), str) else content[:200].decode("utf-8", "replace")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else QuireError)
    return cls(message or f"HTTP {status}", code=code or cls.code, status=status, body=body)
