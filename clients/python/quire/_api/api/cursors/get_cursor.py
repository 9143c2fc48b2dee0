from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.cursor import Cursor
from ...models.error import Error
from ...types import Response


def _get_kwargs(
    name: str,
    cursor: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/logs/{name}/cursors/{cursor}".format(
            name=quote(str(name), safe=""),
            cursor=quote(str(cursor), safe=""),
        ),
    }

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

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

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
) -> Response[Cursor | Error]:
    """A cursor's position

    Args:
        name (str):
        cursor (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Cursor | Error]
    """

    kwargs = _get_kwargs(
        name=name,
        cursor=cursor,
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
) -> Cursor | Error | None:
    """A cursor's position

    Args:
        name (str):
        cursor (str):

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
    ).parsed


async def asyncio_detailed(
    name: str,
    cursor: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[Cursor | Error]:
    """A cursor's position

    Args:
        name (str):
        cursor (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Cursor | Error]
    """

    kwargs = _get_kwargs(
        name=name,
        cursor=cursor,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    cursor: str,
    *,
    client: AuthenticatedClient | Client,
) -> Cursor | Error | None:
    """A cursor's position

    Args:
        name (str):
        cursor (str):

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
        )
    ).parsed
