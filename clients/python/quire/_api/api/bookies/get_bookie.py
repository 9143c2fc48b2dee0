from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.bookie_detail import BookieDetail
from ...models.error import Error
from ...types import Response


def _get_kwargs(
    bookie: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/bookies/{bookie}".format(
            bookie=quote(str(bookie), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> BookieDetail | Error | None:
    if response.status_code == 200:
        response_200 = BookieDetail.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[BookieDetail | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    bookie: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[BookieDetail | Error]:
    """One bookie, and the ledgers that still name it

    Args:
        bookie (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BookieDetail | Error]
    """

    kwargs = _get_kwargs(
        bookie=bookie,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    bookie: str,
    *,
    client: AuthenticatedClient | Client,
) -> BookieDetail | Error | None:
    """One bookie, and the ledgers that still name it

    Args:
        bookie (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BookieDetail | Error
    """

    return sync_detailed(
        bookie=bookie,
        client=client,
    ).parsed


async def asyncio_detailed(
    bookie: str,
    *,
    client: AuthenticatedClient | Client,
) -> Response[BookieDetail | Error]:
    """One bookie, and the ledgers that still name it

    Args:
        bookie (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BookieDetail | Error]
    """

    kwargs = _get_kwargs(
        bookie=bookie,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    bookie: str,
    *,
    client: AuthenticatedClient | Client,
) -> BookieDetail | Error | None:
    """One bookie, and the ledgers that still name it

    Args:
        bookie (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BookieDetail | Error
    """

    return (
        await asyncio_detailed(
            bookie=bookie,
            client=client,
        )
    ).parsed
