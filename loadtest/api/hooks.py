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
