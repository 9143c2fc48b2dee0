from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.cursor import Cursor
from ...models.error import Error
from ...models.put_cursor_body import PutCursorBody
from ...types import UNSET, Response, Unset


def _get_kwargs(
    name: str,
    cursor: str,
    *,
    body: PutCursorBody | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/logs/{name}/cursors/{cursor}".format(
            name=quote(str(name), safe=""),
            cursor=quote(str(cursor), safe=""),
        ),
    }

    if not isinstance(body, Unset):
        _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Cursor | Error | None:
    if response.status_code == 200:
        response_200 = Cursor.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 408:
        response_408 = Error.from_dict(response.json())

        return response_408

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())

        return response_413

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Cursor | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    name: str,
    cursor: str,
    *,
    client: AuthenticatedClient | Client,
    body: PutCursorBody | Unset = UNSET,
) -> Response[Cursor | Error]:
    """Create a durable cursor (from start or end, or at a position), or seek it; one that holds retention
    is the log's principal's

    Args:
        name (str):
        cursor (str):
        body (PutCursorBody | Unset): from or position, not both (neither: start; a null position
            or holds_retention is absent); holds_retention only at creation

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Cursor | Error]
    """

    kwargs = _get_kwargs(
        name=name,
        cursor=cursor,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    name: str,
    cursor: str,
    *,
    client: AuthenticatedClient | Client,
    body: PutCursorBody | Unset = UNSET,
) -> Cursor | Error | None:
    """Create a durable cursor (from start or end, or at a position), or seek it; one that holds retention
    is the log's principal's

    Args:
        name (str):
        cursor (str):
        body (PutCursorBody | Unset): from or position, not both (neither: start; a null position
            or holds_retention is absent); holds_retention only at creation

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Cursor | Error
    """

    return sync_detailed(
        name=name,
        cursor=cursor,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    name: str,
    cursor: str,
    *,
    client: AuthenticatedClient | Client,
    body: PutCursorBody | Unset = UNSET,
) -> Response[Cursor | Error]:
    """Create a durable cursor (from start or end, or at a position), or seek it; one that holds retention
    is the log's principal's

    Args:
        name (str):
        cursor (str):
        body (PutCursorBody | Unset): from or position, not both (neither: start; a null position
            or holds_retention is absent); holds_retention only at creation

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Cursor | Error]
    """

    kwargs = _get_kwargs(
        name=name,
        cursor=cursor,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    cursor: str,
    *,
    client: AuthenticatedClient | Client,
    body: PutCursorBody | Unset = UNSET,
) -> Cursor | Error | None:
    """Create a durable cursor (from start or end, or at a position), or seek it; one that holds retention
    is the log's principal's

    Args:
        name (str):
        cursor (str):
        body (PutCursorBody | Unset): from or position, not both (neither: start; a null position
            or holds_retention is absent); holds_retention only at creation

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Cursor | Error
    """

    return (
        await asyncio_detailed(
            name=name,
            cursor=cursor,
            client=client,
            body=body,
        )
    ).parsed
