from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.lac import Lac
from ...types import UNSET, Response, Unset


def _get_kwargs(
    id: int,
    *,
    after: int | Unset = UNSET,
    timeout_ms: int | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["after"] = after

    params["timeout_ms"] = timeout_ms

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/ledgers/{id}/lac".format(
            id=quote(str(id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | Lac | None:
    if response.status_code == 200:
        response_200 = Lac.from_dict(response.json())

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
) -> Response[Error | Lac]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    after: int | Unset = UNSET,
    timeout_ms: int | Unset = UNSET,
) -> Response[Error | Lac]:
    """The LAC; with after and timeout_ms, a long poll

    Args:
        id (int):
        after (int | Unset):
        timeout_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Lac]
    """

    kwargs = _get_kwargs(
        id=id,
        after=after,
        timeout_ms=timeout_ms,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    after: int | Unset = UNSET,
    timeout_ms: int | Unset = UNSET,
) -> Error | Lac | None:
    """The LAC; with after and timeout_ms, a long poll

    Args:
        id (int):
        after (int | Unset):
        timeout_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Lac
    """

    return sync_detailed(
        id=id,
        client=client,
        after=after,
        timeout_ms=timeout_ms,
    ).parsed


async def asyncio_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    after: int | Unset = UNSET,
    timeout_ms: int | Unset = UNSET,
) -> Response[Error | Lac]:
    """The LAC; with after and timeout_ms, a long poll

    Args:
        id (int):
        after (int | Unset):
        timeout_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Lac]
    """

    kwargs = _get_kwargs(
        id=id,
        after=after,
        timeout_ms=timeout_ms,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    after: int | Unset = UNSET,
    timeout_ms: int | Unset = UNSET,
) -> Error | Lac | None:
    """The LAC; with after and timeout_ms, a long poll

    Args:
        id (int):
        after (int | Unset):
        timeout_ms (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Lac
    """

    return (
        await asyncio_detailed(
            id=id,
            client=client,
            after=after,
            timeout_ms=timeout_ms,
        )
    ).parsed
