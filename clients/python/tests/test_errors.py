"""The API's error bodies as exceptions (no cluster needed)."""

from __future__ import annotations

import quire
from quire import errors


def test_each_code_is_its_class_and_an_unknown_one_is_still_an_error() -> None:
    e = errors.error_from(410, b'{"error":"Trimmed","message":"offset 1 of log l is trimmed"}')
    assert isinstance(e, errors.Trimmed) and (e.code, e.status) == ("Trimmed", 410)
    e = errors.error_from(412, b'{"error":"PreconditionFailed","message":"m","next_offset":7}')
    assert isinstance(e, errors.PreconditionFailed) and e.next_offset == 7
    e = errors.error_from(409, b'{"error":"SomethingNew","message":"m"}')
    assert isinstance(e, errors.Conflict) and e.code == "SomethingNew"
    e = errors.error_from(502, b"<html>bad gateway</html>")
    assert isinstance(e, errors.ServerError) and "bad gateway" in e.message
    e = errors.error_from(503, b'{"error":"Overloaded","message":"busy"}')
    assert isinstance(e, errors.Overloaded) and e.retryable
    assert isinstance(errors.error_from(404, b""), errors.NotFound)
    assert issubclass(errors.NoSuchLog, quire.QuireError)


def test_the_retry_policy_retries_only_what_may_be_sent_again() -> None:
    policy = quire.RetryPolicy(deadline_s=5, first_backoff_s=0.001)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise errors.Unavailable("cut")
        return "ok"

    assert policy.run(flaky, sleep=lambda s: None) == "ok" and len(calls) == 3
    calls.clear()

    def refused() -> str:
        calls.append(1)
        raise errors.BadRequest("no")

    try:
        policy.run(refused, sleep=lambda s: None)
    except errors.BadRequest:
        pass
    assert len(calls) == 1
