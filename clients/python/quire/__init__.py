"""quire: a Python client for quire's HTTP API.

    import quire

    with quire.Client("http://127.0.0.1:8080") as q:
        log = q.create_log("orders")
        offset = log.append(b"first")          # idempotent: retried safely
        for record in log.follow(from_offset=0):
            print(record.offset, record.data)
            break

Two layers: this one (Client, Log, Ledger, Cursor; bytes in and out; errors
as exceptions by their API code; idempotent appends; follows that resume),
and quire._api, generated from the gateway's OpenAPI document by
openapi-python-client, for anything this one does not cover.
"""

from . import errors
from ._call import RetryPolicy
from .client import Client
from .errors import QuireError
from .ledger import Entry, Ledger
from .log import Cursor, Log, Page, Record

__all__ = [
    "Client",
    "Cursor",
    "Entry",
    "Ledger",
    "Log",
    "Page",
    "QuireError",
    "Record",
    "RetryPolicy",
    "errors",
]
__version__ = "0.1.0"
