"""schemathesis hooks for loadtest/api/check.sh (SCHEMATHESIS_HOOKS=hooks).

One check of quire's own, run on every response of every operation in
every phase: no error answer names an internal address (issue #49). The
cluster's services all listen on 127.0.0.1 here, so a leak shows as
127.0.0.1:<port>; any IPv4 or bracketed IPv6 socket address, or
localhost:<port>, fails it too.
"""

import re

import schemathesis

ADDRESS = re.compile(rb"\b\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}\b|\[[0-9A-Fa-f.%]*:[0-9A-Fa-f:.%]*\](?::\d{1,5})?|\blocalhost:\d{1,5}\b")


@schemathesis.check
def no_internal_address_in_errors(ctx, response, case):
    """An error body names no internal address (a replica's or a bookie's)."""
    if response.status_code < 400:
        return None
    found = ADDRESS.search(response.content or b"")
    if found:
        raise AssertionError(
            f"{response.status_code} names an internal address ({found.group().decode(errors='replace')}): "
            f"{(response.content or b'')[:300].decode(errors='replace')}"
        )
    return None


# Long polls, held no longer than a request here may wait. The config's
# parameter overrides (schemathesis.toml) were seen not to reach every
# phase: fuzzing drew GET /v1/ledgers/{id}/lac?timeout_ms=28261 on a ledger
# nobody writes, which schemathesis gave up on at 10 s. Only values the
# schema admits are changed, so a negative case (a value out of range, a
# wrong type) still goes out as drawn, to be refused.
LONG_POLLS = {
    ("GET", "/v1/ledgers/{id}/lac"): ("timeout_ms", 100),
    ("GET", "/v1/logs/{name}/records"): ("wait_ms", 100),
}


@schemathesis.hook
def map_query(ctx, query):
    op = ctx.operation
    if op is None or not query:
        return query
    poll = LONG_POLLS.get((op.method.upper(), op.path))
    if poll is None:
        return query
    name, most = poll
    value = query.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and most < value <= 60_000:
        query[name] = most
    return query
